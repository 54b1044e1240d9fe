"""The operator console: find any event, see why it failed, replay it.

`create_blueprint` mounts it in any Flask app; `webhooks.console.app` runs it on its own
(`webhooks console`, the Procfile's `console`). Imports shared/ only.
"""

from webhooks.console.blueprint import create_blueprint
from webhooks.console.settings import ConsoleSettings

__all__ = ["ConsoleSettings", "create_blueprint"]
