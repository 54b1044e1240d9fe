"""Sources: the endpoints of each provider, declared once and read by everything (the
ingest's routes and allowlists, the worker's handler context, reconciliation).

A source is one URL with its own secrets and settings. Each provider has its default
source, named like the provider (`stripe`, at `/webhooks/stripe`), configured by the
provider's own variables (STRIPE_WEBHOOK_SECRET, STRIPE_ALLOWED_IPS, STRIPE_API_KEY, ...).
`<PROVIDER>_SOURCES` names more, comma-separated; source `connect` of Stripe is at
`/webhooks/stripe/connect`, labelled `stripe/connect`, and is configured by the same
variables with its name after the provider's prefix (STRIPE_CONNECT_WEBHOOK_SECRET,
STRIPE_CONNECT_ALLOWED_IPS, STRIPE_CONNECT_API_KEY, ...).

The dedup key is the provider's, not the source's (SPEC, "Sources"): one logical event is
one row whichever source carries it, except for Standard Webhooks, whose senders are
unrelated applications (see SOURCE_SCOPED).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from webhooks.shared import variables as v
from webhooks.shared.errors import MissingVariable
from webhooks.shared.providers import PROVIDERS
from webhooks.shared.providers.base import Provider
from webhooks.shared.providers.stripe import EventKind as EventKind  # Stripe's vocabulary

NAME = re.compile(r"[a-z][a-z0-9]{0,31}")
RESERVED = ("default",)  # besides the provider's own name, the default source's
# The providers whose event ids are unique per source only: Standard Webhooks senders
# (Clerk, Resend through Svix) are unrelated applications whose message ids may collide.
SOURCE_SCOPED: frozenset[str] = frozenset({"standard"})
# The providers whose sources hold an API key (STRIPE_<NAME>_API_KEY, ...); GitHub's hold
# a token and hooks instead.
API_KEY_PROVIDERS = ("stripe", "paddle")


# How the outcome of a job whose event's livemode its source refused begins (the worker
# writes it): done with no effect by design, which the audits of effects leave out.
LIVEMODE_REFUSED = "no effect: livemode"


class Livemode(StrEnum):
    """Which of a Stripe source's events take effect (by the event's `livemode`)."""

    ANY = "any"
    LIVE = "live"
    TEST = "test"

    def accepts(self, livemode: bool | None) -> bool:
        """Whether an event of this livemode takes effect: `live` only livemode true,
        `test` only false (an event that does not say is neither), `any` every event."""
        if self is Livemode.ANY:
            return True
        return livemode is (self is Livemode.LIVE)


@dataclass(frozen=True)
class Source:
    """One endpoint of a provider."""

    provider: str
    name: str  # the provider's name for its default source
    secrets: tuple[str, ...] = ()
    allowed_networks: tuple[v.IPNetwork, ...] = ()  # empty: any address
    api_key: str | None = None  # Stripe's or Paddle's API key, GitHub's token
    hooks: tuple[str, ...] = ()  # GitHub: the hooks to reconcile
    connect: bool = False  # Stripe: a Connect endpoint (events of connected accounts)
    events: EventKind = EventKind.SNAPSHOT  # Stripe
    livemode: Livemode = Livemode.ANY  # Stripe

    @property
    def default(self) -> bool:
        return self.name == self.provider

    @property
    def label(self) -> str:
        """`stripe` for the default source, `stripe/connect` for a named one: the path
        after /webhooks/, and how commands and logs name it."""
        return label(self.provider, self.name)


@dataclass(frozen=True)
class Sources:
    """Every source, by (provider, name) (Settings.sources). The ingest builds its dict by
    label from it once, at start, and looks each delivery's source up there."""

    by_key: Mapping[tuple[str, str], Source] = field(default_factory=dict)

    def get(self, provider: str, name: str | None = None) -> Source | None:
        """The source, or None; name None: the provider's default source."""
        return self.by_key.get((provider, provider if name is None else name))

    def of(self, provider: str) -> list[Source]:
        return [source for source in self.by_key.values() if source.provider == provider]

    def __iter__(self) -> Iterator[Source]:
        return iter(self.by_key.values())


def label(provider: str, name: str) -> str:
    """A source's label from its provider and name (a row's provider and source)."""
    return provider if name in ("", provider) else f"{provider}/{name}"


def dedup_by_source(provider: str) -> bool:
    """Whether the provider's event ids are unique per source only (SOURCE_SCOPED)."""
    return provider in SOURCE_SCOPED


# --- the variables --------------------------------------------------------------------


def variable_name(provider: str, name: str, suffix: str) -> str:
    """`STRIPE_CONNECT_API_KEY` for ("stripe", "connect", "API_KEY")."""
    return f"{provider.upper()}_{name.upper()}_{suffix}"


def secret_variable(record: Provider, name: str) -> str:
    """The provider's SECRET_VARIABLE with the source's name after the provider's prefix:
    STRIPE_CONNECT_WEBHOOK_SECRET, SLACK_<NAME>_SIGNING_SECRET."""
    prefix = record.name.upper() + "_"
    return prefix + name.upper() + "_" + record.SECRET_VARIABLE.removeprefix(prefix)


def names_parser(provider: str) -> v.Parser:
    """`<PROVIDER>_SOURCES`: names `[a-z][a-z0-9]{0,31}`, each once, none the default
    source's (the provider's name, `default`)."""
    def parse(raw: str) -> tuple[str, ...]:
        found = v.names(raw)
        for name in found:
            if not NAME.fullmatch(name):
                raise ValueError(f"{name!r} is not a source name ([a-z][a-z0-9]{{0,31}})")
            if name in (provider, *RESERVED):
                raise ValueError(f"{name!r} is the default source's name")
        if len(set(found)) != len(found):
            raise ValueError("a source is named twice")
        return found

    return parse


def sources_variable(provider: str) -> v.Variable:
    return v.Variable(f"{provider.upper()}_SOURCES", names_parser(provider), (),
                      "sources", v.Section.DEPLOY)


def read_named(env: Mapping[str, str]) -> dict[str, tuple[Source, ...]]:
    """The named sources of each provider that has `<PROVIDER>_SOURCES`; ConfigError (exit
    2) on a bad value, MissingVariable (exit 1) on a missing secret or a thin source's
    missing API key."""
    found = {}
    for provider, record in PROVIDERS.items():
        names = sources_variable(provider).read(env)
        if names:
            found[provider] = tuple(_read_source(record, name, env) for name in names)
    return found


def _read_source(record: Provider, name: str, env: Mapping[str, str]) -> Source:
    provider = record.name
    secret_name = secret_variable(record, name)
    secrets = v.Variable(secret_name, _secrets_parser(record), (), "", v.Section.DEPLOY).read(env)
    if not secrets:
        raise MissingVariable(secret_name, f"source {provider}/{name} needs its secret")

    def read(suffix: str, parse: v.Parser, default: Any = None) -> Any:
        return v.Variable(variable_name(provider, name, suffix), parse, default, "",
                          v.Section.DEPLOY).read(env)

    options: dict[str, Any] = {"allowed_networks": read("ALLOWED_IPS", v.networks, ())}
    if provider in API_KEY_PROVIDERS:
        options["api_key"] = read("API_KEY", v.text)
    if provider == "github":
        options["api_key"] = read("TOKEN", v.text)
        options["hooks"] = read("HOOKS", v.pattern(GITHUB_HOOK, GITHUB_HOOK_WHAT), ())
    if provider == "stripe":
        options.update(connect=read("CONNECT", v.flag, False),
                       events=EventKind(read("EVENTS", v.choice(*EventKind), EventKind.SNAPSHOT)),
                       livemode=Livemode(read("LIVEMODE", v.choice(*Livemode), Livemode.ANY)))
        if options["events"] is EventKind.THIN and not options["api_key"]:
            raise MissingVariable(variable_name(provider, name, "API_KEY"),
                                  f"thin source {provider}/{name} fetches its events")
    return Source(provider, name, secrets, **options)  # type: ignore[arg-type]


def _secrets_parser(record: Provider) -> v.Parser:
    def parse(raw: str) -> tuple[str, ...]:
        found = v.names(raw)
        for secret in found:
            if problem := record.SECRET_FORMAT.problem(secret):
                raise ValueError(problem)
        return found

    return parse


# A hook's API path: repos/OWNER/REPO/hooks/ID or orgs/ORG/hooks/ID.
GITHUB_HOOK = r"(repos/[\w.-]+/[\w.-]+|orgs/[\w.-]+)/hooks/\d+"
GITHUB_HOOK_WHAT = "repos/OWNER/REPO/hooks/ID or orgs/ORG/hooks/ID"

# The README's rows for the per-source variables: (pattern, meaning, default).
PATTERNS: tuple[tuple[str, str, str], ...] = (
    ("<PROVIDER>_SOURCES", "more sources of the provider, comma-separated names "
     "`[a-z][a-z0-9]{0,31}`, each at `/webhooks/<provider>/<name>` (docs/sources.md)",
     "none: the default source only"),
    ("<PROVIDER>_<NAME>_WEBHOOK_SECRET", "a named source's secrets, comma-separated "
     "(Slack: `SLACK_<NAME>_SIGNING_SECRET`)", "required for each named source: unset, "
     "every process exits 1"),
    ("<PROVIDER>_<NAME>_ALLOWED_IPS", "a named source's allowlist, as `<PROVIDER>_ALLOWED_IPS`",
     "unset: the provider's `<PROVIDER>_ALLOWED_IPS` (unset too: any address)"),
    ("STRIPE_<NAME>_API_KEY", "a named Stripe source's API key (also `PADDLE_<NAME>_API_KEY`)",
     "unset: not reconciled"),
    ("GITHUB_<NAME>_TOKEN", "a named GitHub source's token (and `GITHUB_<NAME>_HOOKS`, as "
     "`GITHUB_HOOKS`)", "unset: not reconciled"),
    ("STRIPE_<NAME>_CONNECT", "`1`: a Connect endpoint (its events name a connected "
     "`account`)", "`0`"),
    ("STRIPE_<NAME>_EVENTS", "`snapshot` or `thin` (an event destination; needs "
     "`STRIPE_<NAME>_API_KEY`)", "`snapshot`"),
    ("STRIPE_<NAME>_LIVEMODE", "`any`, `live` or `test`: which events take effect (the "
     "default source: `STRIPE_LIVEMODE`)", "`any`"),
)


@dataclass(frozen=True)
class NamedSources:
    """The declaration of the named sources' variables (a settings field): their names
    depend on `<PROVIDER>_SOURCES`, so the README documents them as patterns."""

    doc: str = "named sources"
    section: v.Section = v.Section.DEPLOY
    rows: tuple[tuple[str, str, str], ...] = PATTERNS

    def read(self, env: Mapping[str, str]) -> dict[str, tuple[Source, ...]]:
        return read_named(env)

    def names(self) -> list[str]:
        """The variables whose names are fixed: each provider's `<PROVIDER>_SOURCES`."""
        return [sources_variable(provider).name for provider in PROVIDERS]


def named_sources_field() -> Any:
    return field(default_factory=dict, metadata={v.DECLARATION: NamedSources()})


def build(defaults: Mapping[str, Source], named: Mapping[str, tuple[Source, ...]],
          allowed: Mapping[str, tuple[v.IPNetwork, ...]] | None = None) -> Sources:
    """The registry: each provider's default source, then its named ones. A named source
    without an allowlist of its own (`<PROVIDER>_<NAME>_ALLOWED_IPS`) takes its provider's
    (`allowed`, `<PROVIDER>_ALLOWED_IPS`): an operator who lists a provider's addresses
    covers every endpoint of it (tests/integration/test_allowlist.py
    test_a_named_source_without_its_own_list_takes_its_providers)."""
    by_key = {(source.provider, source.name): source for source in defaults.values()}
    for sources in named.values():
        by_key.update({(source.provider, source.name): _inherit(source, allowed or {})
                       for source in sources})
    return Sources(by_key)


def _inherit(source: Source, allowed: Mapping[str, tuple[v.IPNetwork, ...]]) -> Source:
    if source.allowed_networks or not allowed.get(source.provider):
        return source
    return replace(source, allowed_networks=tuple(allowed[source.provider]))




_last: tuple[Any, Sources] | None = None  # (the settings, their registry)


def registry(settings: Any) -> Sources:
    """settings.sources, built once per settings object (Settings is frozen, so its
    registry never changes): for what asks per job, the worker's livemode policy and its
    thin-event fetches. A second settings object (a test's copy) gets its own."""
    global _last
    last = _last
    if last is None or last[0] is not settings:
        last = _last = (settings, settings.sources)
    return last[1]
