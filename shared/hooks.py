"""Apps: what an app registers, and which apps run. The core knows no app's tables or
payloads: it asks these hooks, and the handlers (shared/handlers.py).

    from webhooks import Column, Finding, LockKey, Section, audit_check, effects, lock_key

    @lock_key("stripe")          # a batch's order and try-locks (worker/jobs.py)
    def customer(payload) -> LockKey | None: ...

    @effects("stripe")           # what `webhooks show` and the console's event page show
    def ledger(conn, event) -> list[Section]: ...

    @audit_check("stripe", "balances")   # what `webhooks audit` checks
    def balances(conn, since) -> Iterable[Finding]: ...

An app is a module (or package) named in WEBHOOK_HANDLERS or by the `webhooks.handlers`
entry-point group; what a module registers belongs to the app whose name is that module or
a package above it (`webhooks.ledger.hooks` is the app `webhooks.ledger`'s). Importing a
module registers what it declares; only the running apps' hooks and handlers are used: those
`load` was given last, in the process (each process loads its settings' apps at start).
Nothing of an app that is not named runs, even if its module was imported.

A provider has at most one lock key among the running apps (two: `load` refuses, naming
both modules); effects and audit checks add up, shown and run in the apps' order, then in
the order they were registered. Without a lock key a provider's jobs run in job id order
and take no try-lock. Effects and audit checks only read, on the connection they are given.
The console and `webhooks show` load the apps too, so an app's hooks and handlers must
import only the public API (`webhooks`): no process package.
"""

from __future__ import annotations

import functools
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

from webhooks.shared.errors import AppConflict, AppNotLoaded

log = logging.getLogger(__name__)

# The reference Stripe app, an app like any other: it runs only where it is named
# (`webhooks dev` names it unless WEBHOOK_HANDLERS is set).
REFERENCE_APP = "webhooks.ledger"
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

_lock_keys: dict[str, list[LockKeyHook]] = {}
_effects: dict[str, list[EffectsHook]] = {}
_audit_checks: dict[tuple[str, str], AuditCheck] = {}
_running: tuple[str, ...] = ()  # the apps `load` was given last, in their order


def lock_key(provider: str) -> Callable[[LockKeyHook], LockKeyHook]:
    """Register the decorated function (a payload -> LockKey or None) for provider."""

    def register(function: LockKeyHook) -> LockKeyHook:
        hooks = _lock_keys.setdefault(provider, [])
        if any(hook.__module__ == function.__module__ and hook is not function
               for hook in hooks):
            raise ValueError(f"a lock key for {provider} is already registered in "
                             f"{function.__module__}")
        if function not in hooks:
            hooks.append(function)
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


def app_of(function: Callable[..., Any], apps: Sequence[str] | None = None) -> str | None:
    """The running app (of `apps`, default the running ones) that `function` belongs to:
    the longest whose name is its module or a package above it; None: no running app's."""
    return _app_of_module(function.__module__, tuple(_running if apps is None else apps))


@functools.lru_cache(maxsize=1024)
def _app_of_module(module: str, apps: tuple[str, ...]) -> str | None:
    found = [app for app in apps if module == app or module.startswith(app + ".")]
    return max(found, key=len) if found else None


def ranked(functions: Iterable[Any]) -> tuple[tuple[str, Any], ...]:
    """(app, function) of the running apps' functions among `functions`, in the apps'
    order (then as given). Derived from the running apps and the functions alone, so it is
    remembered: the worker asks it for every job (its handlers, its lock key)."""
    return _ranked(_running, tuple(functions))


@functools.lru_cache(maxsize=1024)
def _ranked(running: tuple[str, ...], functions: tuple[Any, ...]
            ) -> tuple[tuple[str, Any], ...]:
    found = [(running.index(app), n, app, function) for n, function in enumerate(functions)
             if (app := _app_of_module(function.__module__, running)) is not None]
    return tuple((app, function) for _, _, app, function in sorted(found,
                                                                   key=lambda item: item[:2]))


def in_app_order(functions: Iterable[Any]) -> list[Any]:
    """The running apps' functions among `functions`, in the apps' order (then as given)."""
    return [function for _, function in ranked(functions)]


def lock_key_of(provider: str, payload: Any) -> LockKey | None:
    """The job's lock key, or None: no running app registered one for its provider, or its
    payload has none."""
    hooks = in_app_order(_lock_keys.get(provider, ()))
    return hooks[0](payload) if hooks else None


def effects_of(conn: Connection, event: Event) -> list[Section]:
    """The event's effects, section by section, in the running apps' hooks' order."""
    return [section for hook in in_app_order(_effects.get(event.provider, ()))
            for section in hook(conn, event)]


def audit_checks() -> list[tuple[str, str]]:
    """(provider, name) of every running app's check, in the apps' order."""
    running = in_app_order(_audit_checks.values())
    return sorted((key for key, check in _audit_checks.items() if check in running),
                  key=lambda key: running.index(_audit_checks[key]))


def run_audit_check(conn: Connection, provider: str, name: str,
                    since: datetime | None = None) -> list[Violation]:
    """The findings of provider's check `name`."""
    return [Violation(name, provider, finding)
            for finding in _audit_checks[(provider, name)](conn, since)]


def run_audit_checks(conn: Connection, since: datetime | None = None) -> list[Violation]:
    """Every running app's check's findings, check after check."""
    return [violation for provider, name in audit_checks()
            for violation in run_audit_check(conn, provider, name, since)]


def running() -> tuple[str, ...]:
    """The apps that run in this process, in their order (see `load`)."""
    return _running


def load(modules: Iterable[str] = ()) -> tuple[str, ...]:
    """Import the apps and run them: `modules` (WEBHOOK_HANDLERS) in their order, then the
    `webhooks.handlers` entry points' modules not among them; importing a module registers
    what it declares. Returns the running apps. AppConflict if two of them register a lock
    key for one provider. `modules` are found where the settings found them
    (shared.variables.modules): by Python's import system, or in the current folder."""
    global _running
    if os.getcwd() not in sys.path:
        sys.path.append(os.getcwd())
    apps = list(dict.fromkeys(modules))
    for module in apps:
        _import(module, functools.partial(importlib.import_module, module))
    for entry in _entry_points():
        _import(entry.module, entry.load)
        if entry.module not in apps:
            apps.append(entry.module)
    _running = tuple(apps)
    _refuse_two_lock_keys()
    log.debug("apps running: %s", ", ".join(_running) or "none")
    return _running


def _import(module: str, load_it: Callable[[], Any]) -> None:
    try:
        load_it()
    except Exception as error:
        raise AppNotLoaded(f"{module}: {type(error).__name__}: {error}") from error


# Tables only the reference app writes: rows there while it is not named are a database
# of a release in which it always ran, upgraded without naming it.
REFERENCE_TABLES = ("ledger_entries", "accounts", "subscriptions")


def warnings_at_start(conn: Connection | None, apps: Sequence[str]) -> list[str]:
    """What a process says at start about the apps it runs (one WARNING line each): none
    at all, or the reference app's rows in the database (`conn`, None: not asked) while
    the reference app is not named."""
    found: list[str] = []
    if not apps:
        found.append("no app runs (WEBHOOK_HANDLERS names none): every event is recorded "
                     "and its job completes with no effect")
    if conn is not None and REFERENCE_APP not in apps and _reference_rows(conn):
        found.append(f"the database holds the reference app's rows ({', '.join(REFERENCE_TABLES)})"
                     f" but WEBHOOK_HANDLERS does not name {REFERENCE_APP}: its events are "
                     f"recorded and not applied (name it to keep it running)")
    return found


def _reference_rows(conn: Connection) -> bool:
    for table in REFERENCE_TABLES:
        exists = conn.exec_driver_sql("SELECT to_regclass(%(t)s) IS NOT NULL", {"t": table})
        if exists.scalar() and conn.exec_driver_sql(
                f"SELECT EXISTS (SELECT 1 FROM {table})").scalar():
            return True
    return False


def _entry_points() -> list[Any]:
    return list(entry_points(group=ENTRY_POINTS))


def _refuse_two_lock_keys() -> None:
    for provider, hooks in _lock_keys.items():
        owners = list(dict.fromkeys(app for hook in hooks if (app := app_of(hook)) is not None))
        if len(owners) > 1:
            raise AppConflict(f"two apps register a lock key for {provider}: "
                              f"{owners[0]} and {owners[1]} (a provider has at most one)")
