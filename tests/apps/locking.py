"""An app with a lock key for Stripe, as the reference app has: the two cannot run together."""

from __future__ import annotations

from typing import Any

from webhooks import LockKey, lock_key


@lock_key("stripe")
def by_object(payload: Any) -> LockKey:
    return LockKey(str(payload.get("id") or ""))
