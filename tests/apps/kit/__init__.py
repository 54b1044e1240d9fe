"""Handler apps that break exactly-once, each beside its fix: what `webhooks check-handlers`
(webhooks.testing) must fail, and must pass. Each app is one module, run alone
(`WEBHOOK_HANDLERS=tests.apps.kit.check_then_insert`), with its own tables (a prefix of its
own) and its own migrations (migrations/<app>/, one revision each); a wrong app and its fix
are never run together. The events to apply are in events/ (invoices.json,
subscriptions.json), built from examples/stripe/.

This module imports none of them (importing an app registers its handlers and checks): it
only names them, each wrong app with its fix and the events that exercise it.
"""

from __future__ import annotations

from pathlib import Path

EVENTS = Path(__file__).parent / "events"
INVOICES = EVENTS / "invoices.json"
SUBSCRIPTIONS = EVENTS / "subscriptions.json"

# The wrong app's module, its fix's module, and the events file that exercises both.
PAIRS: tuple[tuple[str, str, Path], ...] = tuple(
    (f"{__name__}.{app}", f"{__name__}.{app}_fixed", events)
    for app, events in (
        ("check_then_insert", INVOICES),
        ("unkeyed_increment", INVOICES),
        ("subscription_status", SUBSCRIPTIONS),
        ("http_receipt", INVOICES),
        ("module_global", INVOICES),
    )
)
