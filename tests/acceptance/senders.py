"""Deliveries from separate OS processes, as a provider's many senders would make them.

Each sender is a `spawn`ed process with its own HTTP client. All senders start together
once every one of them is up; each signs every delivery just before sending it (fresh
timestamps), optionally at a scheduled offset from that common start, so that many
processes hit the same event at the same instant, and reports one Answer per delivery.
Light on purpose: only the standard library, requests and the signing module.
"""

from __future__ import annotations

import multiprocessing
import queue
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import requests

from tests.acceptance.signing import delivery_headers
from tests.acceptance.world import Event


@dataclass(frozen=True)
class Answer:
    index: int  # position in the caller's delivery list
    key: tuple[str, str]  # (provider, event_id)
    status: int  # 0: no HTTP answer (connection refused or reset, timeout)
    duplicate: bool | None
    retry_after: str | None
    started: float  # wall clock, comparable across processes
    ended: float
    error: str = ""


# (index, event, offset): send `offset` seconds after the common start (None: at once)
Planned = tuple[int, Event, float | None]


def post(session: requests.Session, base_url: str, index: int, event: Event) -> Answer:
    headers = delivery_headers(event.provider, event.body, event.event_id, event.event_type,
                               event.secret)
    started = time.time()
    try:
        response = session.post(f"{base_url}{event.path}", data=event.body,
                                headers=headers, timeout=30)
    except requests.RequestException as error:
        return Answer(index, event.key, 0, None, None, started, time.time(),
                      f"{type(error).__name__}: {error}"[:300])
    duplicate = None
    if response.status_code == 200:
        duplicate = bool(response.json().get("duplicate"))
    return Answer(index, event.key, response.status_code, duplicate,
                  response.headers.get("Retry-After"), started, time.time(),
                  "" if response.status_code == 200 else response.text[:300])


def _sender(base_url: str, plan: list[Planned], results: Any, ready: Any, go: Any,
            start: Any) -> None:
    answers = []
    with requests.Session() as session:
        ready.put(1)
        go.wait()
        for index, event, offset in plan:
            if offset is not None:
                time.sleep(max(0.0, start.value + offset - time.time()))
            answers.append(post(session, base_url, index, event))
    results.put(answers)


def send(base_url: str, plans: Sequence[list[Planned]], timeout: float = 900) -> list[Answer]:
    """Run one spawned sender process per plan, started together; every answer, by index."""
    context = multiprocessing.get_context("spawn")
    results, ready, go = context.Queue(), context.Queue(), context.Event()
    start = context.Value("d", 0.0)
    workers = [context.Process(target=_sender, args=(base_url, plan, results, ready, go, start),
                               daemon=True) for plan in plans]
    for worker in workers:
        worker.start()
    answers: list[Answer] = []
    try:
        for _ in workers:
            ready.get(timeout=120)
        start.value = time.time() + 0.1
        go.set()
        deadline = time.monotonic() + timeout
        for _ in workers:
            answers.extend(results.get(timeout=max(1.0, deadline - time.monotonic())))
    except queue.Empty:
        raise TimeoutError("a sender process did not start or report in time") from None
    finally:
        for worker in workers:
            worker.join(5)
            if worker.is_alive():
                worker.kill()
    return sorted(answers, key=lambda answer: answer.index)


def spread(events: Sequence[Event], senders: int, *, rate: float | None = None,
           first_index: int = 0) -> list[list[Planned]]:
    """Deal events round-robin to `senders` plans; with `rate` (deliveries per second,
    all senders together) delivery n is due n / rate seconds after the start."""
    plans: list[list[Planned]] = [[] for _ in range(senders)]
    for n, event in enumerate(events):
        plans[n % senders].append((first_index + n, event, None if rate is None else n / rate))
    return plans


def bursts(events: Sequence[Event], copies: int, *, first_index: int, gap: float = 0.5,
           offset: float = 0.5) -> list[list[Planned]]:
    """`copies` plans (one process each): every plan sends every event, event k at
    offset + k * gap, so each event arrives `copies` times at once from as many processes."""
    return [[(first_index + k * copies + n, event, offset + k * gap)
             for k, event in enumerate(events)] for n in range(copies)]
