"""What an app registers beside its handlers, for the parts of the system that run none: the
core knows no app's tables or payloads, it asks these hooks.

    from shared.hooks import Column, Finding, LockKey, Section, audit_check, effects, lock_key

    @lock_key("stripe")          # a batch's order and try-locks (worker/jobs.py)
    def customer(payload) -> LockKey | None: ...

    @effects("stripe")           # what `webhooks show` and the console's event page show
    def ledger(conn, event) -> list[Section]: ...

    @audit_check("stripe", "balances")   # what `webhooks audit` checks
    def balances(conn, since) -> Iterable[Finding]: ...

A provider has at most one lock key; effects and audit checks add up, shown and run in the
order they were registered. Without a lock key a provider's jobs run in job id order and
take no try-lock. Effects and audit checks only read, on the connection they are given.

Hooks are found as handlers are (`load`): the built-in modules, the modules named in
WEBHOOK_HANDLERS and the `webhooks.handlers` entry points. The console and `webhooks show`
import them too, so a module of hooks that imports only shared/ keeps worker/ out of them
(as the reference app's `webhooks.ledger.hooks` does); its handlers module imports it.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from importlib.metadata import entry_points
from typing import Any

from sqlalchemy.engine import Connection

log = logging.getLogger(__name__)

# The reference Stripe app: its hooks (shared/ only) and its handlers (the worker's API).
BUILTIN_HOOK_MODULES = ("webhooks.ledger.hooks",)
BUILTIN_HANDLER_MODULES = ("webhooks.ledger.handlers",)
ENTRY_POINTS = "webhooks.handlers"


@dataclass(frozen=True)
class LockKey:
    """What a job's payload locks. `key`: the advisory try-lock a batch takes for the job
    (a job whose key another open batch holds waits for a later claim); "" for none.
    `order`: where the job runs in its batch (then by job id), the order in which the
    handlers lock their rows, so that batches do not deadlock; (key,) when empty."""

    key: str
    order: tuple[str, ...] = ()

    def sort_key(self) -> tuple[str, ...]:
        return self.order or (self.key,)


@dataclass(frozen=True)
class Event:
    """The event an effects hook describes; payload may be shared.payloads.Unloadable."""

    provider: str
    event_id: str
    event_type: str
    payload: Any


@dataclass(frozen=True)
class Column:
    """A field of a section's rows: its console heading, and how it is shown there
    (`style`: "" plain, "mono" an identifier, "num" a number, "time" a timestamp)."""

    field: str
    heading: str
    style: str = ""


@dataclass(frozen=True)
class Section:
    """One kind of effect of an event. `key`: its key in `show --json` (its rows there as
    read) and its element id in the console; `title`: its heading in the console;
    `label`: its name in `show`; `text`: one row in `show`, a str.format() template of the
    row's fields (times formatted first); `row_class`: each row's CSS class in the
    console. `single`: at most one row, shown as facts (JSON: the row or null)."""

    key: str
    title: str
    label: str
    columns: tuple[Column, ...]
    text: str
    rows: Sequence[dict[str, Any]] = ()
    single: bool = False
    row_class: str = ""

    def with_rows(self, rows: Iterable[dict[str, Any]]) -> Section:
        return replace(self, rows=list(rows))

    def value(self) -> Any:
        """The rows as `show --json` gives them."""
        if self.single:
            return self.rows[0] if self.rows else None
        return list(self.rows)


@dataclass(frozen=True)
class Finding:
    """One violation an audit check found, naming the rows concerned."""

    message: str
    rows: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Violation:
    check: str
    provider: str
    finding: Finding


LockKeyHook = Callable[[Any], "LockKey | None"]
EffectsHook = Callable[[Connection, Event], "Iterable[Section]"]
AuditCheck = Callable[[Connection, "datetime | None"], "Iterable[Finding]"]

_lock_keys: dict[str, LockKeyHook] = {}
_effects: dict[str, list[EffectsHook]] = {}
_audit_checks: dict[tuple[str, str], AuditCheck] = {}


def lock_key(provider: str) -> Callable[[LockKeyHook], LockKeyHook]:
    """Register the decorated function (a payload -> LockKey or None) for provider."""

    def register(function: LockKeyHook) -> LockKeyHook:
        existing = _lock_keys.get(provider)
        if existing is not None and existing is not function:
            raise ValueError(f"a lock key for {provider} is already registered")
        _lock_keys[provider] = function
        return function

    return register


def effects(provider: str) -> Callable[[EffectsHook], EffectsHook]:
    """Register the decorated function ((conn, Event) -> its Sections) for provider."""

    def register(function: EffectsHook) -> EffectsHook:
        hooks = _effects.setdefault(provider, [])
        if function not in hooks:
            hooks.append(function)
        return function

    return register


def audit_check(provider: str, name: str) -> Callable[[AuditCheck], AuditCheck]:
    """Register the decorated function ((conn, since) -> Findings) as provider's check
    `name`. `since`: None for every row, or only what was recorded since then."""

    def register(function: AuditCheck) -> AuditCheck:
        existing = _audit_checks.get((provider, name))
        if existing is not None and existing is not function:
            raise ValueError(f"an audit check {name!r} for {provider} is already registered")
        _audit_checks[(provider, name)] = function
        return function

    return register


def lock_key_of(provider: str, payload: Any) -> LockKey | None:
    """The job's lock key, or None: its provider registered none, or its payload has none."""
    hook = _lock_keys.get(provider)
    return hook(payload) if hook is not None else None


def effects_of(conn: Connection, event: Event) -> list[Section]:
    """The event's effects, section by section, in their hooks' order."""
    return [section for hook in _effects.get(event.provider, ())
            for section in hook(conn, event)]


def audit_checks() -> list[tuple[str, str]]:
    """(provider, name) of every registered check, in registration order."""
    return list(_audit_checks)


def run_audit_check(conn: Connection, provider: str, name: str,
                    since: datetime | None = None) -> list[Violation]:
    """The findings of provider's check `name`."""
    return [Violation(name, provider, finding)
            for finding in _audit_checks[(provider, name)](conn, since)]


def run_audit_checks(conn: Connection, since: datetime | None = None) -> list[Violation]:
    """Every registered check's findings, check after check."""
    return [violation for provider, name in _audit_checks
            for violation in run_audit_check(conn, provider, name, since)]


def load(modules: Iterable[str] = (), *, builtin: Iterable[str] = BUILTIN_HOOK_MODULES) -> None:
    """Import the built-in modules, then `modules` (WEBHOOK_HANDLERS) and the
    `webhooks.handlers` entry points; importing a module registers what it declares.
    `modules` are found where the settings found them (shared.variables.modules): on
    sys.path, or in the current folder."""
    if os.getcwd() not in sys.path:
        sys.path.append(os.getcwd())
    for module in (*builtin, *modules):
        importlib.import_module(module)
    for entry in entry_points(group=ENTRY_POINTS):
        entry.load()
    log.debug("hooks loaded: %d lock keys, %d effects, %d audit checks", len(_lock_keys),
              sum(len(hooks) for hooks in _effects.values()), len(_audit_checks))
