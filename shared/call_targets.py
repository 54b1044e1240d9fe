"""The targets a handler's calls go to (SPEC "Calls to other APIs"), declared by variables
whose names the operator chooses: `stripe` (the `stripe` library, with the API key of the
event's source), and each name N of a `CALL_<N>_URL` (JSON over HTTPS, the
`Authorization` header `CALL_<N>_AUTHORIZATION`). Each keeps idempotency keys for its
`CALL_<N>_KEY_HOURS` (`CALL_STRIPE_KEY_HOURS` for Stripe), default 24: Stripe's.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from webhooks.shared import variables as v
from webhooks.shared.errors import ConfigError

STRIPE = "stripe"
KEY_HOURS = 24.0  # Stripe keeps an idempotency key at least 24 hours
URL_VARIABLE = re.compile(r"CALL_([A-Z][A-Z0-9_]{0,31})_URL")


@dataclass(frozen=True)
class Target:
    """One target: its name (`stripe`, or N lowercased), its base URL and Authorization
    (None for `stripe`), and how long it keeps an idempotency key."""

    name: str
    url: str | None = None
    authorization: str | None = None
    key_hours: float = KEY_HOURS

    @property
    def key_seconds(self) -> float:
        return self.key_hours * 3600


def _variable(name: str, suffix: str, parse: v.Parser, default: Any = None) -> v.Variable:
    return v.Variable(f"CALL_{name.upper()}_{suffix}", parse, default, "", v.Topic.DEPLOY)


def read(env: Mapping[str, str]) -> dict[str, Target]:
    """Every target, by name: `stripe`, and one per `CALL_<N>_URL` set."""
    hours = v.number(positive=True)
    found = {STRIPE: Target(STRIPE, key_hours=_variable(STRIPE, "KEY_HOURS", hours,
                                                        KEY_HOURS).read(env))}
    for variable in sorted(env):
        matched = URL_VARIABLE.fullmatch(variable)
        if matched is None or not env[variable].strip():
            continue
        name = matched.group(1).lower()
        if name == STRIPE:
            raise ConfigError(variable, "`stripe` calls go through the stripe library, "
                                          "to Stripe's API: it takes no URL")
        found[name] = Target(
            name, _variable(name, "URL", v.http_url).read(env),
            _variable(name, "AUTHORIZATION", v.text).read(env),
            _variable(name, "KEY_HOURS", hours, KEY_HOURS).read(env))
    return found


# The README's rows: (pattern, meaning, default).
ROWS: tuple[tuple[str, str, str], ...] = (
    ("CALL_<N>_URL", "a target of the handlers' calls (`ctx.queue_call(..., target=\"n\")`, "
     "N lowercased): its base URL; JSON with an `Idempotency-Key` header (docs/calls.md)",
     "none: `stripe` only"),
    ("CALL_<N>_AUTHORIZATION", "the `Authorization` header of target N's calls", "none"),
    ("CALL_<N>_KEY_HOURS", "how long target N keeps an idempotency key, in hours (fractions "
     "allowed); `CALL_STRIPE_KEY_HOURS` for `stripe`: past it, a call whose outcome is "
     "unknown is `ambiguous`, never sent again", "`24`"),
)


@dataclass(frozen=True)
class CallTargets:
    """The declaration of the targets' variables (a settings field): their names are the
    operator's, so the README documents them as patterns."""

    doc: str = "call targets"
    topic: v.Topic = v.Topic.DEPLOY

    def read(self, env: Mapping[str, str]) -> dict[str, Target]:
        return read(env)

    def names(self) -> list[str]:
        return ["CALL_STRIPE_KEY_HOURS"]

    def rows_in(self, topic: v.Topic) -> list[tuple[str, str, str]]:
        return list(ROWS) if topic is self.topic else []


def targets_field() -> Any:
    return field(default_factory=lambda: {STRIPE: Target(STRIPE)},
                 metadata={v.DECLARATION: CallTargets()})
