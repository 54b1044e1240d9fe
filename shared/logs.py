"""Logging: JSON lines in production (LOG_FORMAT=json), readable text in dev.

Context such as provider, event_id and job_id is passed with `extra=` and appears on the
line; payloads and secrets are never logged at INFO.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime

from webhooks.shared.settings import Settings
from webhooks.shared.terminal import visible

# Attributes every LogRecord has; anything else came from `extra=`.
_STANDARD = frozenset(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}


def _extras(record: logging.LogRecord) -> dict[str, object]:
    return {k: v for k, v in vars(record).items() if k not in _STANDARD}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
            **_extras(record),
        }
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)


class TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)-7s %(name)s: %(message)s", "%H:%M:%S")

    def formatMessage(self, record: logging.LogRecord) -> str:
        # The message and the extras may carry data (ids, types, errors): their control
        # characters are escaped, so that no value forges a line or drives the terminal.
        saved = record.message
        record.message = visible(saved)
        try:
            text = super().formatMessage(record)
        finally:
            record.message = saved
        extras = " ".join(f"{k}={visible(v)}" for k, v in _extras(record).items())
        return f"{text} {extras}" if extras else text


def configure_logging(settings: Settings) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if settings.log_format == "json" else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(settings.log_level)
    for noisy in ("pika", "urllib3", "apscheduler.executors.default"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
