"""Wake-ups from a web process: off the request path, and one message per burst.

After its commit a request hands the job id to this process's waker thread and answers at
once. The thread sends one Dramatiq wake-up per JOBS_PER_MESSAGE ids that arrived since it
sent the previous one, and waits a few ms between sends (longer when busy). A worker's
claim takes every due job, not the one named, so one message per burst wakes as many as
the burst needs, for a fraction of the broker round trips (and of the Redis CPU) that one
message per job cost.

Best effort, as the wake-up always was: if the broker is down, or the process dies with
ids not yet sent, the jobs are already committed and the clock's sweeper wakes a worker.
"""

from __future__ import annotations

import logging
import multiprocessing.util
import queue
import threading
import time

import dramatiq

from webhooks.shared import metrics, wakeups
from webhooks.shared.settings import Settings

log = logging.getLogger(__name__)

_STOP = -1
# Between two sends, ids gather for 5 ms per id in the previous send, from 5 ms (a quiet
# stream: a wake-up is at most 5 ms late) up to 40 ms (a busy one). Fewer, fuller messages
# spare the web a broker round trip and the workers a claim and a commit per few jobs
# (the intervals were chosen by measurement: benchmarks/results/README.md).
QUIET_INTERVAL_SECONDS = 0.005
BUSY_INTERVAL_SECONDS = 0.04


class Waker:
    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._broker: dramatiq.Broker | None = None  # created on first use: the web
        # starts, and answers, while the broker is down
        self._ids: queue.SimpleQueue[int] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()

    def wake(self, job_id: int) -> None:
        """Queue a wake-up for job_id; never blocks and never raises."""
        if self._thread is None:
            self._start()
        self._ids.put(job_id)

    def close(self, timeout: float = 2.0) -> None:
        """Send what is queued (for at most `timeout` seconds), then stop the thread."""
        if self._thread is not None:
            self._ids.put(_STOP)
            self._thread.join(timeout)

    def _start(self) -> None:
        with self._start_lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="waker", daemon=True)
                self._thread.start()
                # On exit, send what is queued. A multiprocessing finalizer runs both at a
                # plain process's exit (multiprocessing hooks atexit) and at the exit of a
                # server's forked process, which skips atexit.
                multiprocessing.util.Finalize(self, self.close, exitpriority=10)

    def _run(self) -> None:
        while True:
            ids = [self._ids.get()]
            while True:
                try:
                    ids.append(self._ids.get_nowait())
                except queue.Empty:
                    break
            stopping = _STOP in ids
            ids = [job_id for job_id in ids if job_id != _STOP]
            if ids:
                self._send(ids)
            if stopping:
                return
            # At most one send per interval: ids arriving meanwhile share the next message.
            # An id that finds the thread idle is sent at once.
            time.sleep(min(QUIET_INTERVAL_SECONDS * len(ids), BUSY_INTERVAL_SECONDS))

    def _send(self, ids: list[int]) -> None:
        try:
            if self._broker is None:
                self._broker = wakeups.create_broker(self._settings)
        except Exception as error:
            log.warning("broker unreachable, jobs left for the sweeper: %s", error)
            metrics.broker_enqueue_failures.inc(len(ids))
            return
        if not wakeups.wake_jobs(self._broker, ids):
            metrics.broker_enqueue_failures.inc(len(ids))
