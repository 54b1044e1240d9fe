"""Providers and settings are declared once: the README's tables are generated from the
declarations, the settings' defaults are the declared ones, and everything that lists
providers reads the registry."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from webhooks import readme
from webhooks.cli import source_of
from webhooks.console.settings import ConsoleSettings
from webhooks.shared import variables
from webhooks.shared.errors import ConfigError
from webhooks.shared.providers import PROVIDERS, reconciled
from webhooks.shared.providers.base import DedupScope, SecretFormat
from webhooks.shared.settings import Settings


def test_the_readme_tables_are_the_declarations() -> None:
    assert readme.stale(readme.README.read_text()) == [], "run `python -m webhooks.readme`"


def test_a_changed_table_is_caught() -> None:
    text = readme.README.read_text().replace("| `PORT` | port of `web` | `8000` |",
                                             "| `PORT` | port of `web` | `8080` |")
    assert readme.stale(text) == ["variables deploy"]
    assert readme.stale(readme.generated(text)) == []


def test_unset_variables_are_the_declared_defaults() -> None:
    assert Settings.from_env({}) == Settings()
    assert ConsoleSettings.from_env({}) == ConsoleSettings()


def test_every_variable_has_a_doc_and_a_section() -> None:
    for declared in variables.declarations(Settings, ConsoleSettings):
        assert declared.doc and declared.topic in set(variables.Topic)


def test_the_secret_variables_are_the_providers() -> None:
    env = {record.secret_variable: "whsec_c2VjcmV0" for record in PROVIDERS.values()}
    assert set(Settings.from_env(env).secrets) == set(PROVIDERS)
    env = {f"{name.upper()}_ALLOWED_IPS": "10.0.0.1" for name in PROVIDERS}
    assert set(Settings.from_env(env).allowed_networks) == set(PROVIDERS)


@pytest.mark.parametrize("secret_format", list(SecretFormat))
def test_generated_secrets_are_valid_in_their_format(secret_format: SecretFormat) -> None:
    secret = secret_format.generate()
    assert secret_format.problem(secret) is None
    assert secret.startswith("whsec_") == (secret_format is not SecretFormat.HEX)


def test_a_whsec_base64_secret_is_checked_at_start() -> None:
    with pytest.raises(ConfigError, match=r"^STANDARD_WEBHOOK_SECRET: "):
        Settings.from_env({"STANDARD_WEBHOOK_SECRET": "whsec_***"})


def test_the_commands_choose_among_the_registrys_providers_and_sources() -> None:
    """`send`, `pause`, `resume` and `events --source` read PROVIDER[/SOURCE] through
    cli.source_of: the registry's providers and configured sources, nothing else."""
    settings = Settings.from_env({"STRIPE_WEBHOOK_SECRET": "whsec_a", "STRIPE_SOURCES": "connect",
                                  "STRIPE_CONNECT_WEBHOOK_SECRET": "whsec_b"})
    assert {source_of(settings, provider) for provider in PROVIDERS} == \
        {(provider, None) for provider in PROVIDERS}
    assert [source_of(settings, source.label, whole=False) for source in settings.sources] == \
        [(source.provider, source.name) for source in settings.sources]
    assert source_of(settings, "stripe/stripe") == ("stripe", "stripe")  # the default alone
    for unknown in ("nope", "stripe/eu", "stripe/", "paddle/connect"):
        with pytest.raises(SystemExit) as exited:
            source_of(settings, unknown)
        assert exited.value.code == 2


def test_reconcile_chooses_among_the_providers_with_an_events_api() -> None:
    # PROVIDER or PROVIDER/SOURCE, read by source_of; a provider without an events API is
    # bad usage (tests/integration/test_connect.py::test_the_reconcile_command_takes_a_source).
    assert set(reconciled()) == {"stripe", "paddle", "github"}


def test_the_handler_modules_are_found_without_being_imported() -> None:
    assert variables.modules("examples.handlers.github_push, tests.handlers_for_tests") == \
        ("examples.handlers.github_push", "tests.handlers_for_tests")
    for missing in ("no.such.module", "examples.nope", "examples.handlers.github_push.x",
                    "not-a-name"):
        with pytest.raises(ValueError, match="no module named"):
            variables.modules(missing)


def test_the_dedup_key_holds_the_source_for_exactly_the_providers_whose_ids_are_per_source(
) -> None:
    """The one list of provider names the schema holds: webhook_dedup_key (migration 0023)
    puts the source in the key of the providers whose records scope dedup to a source. A
    record that changes its scope needs a migration of that function (CONTRIBUTING.md)."""
    path = Path(__file__).parents[2] / "alembic" / "versions" / "0023_partitioned_events.py"
    spec = importlib.util.spec_from_file_location("migration_0023", path)
    assert spec is not None and spec.loader is not None
    migration = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(migration)
    scoped = sorted(name for name, record in PROVIDERS.items()
                    if record.dedup is DedupScope.SOURCE)
    assert sorted(migration.SOURCE_SCOPED) == scoped
    assert f"provider IN ({', '.join(repr(name) for name in scoped)})" in migration.KEY_FUNCTIONS
