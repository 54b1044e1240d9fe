"""The operator console: find any event, see why it failed, replay it.

`create_blueprint` mounts it in any Flask app; `console.app` runs it on its own
(`webhooks console`, the Procfile's `console`). Imports shared/ only.
"""

from console.blueprint import create_blueprint
from console.settings import ConsoleSettings

__all__ = ["ConsoleSettings", "create_blueprint"]
