"""Environment variables, each declared once: its name, parser, default and one-line doc,
where the settings object that holds it declares the field (shared.settings.Settings,
webhooks.console.settings.ConsoleSettings). The settings are read from these declarations and the
README's tables of variables are generated from them (`python -m webhooks.readme`).

Variables whose names depend on another's value (a provider's named sources,
`STRIPE_<NAME>_WEBHOOK_SECRET`) or on the providers' records (each source option's) are
declared in shared.sources, whose `rows_in` the README's tables list.

A parser takes the variable's text (never empty: unset or blank means the default) and
returns the value, or raises ValueError with the problem, which becomes one ConfigError
line naming the variable.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import ipaddress
import os
import re
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from importlib.machinery import PathFinder
from pathlib import Path
from typing import Any
from urllib.parse import SplitResult, urlsplit

from webhooks.shared.errors import ConfigError

Parser = Callable[[str], Any]
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
DECLARATION = "webhooks.variable"  # the key of a field's declaration in its metadata


class Topic(StrEnum):
    """The README topic whose table lists a variable."""

    DEPLOY = "deploy"
    CONSOLE = "console"
    RECONCILIATION = "reconciliation"
    INGRESS = "ingress"
    OBSERVABILITY = "observability"
    NOTIFICATIONS = "notifications"


@dataclass(frozen=True)
class Variable:
    name: str
    parse: Parser
    default: Any
    doc: str
    topic: Topic
    shown: str | None = None  # the default as the README says it, when not the value

    def read(self, env: Mapping[str, str]) -> Any:
        raw = env.get(self.name)
        if raw is None or not raw.strip():
            return self.default
        try:
            return self.parse(raw)
        except ValueError as error:
            raise ConfigError(self.name, str(error)) from None

    def default_text(self) -> str:
        if self.shown is not None:
            return self.shown
        if self.default is None:
            return "unset"
        if isinstance(self.default, float) and self.default.is_integer():
            return f"`{int(self.default)}`"
        return f"`{self.default}`"


@dataclass(frozen=True)
class Family:
    """One variable per key (a provider), read into a mapping of the keys that are set. The
    members are asked for when read: a provider registered after import has its variable."""

    members_of: Callable[[], Iterable[tuple[str, Variable]]]
    pattern: str  # the README's name for the family, `<PROVIDER>_ALLOWED_IPS`
    doc: str
    topic: Topic
    shown: str

    def read(self, env: Mapping[str, str]) -> dict[str, Any]:
        found = {key: variable.read(env) for key, variable in self.members_of()}
        return {key: value for key, value in found.items() if value}

    def names(self) -> list[str]:
        return [variable.name for _, variable in self.members_of()]


def setting(name: str, parse: Parser, default: Any, doc: str, topic: Topic,
            shown: str | None = None) -> Any:
    """A settings field read from variable `name` (see Variable)."""
    variable = Variable(name, parse, default, doc, topic, shown)
    return dataclasses.field(default=default, metadata={DECLARATION: variable})


def family(members_of: Callable[[], Iterable[tuple[str, Variable]]], pattern: str, doc: str,
           topic: Topic, shown: str) -> Any:
    """A settings field mapping each key to its own variable's value (see Family)."""
    declared = Family(members_of, pattern, doc, topic, shown)
    return dataclasses.field(default_factory=dict, metadata={DECLARATION: declared})


def declarations(*classes: type) -> Iterator[Any]:
    """The declarations of the settings classes' fields, in their order."""
    for cls in classes:
        for item in dataclasses.fields(cls):
            if DECLARATION in item.metadata:
                yield item.metadata[DECLARATION]


def read(cls: type, env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The keyword arguments of `cls` from the environment; ConfigError on a bad value."""
    env = os.environ if env is None else env
    return {item.name: item.metadata[DECLARATION].read(env)
            for item in dataclasses.fields(cls) if DECLARATION in item.metadata}


def markdown_table(topic: Topic, *classes: type) -> str:
    """The README's table of the topic's variables."""
    rows = ["| variable | meaning | default |", "| --- | --- | --- |"]
    for declared in declarations(*classes):
        if hasattr(declared, "rows_in"):  # variables named by patterns (shared.sources)
            rows.extend(f"| `{name}` | {doc} | {default} |"
                        for name, doc, default in declared.rows_in(topic))
            continue
        if declared.topic != topic:
            continue
        name = (f"`{declared.name}`" if isinstance(declared, Variable)
                else f"`{declared.pattern}` ({', '.join(f'`{n}`' for n in declared.names())})")
        default = (declared.default_text() if isinstance(declared, Variable)
                   else declared.shown)
        rows.append(f"| {name} | {declared.doc} | {default} |")
    return "\n".join(rows)


# --- parsers ------------------------------------------------------------------------


def text(raw: str) -> str:
    """Any text, as written (tokens, passwords)."""
    return raw


def integer(minimum: int = 0, maximum: int | None = None) -> Parser:
    def parse(raw: str) -> int:
        try:
            value = int(raw.strip())
        except ValueError:
            raise ValueError(f"must be a whole number, not {raw.strip()!r}") from None
        if value < minimum or (maximum is not None and value > maximum):
            upper = f" and at most {maximum}" if maximum is not None else ""
            raise ValueError(f"must be at least {minimum}{upper}, not {value}")
        return value

    return parse


def number(positive: bool = False) -> Parser:
    def parse(raw: str) -> float:
        raw = raw.strip()
        try:
            value = float(raw)
        except ValueError:
            raise ValueError(f"must be a number, not {raw!r}") from None
        if value != value or value in (float("inf"), float("-inf")) or value < 0:
            raise ValueError(f"must be a non-negative number, not {raw!r}")
        if positive and value == 0:
            raise ValueError("must be greater than 0")
        return value

    return parse


def choice(*allowed: str) -> Parser:
    """One of `allowed`, in any case; the value as `allowed` spells it."""
    def parse(raw: str) -> str:
        matches = [value for value in allowed if value.lower() == raw.strip().lower()]
        if not matches:
            raise ValueError(f"must be one of {', '.join(allowed)}, not {raw.strip()!r}")
        return matches[0]

    return parse


_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def flag(raw: str) -> bool:
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ValueError(f"must be 1 or 0, not {raw!r}")


def names(raw: str) -> tuple[str, ...]:
    """Comma-separated names; blanks between commas are skipped."""
    return tuple(part.strip() for part in raw.split(",") if part.strip())


# What a URL's password written unencoded does to it: a `/`, `#` or `?` in it ends the
# host part early, so that what follows the password's first characters is read as a port;
# a `[` or `]` makes an IPv6 host of it.
ENCODING_HINT = "is a `/`, `#`, `?`, `[` or `]` in the password not percent-encoded?"


def split_url(raw: str) -> SplitResult:
    """The URL's parts; ValueError saying what is wrong in our words. urllib's own message
    is never quoted: it quotes the text it could not read as a port ("Port could not be cast
    to integer value as 'Xy7'"), which is the start of a password when one holds an
    unencoded `/`, and this line goes to the platform's logs
    (tests/integration/test_bad_values.py
    test_a_bad_url_names_its_variable_and_never_a_part_of_its_password)."""
    try:
        parts = urlsplit(raw)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError as error:
        text = str(error)
        if text.startswith("Port out of range"):
            raise ValueError("not a valid URL: the port is out of range 0-65535") from None
        if text.startswith("Port could not be cast"):
            raise ValueError(f"not a valid URL: the port is not a number ({ENCODING_HINT})"
                             ) from None
        if "IPv6" in text:
            raise ValueError(f"not a valid URL: an unmatched `[` or `]` ({ENCODING_HINT})"
                             ) from None
        raise ValueError("not a valid URL") from None
    return parts


def http_url(raw: str) -> str:
    raw = raw.strip()
    parts = split_url(raw)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("must be an http:// or https:// URL")
    return raw.rstrip("/")


def email(raw: str) -> str:
    raw = raw.strip()
    if "@" not in raw:
        raise ValueError(f"{raw!r} is not an email address")
    return raw


def address(raw: str) -> str:
    """An interface to listen on: an IP address (`0.0.0.0`: every interface) or localhost."""
    raw = raw.strip()
    if raw == "localhost":
        return raw
    try:
        return str(ipaddress.ip_address(raw))
    except ValueError:
        raise ValueError(f"{raw!r} is not an IP address") from None


def path(raw: str) -> Path:
    return Path(raw.strip()).absolute()


def directory(raw: str) -> Path:
    """An existing folder."""
    folder = path(raw)
    if not folder.is_dir():
        raise ValueError(f"{str(folder)!r} is not a folder")
    return folder


def networks(raw: str) -> tuple[IPNetwork, ...]:
    """IPv4 and IPv6 addresses and CIDR ranges, comma-separated."""
    found = []
    for entry in names(raw):
        try:
            found.append(ipaddress.ip_network(entry, strict=False))
        except ValueError:
            raise ValueError(f"{entry!r} is not an IP address or CIDR range") from None
    return tuple(found)


def modules(raw: str) -> tuple[str, ...]:
    """Importable module names, comma-separated: each is found (not imported) by Python's
    import system as the processes import it (sys.path and the current folder, which
    `dramatiq` and shared.hooks.load add): an editable install, a namespace package or an
    installed distribution, from any working directory."""
    found = names(raw)
    for module in found:
        if not _findable(module):
            raise ValueError(f"no module named {module!r}")
    return found


def _findable(module: str) -> bool:
    """Whether `module` can be imported, asked of every finder on sys.meta_path (as an
    import asks them) level by level, without running any of its packages' code."""
    if not all(part.isidentifier() for part in module.split(".")):
        return False
    locations: list[str] | None = [*sys.path, os.getcwd()]
    parts = module.split(".")
    for depth in range(1, len(parts) + 1):
        name = ".".join(parts[:depth])
        if name in sys.modules:
            spec = getattr(sys.modules[name], "__spec__", None)
        else:
            spec = _find_spec(name, None if depth == 1 else locations, top=depth == 1)
        if spec is None:
            return depth == 1 and name in sys.builtin_module_names
        found = spec.submodule_search_locations
        if depth < len(parts) and found is None:
            return False
        locations = list(found) if found is not None else None
    return True


def _find_spec(name: str, locations: list[str] | None, *, top: bool) -> Any:
    if top:  # the current folder too, as the processes add it
        spec = PathFinder.find_spec(name, [os.getcwd()])
        if spec is not None:
            return spec
    for finder in sys.meta_path:
        find = getattr(finder, "find_spec", None)
        if find is None:
            continue
        spec = find(name, locations)
        if spec is not None:
            return spec
    return None


def webhook_secret(raw: str) -> str:
    """A Standard Webhooks signing secret: `whsec_` and base64 bytes."""
    raw = raw.strip()
    encoded = raw.removeprefix("whsec_")
    if encoded == raw:
        raise ValueError("must start with whsec_")
    if not re.fullmatch(r"[A-Za-z0-9+/]+={0,2}", encoded) or not _b64(encoded):
        raise ValueError("must be whsec_ followed by base64")
    return raw


def _b64(encoded: str) -> bytes:
    try:
        return base64.b64decode(encoded + "==")  # the padding may be left out
    except binascii.Error:
        return b""


def pattern(regex: str, what: str) -> Parser:
    """Comma-separated entries, each matching `regex` once stripped of slashes."""
    compiled = re.compile(regex)

    def parse(raw: str) -> tuple[str, ...]:
        entries = tuple(entry.strip("/") for entry in names(raw))
        for entry in entries:
            if not compiled.fullmatch(entry):
                raise ValueError(f"{entry!r} is not {what}")
        return entries

    return parse
