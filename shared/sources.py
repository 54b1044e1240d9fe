"""Sources: the endpoints of each provider, declared once and read by everything (the
ingest's routes and allowlists, the worker's handler context, reconciliation).

A source is one URL with its own secrets and settings. Each provider has its default
source, named like the provider (`stripe`, at `/webhooks/stripe`), configured by the
provider's own variables (STRIPE_WEBHOOK_SECRET, STRIPE_ALLOWED_IPS, STRIPE_API_KEY, ...).
`<PROVIDER>_SOURCES` names more, comma-separated; source `connect` of Stripe is at
`/webhooks/stripe/connect`, labelled `stripe/connect`, and is configured by the same
variables with its name after the provider's prefix (STRIPE_CONNECT_WEBHOOK_SECRET,
STRIPE_CONNECT_ALLOWED_IPS, STRIPE_CONNECT_API_KEY, ...).

Each source's credentials and options (STRIPE_CONNECT_CONNECT, GITHUB_CONNECT_HOOKS, ...)
are those its provider's record declares (shared/providers/base.py Option): this module
names and reads them, and knows no provider. The dedup key is the provider's record's
(`dedup`): one logical event is one row whichever source carries it, except for a
provider whose senders are unrelated applications (Standard Webhooks).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from webhooks.shared import variables as v
from webhooks.shared.errors import MissingVariable
from webhooks.shared.providers import PROVIDERS
from webhooks.shared.providers.base import DedupScope, Option, Provider, Source, label

__all__ = ["Source", "Sources", "label"]

NAME = re.compile(r"[a-z][a-z0-9]{0,31}")
RESERVED = ("default",)  # besides the provider's own name, the default source's


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


def dedup_by_source(provider: str) -> bool:
    """Whether the provider's event ids are unique per source only (its record's dedup)."""
    record = PROVIDERS.get(provider)
    return record is not None and record.dedup is DedupScope.SOURCE


# --- the variables --------------------------------------------------------------------


def variable_name(provider: str, name: str, suffix: str) -> str:
    """`STRIPE_CONNECT_API_KEY` for ("stripe", "connect", "API_KEY")."""
    return f"{provider.upper()}_{name.upper()}_{suffix}"


def option_variable(source: Source, option: Option) -> str:
    """The variable of a source's option: `STRIPE_API_KEY` for the default source,
    `STRIPE_CONNECT_API_KEY` for source `connect`."""
    if source.default:
        return f"{source.provider.upper()}_{option.suffix}"
    return variable_name(source.provider, source.name, option.suffix)


def secret_variable(record: Provider, name: str) -> str:
    """The provider's secret variable with the source's name after the provider's prefix:
    STRIPE_CONNECT_WEBHOOK_SECRET, SLACK_<NAME>_SIGNING_SECRET."""
    prefix = record.name.upper() + "_"
    return prefix + name.upper() + "_" + record.secret_variable.removeprefix(prefix)


def secrets_parser(record: Provider) -> v.Parser:
    """Comma-separated secrets, each of the provider's format."""
    def parse(raw: str) -> tuple[str, ...]:
        found = v.names(raw)
        for secret in found:
            if problem := record.secret_format.problem(secret):
                raise ValueError(problem)
        return found

    return parse


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
                      "sources", v.Topic.DEPLOY)


def read_named(env: Mapping[str, str]) -> dict[str, tuple[Source, ...]]:
    """The named sources of each provider that has `<PROVIDER>_SOURCES`; ConfigError (exit
    2) on a bad value, MissingVariable (exit 1) on a missing secret or on an option its
    others make necessary (a thin Stripe source's API key)."""
    found = {}
    for provider, record in PROVIDERS.items():
        names = sources_variable(provider).read(env)
        if names:
            found[provider] = tuple(_read_source(record, name, env) for name in names)
    return found


def _read_source(record: Provider, name: str, env: Mapping[str, str]) -> Source:
    provider = record.name
    secret_name = secret_variable(record, name)
    secrets = v.Variable(secret_name, secrets_parser(record), (), "", v.Topic.DEPLOY).read(env)
    if not secrets:
        raise MissingVariable(secret_name, f"source {provider}/{name} needs its secret")

    def read(suffix: str, parse: v.Parser, default: Any = None) -> Any:
        return v.Variable(variable_name(provider, name, suffix), parse, default, "",
                          v.Topic.DEPLOY).read(env)

    allowed = read("ALLOWED_IPS", v.networks, ())
    values = {option.key: read(option.suffix, option.parse, option.default)
              for option in record.all_options}
    source = _source(record, name, secrets, allowed, values)
    if record.missing is not None and (missing := record.missing(source)) is not None:
        option, hint = missing
        raise MissingVariable(option_variable(source, option), hint)
    return source


def _source(record: Provider, name: str, secrets: tuple[str, ...],
            allowed: tuple[v.IPNetwork, ...], values: Mapping[str, Any]) -> Source:
    """A source of the provider from its options' values (its credentials' among them)."""
    credentials = record.credentials.key if record.credentials else None
    return Source(record.name, name, secrets, allowed,
                  credentials=values.get(credentials) if credentials else None,
                  options={key: value for key, value in values.items() if key != credentials})


def default_source(provider: str, secrets: tuple[str, ...], allowed: tuple[v.IPNetwork, ...],
                   values: Mapping[str, Any]) -> Source:
    """The provider's default source, from the provider's own variables (`values`: its
    options' as DefaultOptions read them; an option without a variable takes its default)."""
    record = PROVIDERS.get(provider)
    if record is None:
        return Source(provider, provider, secrets, allowed)
    return _source(record, provider, secrets, allowed,
                   {option.key: values.get(option.key, option.default)
                    for option in record.all_options})


def _option_rows() -> list[tuple[str, str, str]]:
    return [(variable_name(record.name, "<NAME>", option.suffix), option.doc, option.shown)
            for record in PROVIDERS.values() for option in record.all_options]


# The README's rows for the per-source variables of every provider: (pattern, meaning,
# default); each provider's options follow (_option_rows).
PATTERNS: tuple[tuple[str, str, str], ...] = (
    ("<PROVIDER>_SOURCES", "more sources of the provider, comma-separated names "
     "`[a-z][a-z0-9]{0,31}`, each at `/webhooks/<provider>/<name>` (docs/sources.md)",
     "none: the default source only"),
    ("<PROVIDER>_<NAME>_WEBHOOK_SECRET", "a named source's secrets, comma-separated "
     "(Slack: `SLACK_<NAME>_SIGNING_SECRET`)", "required for each named source: unset, "
     "every process exits 1"),
    ("<PROVIDER>_<NAME>_ALLOWED_IPS", "a named source's allowlist, as `<PROVIDER>_ALLOWED_IPS`",
     "unset: the provider's `<PROVIDER>_ALLOWED_IPS` (unset too: any address)"),
)


@dataclass(frozen=True)
class NamedSources:
    """The declaration of the named sources' variables (a settings field): their names
    depend on `<PROVIDER>_SOURCES`, so the README documents them as patterns."""

    doc: str = "named sources"
    topic: v.Topic = v.Topic.DEPLOY

    def read(self, env: Mapping[str, str]) -> dict[str, tuple[Source, ...]]:
        return read_named(env)

    def names(self) -> list[str]:
        """The variables whose names are fixed: each provider's `<PROVIDER>_SOURCES`."""
        return [sources_variable(provider).name for provider in PROVIDERS]

    def rows_in(self, topic: v.Topic) -> list[tuple[str, str, str]]:
        return [*PATTERNS, *_option_rows()] if topic is self.topic else []


@dataclass(frozen=True)
class DefaultOptions:
    """The declaration of the default sources' options (a settings field): each option a
    provider's record gives a variable of its default source (`<PROVIDER>_<SUFFIX>`:
    STRIPE_API_KEY, STRIPE_LIVEMODE, GITHUB_HOOKS, ...), read into {provider: {key: value}},
    each listed in its own topic's README table."""

    doc: str = "the default sources' options"
    topic: v.Topic = v.Topic.DEPLOY

    def variables(self) -> Iterator[tuple[str, Option, v.Variable]]:
        for record in PROVIDERS.values():
            for option in record.all_options:
                if option.default_doc is not None:
                    yield record.name, option, v.Variable(
                        f"{record.name.upper()}_{option.suffix}", option.parse,
                        option.default, option.default_doc, option.topic, option.default_shown)

    def read(self, env: Mapping[str, str]) -> dict[str, dict[str, Any]]:
        """The options set (an option at its default is left out, as an unset variable)."""
        found: dict[str, dict[str, Any]] = {}
        for provider, option, variable in self.variables():
            value = variable.read(env)
            if value != option.default:
                found.setdefault(provider, {})[option.key] = value
        return found

    def names(self) -> list[str]:
        return [variable.name for _, _, variable in self.variables()]

    def rows_in(self, topic: v.Topic) -> list[tuple[str, str, str]]:
        return [(variable.name, variable.doc, variable.default_text())
                for _, _, variable in self.variables() if variable.topic is topic]


def named_sources_field() -> Any:
    return field(default_factory=dict, metadata={v.DECLARATION: NamedSources()})


def default_options_field() -> Any:
    return field(default_factory=dict, metadata={v.DECLARATION: DefaultOptions()})


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
    registry never changes): for what asks per job, the step before its handler. A second
    settings object (a test's copy) gets its own."""
    global _last
    last = _last
    if last is None or last[0] is not settings:
        last = _last = (settings, settings.sources)
    return last[1]
