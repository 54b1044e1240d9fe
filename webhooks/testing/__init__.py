"""The test kit (the `testing` extra): prove an app's handlers exactly-once before
production, under the schedules providers and this system really produce
(docs/testing-your-app.md). `webhooks check-handlers FILE...` runs it; so does a team's own
pytest suite, through the plugin (webhooks/testing/pytest_plugin.py).

    from webhooks.testing import Kit, check, database, read_events

    with database(os.environ.get("DATABASE_URL")) as url, Kit(url, ["acme_billing"]) as kit:
        result = check(kit, read_events(["events.json"]))
        assert result.ok, result.report()
"""

from webhooks.testing.check import Result, check
from webhooks.testing.events import Event, UnreadableEvents, event, read_events
from webhooks.testing.kit import Kit, KitError, database

__all__ = ["Event", "Kit", "KitError", "Result", "UnreadableEvents", "check", "database",
           "event", "read_events"]
