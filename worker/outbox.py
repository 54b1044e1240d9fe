"""Dispatch outbox emails through Postmark, once per idempotency key. The transitions
are shared.models.EmailStatus's; a claim leases a row for LEASE_SECONDS. What follows each
outcome (sent, failed, retried, released) is the rule every dispatch shares
(worker/dispatch.py `next_step`); what is the outbox's own is below: one Postmark request
per claimed batch, the search before a send whose earlier outcome is unknown, and one
dispatch loop per process.

No database transaction is open during an HTTP call: the claim commits first, and the
outcomes are written in a second short transaction. Every mark is guarded by the attempt
number this dispatcher claimed (`attempts = :attempts`), so a dispatcher whose lease ran
out and whose row was re-claimed cannot mark it.

Postmark has no idempotency header. A row claimed with attempts > 1 had an attempt whose
outcome was never recorded (crash, timeout, lost response, 5xx): before sending again we
search Postmark's outbound messages by `metadata_idempotency_key`, and if the message is
there the row is marked sent without sending. That search is the only way a second send
of a key could happen: if Postmark accepted a message but it is not yet searchable when
the retry runs (retries start at least retries.EMAIL_MIN_DELAY_SECONDS later; crashes wait
a lease).

After a database failover (shared/failover.py) a row's first attempt is no proof either:
with an asynchronous standby, the old primary's "sent" mark may be lost and the row (or
the job that queued it, applied again) back at attempt 1, while Postmark has the message.
So for RECONCILE_AFTER_FAILOVER_HOURS after the latest failover every claimed row is
searched before it is sent. The dispatcher learns of a failover in the claim's own
transaction, one small statement per claimed batch (never one per email): a failover
recorded while a batch is in flight is seen by the next claim. It does not wait for the
clock to record the failover: the same statement compares the timeline the claim's own
connection writes on with the recorded ones, and one with no row yet (a promoted standby
that no sweep has seen, or nothing recorded at all) is searched too
(failover.search_first_sends). A claim on the new primary sees its new timeline: no
first send is blind between the promotion and the clock's next sweep.

A wake-up message (worker/actors.py) runs `on_wakeup`: the process's one dispatch loop
(OneDispatchPerProcess), round after round of `dispatch_due` while emails are due. A job
batch that queued emails calls `wake`, which hands them to that loop if it runs here.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import dramatiq
import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from webhooks.shared import db, failover, metrics, notifications, queries, tracing, wakeups
from webhooks.shared.errors import EmailOutcomeUnknown, EmailRejected, describe
from webhooks.shared.queries import ClaimedEmail
from webhooks.shared.settings import Settings
from webhooks.worker import dispatch, postmark, retries
from webhooks.worker.postmark import OutboundEmail, Outcome, Sender, Sent

log = logging.getLogger(__name__)

# A claimed row is hidden from other dispatchers this long: far beyond the HTTP client's
# timeout, so it only runs out when the dispatcher died.
LEASE_SECONDS = 45.0
# No call to Postmark starts later than this after the claim, so every call ends (at the
# client's timeout at worst) well inside the lease. Rows not reached are given back.
SEND_DEADLINE_SECONDS = 20.0
# Well inside the actor's time limit: a message that ran on for ever would be interrupted
# at an arbitrary point.
LOOP_SECONDS = 60.0
# Between two rounds of a dispatch that found fewer emails than a full claim, emails gather
# this long: at a steady rate, one claim and one mark carry several batches' emails.
GATHER_SECONDS = 0.05


@dataclass
class EmailRound:
    sent: int = 0
    failed: int = 0
    retried: int = 0
    more: bool = False  # a full batch was claimed: more rows may be due
    claimed: int = 0
    released: int = 0  # not attempted before the deadline: due again at once
    notified: notifications.Queued = field(default_factory=notifications.Queued)


def on_wakeup(engine: Engine, settings: Settings, broker: dramatiq.Broker) -> None:
    """Send due emails, round after round while any is due, in this process's one dispatch
    loop; for at most LOOP_SECONDS, then a fresh message carries on."""
    if not _DISPATCH.run(partial(_round, engine, settings, broker), LOOP_SECONDS):
        wakeups.wake_outbox(broker, 1)


def wake(broker: dramatiq.Broker) -> bool:
    """After a batch committed emails: the dispatch loop running in this process takes
    them, else a message wakes a dispatch in some worker process (True)."""
    if _DISPATCH.mark_due():
        wakeups.wake_outbox(broker, 1)
        return True
    return False


def _round(engine: Engine, settings: Settings, broker: dramatiq.Broker) -> None:
    result = dispatch_due(engine, settings)
    if result.notified.due_now:
        wakeups.wake_notifications(broker)
    if result.notified.tail_in is not None:
        wakeups.wake_notifications(broker, delay=result.notified.tail_in + 0.5)
    if result.more:
        wakeups.wake_outbox(broker, 1)  # here again, or another process
    elif result.claimed:
        time.sleep(GATHER_SECONDS)


def dispatch_due(engine: Engine, settings: Settings, limit: int = wakeups.EMAILS_PER_MESSAGE,
                 *, sender: Sender | None = None) -> EmailRound:
    """Claim up to `limit` due emails, send them, and record each outcome."""
    sender = sender or postmark.sender_for(settings)
    deadline = time.monotonic() + SEND_DEADLINE_SECONDS
    rows, search_all = _claim(engine, limit, settings.reconcile_after_failover_hours)
    result = EmailRound(claimed=len(rows), more=len(rows) >= limit)
    if rows:
        outcomes = _attempt(sender, rows, retries.for_emails(settings), deadline,
                            search_all=search_all)
        _record(engine, settings, rows, outcomes, result)
    return result


def _claim(engine: Engine, limit: int, window_hours: float) -> tuple[list[ClaimedEmail], bool]:
    """The claimed rows, and whether each must be searched for before its first send (a
    timeline not recorded yet, or a failover within the window: the module's
    docstring)."""
    with db.transaction(engine) as conn:
        rows = db.fetch_all_in(conn, queries.OutboxClaimDue,
                               {"limit": limit, "lease": LEASE_SECONDS}, ClaimedEmail)
        search_all = bool(rows) and failover.search_first_sends(conn, window_hours)
    return sorted(rows, key=lambda row: row.id), search_all


def _attempt(sender: Sender, rows: Sequence[ClaimedEmail], policy: retries.Retries,
             deadline: float, *, search_all: bool = False) -> dict[int, Outcome]:
    """Search for the rows with an earlier attempt (every row, with search_all), then
    send the rest in one request."""
    outcomes: dict[int, Outcome] = {}
    to_send = []
    for row in rows:
        if time.monotonic() > deadline:
            break
        if row.attempts > 1 or search_all:
            with tracing.span("postmark search", row.trace_context, _span_attributes(row)):
                found = _search(sender, row, policy)
            if found is not None:
                outcomes[row.id] = found
                continue
        to_send.append(row)
    if to_send and time.monotonic() <= deadline:
        outcomes.update(_send(sender, to_send))
    return outcomes


def _send(sender: Sender, rows: Sequence[ClaimedEmail]) -> dict[int, Outcome]:
    """One request to Postmark for the rows; with tracing on, a span in the trace of each
    row's delivery (the request's own span is the first one's child)."""
    with tracing.spans("postmark send", [row.trace_context for row in rows],
                       [_span_attributes(row, batch=len(rows)) for row in rows]) as spans:
        results = sender.send([_email(row) for row in rows])
        for span, outcome in zip(spans, results, strict=True):
            if isinstance(outcome, Sent):
                span.set_attributes({"webhooks.email_outcome": "sent",
                                     "postmark.message_id": outcome.message_id})
            else:
                span.set_attribute("webhooks.email_outcome", describe(outcome))
    return dict(zip((row.id for row in rows), results, strict=True))


def _span_attributes(row: ClaimedEmail, batch: int = 1) -> dict[str, Any]:
    return {"webhooks.idempotency_key": row.idempotency_key, "webhooks.email_kind": row.kind,
            "webhooks.attempt": row.attempts, "webhooks.emails_in_request": batch}


def _search(sender: Sender, row: ClaimedEmail, policy: retries.Retries) -> Outcome | None:
    """Sent if Postmark already has this key; None if the row should be sent now."""
    try:
        message_id = sender.find_sent(row.idempotency_key)
    except EmailOutcomeUnknown as error:
        return error  # without an answer we must not send
    if message_id is not None:
        log.info("email found already sent", extra={**_log_fields(row), "message_id": message_id})
        return Sent(message_id)
    if row.attempts > policy.max_attempts:
        # Only after a crash during the last attempt: it was not sent, and no tries remain.
        return EmailOutcomeUnknown("attempts exhausted")
    return None


def _email(row: ClaimedEmail) -> OutboundEmail:
    return OutboundEmail(idempotency_key=row.idempotency_key, to=row.to_address,
                         subject=row.subject, text_body=row.text_body,
                         html_body=row.html_body)


def _record(engine: Engine, settings: Settings, rows: Sequence[ClaimedEmail],
            outcomes: dict[int, Outcome], result: EmailRound) -> None:
    """Write every outcome in one transaction (the sent ones in one statement), then count
    and log what changed."""
    sent = [row for row in rows if isinstance(outcomes.get(row.id), Sent)]
    policy = retries.for_emails(settings)
    changes = []
    with db.transaction(engine) as conn:
        marked = _mark_sent(conn, sent, outcomes)
        for row in rows:
            outcome = outcomes.get(row.id)
            if isinstance(outcome, Sent):
                change = marked.get(row.id)
            else:
                change = _mark(conn, policy, row, outcome)
            if change is None:
                log.warning("outbox row re-claimed by another dispatcher; outcome dropped",
                            extra=_log_fields(row))
            else:
                changes.append((row, *change))
        # email.failed, in the transaction that fails the email (last: the lock order)
        result.notified += notifications.record(conn, settings, [
            notifications.Occurrence(notifications.Kind.EMAIL_FAILED, row.provider,
                                     samples=[row.idempotency_key], error=params["error"])
            for row, status, params in changes if status == "failed"])
    for row, status, params in changes:
        _report(row, status, params, result)
    # One INFO line per dispatch: the outbox table is the record of every email, so each
    # email's own line is at DEBUG; failures and retries are logged per email (_report).
    log.info("emails dispatched", extra={
        "claimed": len(rows), "sent": result.sent, "failed": result.failed,
        "retried": result.retried, "released": result.released,
        "dropped": len(rows) - len(changes)})


def _mark_sent(conn: Connection, rows: Sequence[ClaimedEmail],
               outcomes: dict[int, Outcome]) -> dict[int, tuple[str, dict[str, Any]]]:
    """Mark the sent rows, each guarded by the attempt we claimed; those whose guard held."""
    message_ids = {}
    for row in rows:
        outcome = outcomes[row.id]
        assert isinstance(outcome, Sent)
        message_ids[row.id] = outcome.message_id
    if not message_ids:
        return {}
    updated = db.fetch_scalars_in(conn, queries.OutboxMarkSentMany, {
        "ids": list(message_ids), "attempts": [row.attempts for row in rows],
        "message_ids": list(message_ids.values()),
    })
    return {id_: ("sent", {"message_id": message_ids[id_]}) for id_ in updated}


def _mark(conn: Connection, policy: retries.Retries, row: ClaimedEmail,
          outcome: EmailRejected | EmailOutcomeUnknown | None) -> tuple[str, dict[str, Any]] | None:
    """Apply one outcome other than sent (None: never reached before the deadline, given
    back now), guarded by the attempt we claimed; None if the guard failed. What follows
    the outcome is worker/dispatch.py's one rule (`next_step`)."""
    guard = {"id": row.id, "attempts": row.attempts}
    found = dispatch.next_step(postmark.as_outcome(outcome), row.attempts, policy)
    status = str(found.step)
    statement: sa.TextClause
    params: dict[str, Any]
    if found.step is dispatch.Step.FAILED:
        statement, params = queries.OutboxMarkFailed, {**guard, "error": found.error}
    else:  # retried, or released (no delay)
        statement = queries.OutboxMarkRetry
        params = {**guard, "delay": found.delay, "error": found.error}
    updated = conn.execute(statement, params).rowcount
    return (status, params) if updated == 1 else None


def _report(row: ClaimedEmail, status: str, params: dict[str, Any],
            result: EmailRound) -> None:
    log_fields = {**_log_fields(row), "attempts": row.attempts}
    if status == "sent":
        result.sent += 1
        metrics.outbox_sent.inc()
        log.debug("email sent", extra={**log_fields, "message_id": params["message_id"]})
    elif status == "failed":
        result.failed += 1
        metrics.outbox_failed.inc()
        log.error("email failed", extra={**log_fields, "error": params["error"]})
    elif status == "retried":
        result.retried += 1
        log.warning("email attempt failed, will retry",
                    extra={**log_fields, "delay": round(params["delay"], 2),
                           "error": params["error"]})
    else:
        result.more = True  # due again right now
        result.released += 1
        log.debug("email not attempted in time, released", extra=log_fields)


def _log_fields(row: ClaimedEmail) -> dict[str, Any]:
    return {"idempotency_key": row.idempotency_key, "outbox_id": row.id, "kind": row.kind,
            "provider": row.provider, "event_id": row.event_id}


class OneDispatchPerProcess:
    """At most one dispatch loop at a time in this process; wake-ups that arrive while it
    runs make it go round again instead of starting another. Concurrent dispatches in one
    process would only split the due emails into smaller claims and Postmark requests,
    and slow the drain (benchmarks/results/README.md)."""

    def __init__(self) -> None:
        self._running = threading.Lock()
        self._due = threading.Event()

    def mark_due(self) -> bool:
        """Ask for a round. False: a loop runs in this process and will take it. True:
        none runs here, the caller must send a wake-up message."""
        self._due.set()
        return not self._running.locked()

    def run(self, one_round: Callable[[], None], max_seconds: float) -> bool:
        """Run rounds while any is due. False if it stopped after max_seconds with a round
        still due (the caller sends a fresh message to carry on)."""
        self._due.set()
        # The outer loop looks at _due again after the lock is let go: a mark_due() that
        # saw the lock held while the inner loop was finishing is not lost.
        while self._due.is_set():
            if not self._running.acquire(blocking=False):
                return True  # the loop running in this process will see _due
            try:
                deadline = time.monotonic() + max_seconds
                while self._due.is_set():
                    if time.monotonic() > deadline:
                        return False
                    self._due.clear()
                    one_round()
            finally:
                self._running.release()
        return True


# Wake-ups for emails go to the dispatch loop running in this process when there is one.
_DISPATCH = OneDispatchPerProcess()
