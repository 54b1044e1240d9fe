"""The disputes app's handlers: record each Stripe dispute once, refund its charge once.

They run in the job's transaction (`ctx`): the dispute's row and the queued refund commit
with the job's `done` mark, or not at all. The refund is not made here: a handler may run
more than once before its job commits, and a request to Stripe cannot be rolled back with
it. `ctx.queue_call` records it in the transaction instead, and the worker's call
dispatch makes it after the commit, once per key (docs/calls.md).

Idempotent by business key: the dispute id is the row's primary key, and the charge id is
in the call's key, so a duplicate delivery, a retry, the dispute's next event or a second
dispute of the charge queues nothing more (`queue_call` returns False).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from webhooks import JobContext, PermanentJobError, handler

PROVIDER = "stripe"
# A dispute's events that may still find its charge refundable: Stripe does not say in
# which order they arrive, so either may be the one that queues the refund.
OPEN_TYPES = ("charge.dispute.created", "charge.dispute.updated")
CLOSED_TYPE = "charge.dispute.closed"
# Stripe's final statuses of a dispute (an inquiry's `warning_closed` among them).
CLOSED_STATUSES = ("warning_closed", "won", "lost", "prevented")
# A refund's reason (Stripe allows three): `fraudulent` also adds the card to the
# account's block lists.
REFUND_REASONS = {"fraudulent": "fraudulent", "duplicate": "duplicate"}
OTHER_REASON = "requested_by_customer"

_CLOSED = ", ".join(f"'{status}'" for status in CLOSED_STATUSES)
# One row per dispute, whichever of its events comes first. A later event sets the status
# only if it is newer (its `created`; at the same second, a final status wins), so events
# applied in any order leave the status of the newest. A second insert of the key waits,
# if another transaction inserted it and is still open, for its outcome.
RecordDispute = sa.text(f"""
    INSERT INTO disputes (dispute_id, charge_id, amount, currency, reason, status, status_at,
                          event_id)
    VALUES (:dispute_id, :charge_id, :amount, :currency, :reason, :status, :status_at,
            :event_id)
    ON CONFLICT (dispute_id) DO UPDATE SET status = excluded.status,
                                           status_at = excluded.status_at
    WHERE (excluded.status_at, excluded.status IN ({_CLOSED}))
          > (disputes.status_at, disputes.status IN ({_CLOSED}))
""")

# The refund's id, once a job finds its call sent; never changed after.
NoteRefund = sa.text("""
    UPDATE disputes SET refund_id = :refund_id
    WHERE dispute_id = :dispute_id AND refund_id IS NULL
""")


@dataclass(frozen=True)
class Dispute:
    id: str
    charge: str
    amount: int
    currency: str
    reason: str
    status: str
    refundable: bool


def dispute_of(payload: dict[str, Any]) -> Dispute:
    """The dispute of the event; PermanentJobError when a field is missing (another
    attempt would find it missing too: the job fails at once)."""
    data = payload.get("data")
    obj = data.get("object") if isinstance(data, dict) else None
    if not isinstance(obj, dict) or obj.get("object") != "dispute":
        raise PermanentJobError("data.object is not a dispute")
    dispute_id, charge, currency, reason, status = (
        _text(obj, name) for name in ("id", "charge", "currency", "reason", "status"))
    amount = obj.get("amount")
    if not isinstance(amount, int) or isinstance(amount, bool) or amount <= 0:
        raise PermanentJobError("the dispute's amount is not a positive integer")
    return Dispute(dispute_id, charge, amount, currency.lower(), reason, status,
                   obj.get("is_charge_refundable") is True)


def _text(obj: dict[str, Any], name: str) -> str:
    value = obj.get(name)
    if not isinstance(value, str) or not value:
        raise PermanentJobError(f"the dispute's {name} is missing or not a string")
    return value


def refund_key(charge: str) -> str:
    """The refund's call key, and Stripe's Idempotency-Key: one refund per charge."""
    return f"refund:{charge}"


@handler(PROVIDER, *OPEN_TYPES)
def refund_disputed_charge(ctx: JobContext) -> str:
    dispute = _record(ctx)
    if not dispute.refundable:  # a chargeback: Stripe refuses a refund; answer the dispute
        return "recorded; the charge cannot be refunded"
    queued = ctx.queue_call(
        key=refund_key(dispute.charge), target="stripe", method="POST", path="/v1/refunds",
        params={"charge": dispute.charge, "amount": dispute.amount,
                "reason": REFUND_REASONS.get(dispute.reason, OTHER_REASON),
                "metadata[dispute]": dispute.id})
    refund = _note_refund(ctx, dispute)
    if queued:
        return "recorded; refund queued"
    return f"refunded by {refund}" if refund else "refund already queued"


@handler(PROVIDER, CLOSED_TYPE)
def close_dispute(ctx: JobContext) -> str:
    dispute = _record(ctx)
    refund = _note_refund(ctx, dispute)
    return f"closed: {dispute.status}" + (f"; refunded by {refund}" if refund else "")


def _record(ctx: JobContext) -> Dispute:
    dispute = dispute_of(ctx.payload)
    created = ctx.payload.get("created")
    if not isinstance(created, int) or isinstance(created, bool):
        raise PermanentJobError("the event has no `created` time")
    ctx.conn.execute(RecordDispute, {
        "dispute_id": dispute.id, "charge_id": dispute.charge, "amount": dispute.amount,
        "currency": dispute.currency, "reason": dispute.reason, "status": dispute.status,
        "status_at": created, "event_id": ctx.event_id})
    return dispute


def _note_refund(ctx: JobContext, dispute: Dispute) -> str | None:
    """The refund's id if its call was sent before this job ran (None until then: the
    handler is right either way, a later event notes it), kept on the dispute's row."""
    result = ctx.call_result(refund_key(dispute.charge))
    body = result["body"] if result is not None else None
    refund = body.get("id") if isinstance(body, dict) else None  # None: settled by hand
    if not isinstance(refund, str):
        return None
    ctx.conn.execute(NoteRefund, {"dispute_id": dispute.id, "refund_id": refund})
    return refund
