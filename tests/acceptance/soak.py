"""The long run: ten minutes of mixed traffic at a steady rate, duplicates included, with a
worker killed (kill -9) about every minute, then the exactly-once checks; prints the counts.
A tenth of the events are World.slow_credit's, whose jobs hold a transaction open 0.2 s.

    python -m tests.acceptance.soak [--minutes 10] [--rate 20]

starts its own private system (tests/acceptance/harness.py) and exits 0 when every check
passed. `pytest --soak` (or WEBHOOKS_SOAK=1 pytest) runs the same as tests/acceptance/
test_soak.py; it is skipped otherwise.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from tests.acceptance import checks, senders
from tests.acceptance.harness import System
from tests.acceptance.senders import Answer
from tests.acceptance.world import World

SENDERS = 4


def run(system: System, minutes: float = 10.0, rate: float = 20.0,
        kill_every: float = 60.0, seed: int = 7100) -> dict[str, Any]:
    """Traffic for `minutes` at `rate` deliveries per second (each event 1 to 3 times,
    in random order), a worker kill every ~`kill_every` seconds; then every check."""
    rng = random.Random(seed)
    world = World(rng=random.Random(seed + 1))
    events = max(1, int(minutes * 60 * rate / 2))
    world.mixed(events - events // 10)
    for _ in range(events // 10):  # no business key: only the job's exactly-once protects
        world.slow_credit()
    deliveries = world.deliveries(low=1, high=3)
    rate = len(deliveries) / (minutes * 60)  # spread exactly over the run
    answers: list[Answer] = []
    traffic = threading.Thread(target=lambda: answers.extend(senders.send(
        system.base_url, senders.spread(deliveries, SENDERS, rate=rate),
        timeout=minutes * 60 + 300)), daemon=True)
    exits_before = sum(len(w.exits) for w in system.workers)
    started = time.monotonic()
    traffic.start()
    kills: list[str] = []
    while traffic.is_alive():
        traffic.join(timeout=kill_every * rng.uniform(0.8, 1.2))
        if not traffic.is_alive():
            break
        killed = system.kill_a_worker(rng, whole_group=len(kills) % 2 == 0)
        if killed is not None:
            kills.append(killed[0])
            print(f"[{time.monotonic() - started:5.0f}s] kill -9 {kills[-1]}; pending "
                  f"(jobs, emails) {system.unfinished()}", flush=True)
    sending = time.monotonic() - started
    settling = system.settle(timeout=300)

    assert len(answers) == len(deliveries), "some deliveries were never answered"
    assert checks.statuses(answers) == {200: len(answers)}, checks.statuses(answers)
    checks.assert_one_first_delivery(answers)
    counts = checks.assert_exactly_once(system, world)
    spans = sorted(a.ended - a.started for a in answers)
    return {
        "minutes": round(sending / 60, 1),
        "deliveries": len(answers),
        "rate_per_second": round(len(answers) / sending, 1),
        "ack_latency_ms_p50_p99_max": [round(spans[int(q * (len(spans) - 1))] * 1000)
                                       for q in (0.5, 0.99, 1.0)],
        "kills": kills,
        "worker_restarts": sum(len(w.exits) for w in system.workers) - exits_before,
        "settled_after_seconds": round(settling, 1),
        **counts,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--rate", type=float, default=20.0, help="deliveries per second")
    parser.add_argument("--kill-every", type=float, default=60.0, help="seconds")
    args = parser.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="webhooks-soak-"))
    system = System(workdir)
    try:
        system.start()
        print(f"system up (logs in {workdir}); {args.minutes:g} min at {args.rate:g}/s",
              flush=True)
        report = run(system, args.minutes, args.rate, args.kill_every)
    except (AssertionError, TimeoutError) as error:
        print(f"FAILED: {error}", file=sys.stderr)
        return 1
    finally:
        system.stop()
    for key, value in report.items():
        print(f"{key}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
