"""The source registry: declared once from the environment (shared/sources.py)."""

from __future__ import annotations

import pytest

from webhooks.shared.errors import ConfigError, MissingVariable
from webhooks.shared.providers import PROVIDERS, github
from webhooks.shared.providers.stripe import CONNECT, EVENTS, LIVEMODE, EventKind, Livemode
from webhooks.shared.settings import Settings
from webhooks.shared.sources import secret_variable


def test_the_default_source_is_the_providers_own_variables() -> None:
    settings = Settings.from_env({"STRIPE_WEBHOOK_SECRET": "whsec_a", "STRIPE_API_KEY": "sk_1",
                                  "STRIPE_LIVEMODE": "live", "GITHUB_WEBHOOK_SECRET": "g"})
    stripe = settings.sources.get("stripe")
    assert stripe is not None and stripe.label == "stripe" and stripe.default
    assert (stripe.secrets, stripe.credentials, LIVEMODE.of(stripe)) == (("whsec_a",), "sk_1",
                                                                 Livemode.LIVE)
    assert [source.label for source in settings.sources] == ["stripe", "github"]


def test_named_sources_take_their_variables() -> None:
    settings = Settings.from_env({
        "STRIPE_SOURCES": "connect, thin", "STRIPE_CONNECT_WEBHOOK_SECRET": "whsec_c",
        "STRIPE_CONNECT_CONNECT": "1", "STRIPE_CONNECT_ALLOWED_IPS": "10.0.0.0/8",
        "STRIPE_THIN_WEBHOOK_SECRET": "whsec_t", "STRIPE_THIN_EVENTS": "thin",
        "STRIPE_THIN_API_KEY": "sk_thin", "STRIPE_THIN_LIVEMODE": "test",
        "SLACK_SOURCES": "ops", "SLACK_OPS_SIGNING_SECRET": "s",
        "GITHUB_SOURCES": "org", "GITHUB_ORG_WEBHOOK_SECRET": "g", "GITHUB_ORG_TOKEN": "t",
        "GITHUB_ORG_HOOKS": "orgs/acme/hooks/1"})
    connect, thin = settings.sources.of("stripe")
    assert connect.label == "stripe/connect" and CONNECT.of(connect) and not connect.default
    assert [str(n) for n in connect.allowed_networks] == ["10.0.0.0/8"]
    assert (EVENTS.of(thin), thin.credentials, LIVEMODE.of(thin)) == (EventKind.THIN, "sk_thin",
                                                          Livemode.TEST)
    ops = settings.sources.get("slack", "ops")
    assert ops is not None and ops.secrets == ("s",)
    org = settings.sources.get("github", "org")
    assert org is not None
    assert (org.credentials, github.HOOKS.of(org)) == ("t", ("orgs/acme/hooks/1",))
    assert settings.sources.get("stripe") is None  # no STRIPE_WEBHOOK_SECRET


def test_each_providers_secret_variable_takes_the_name_after_its_prefix() -> None:
    names = {name: secret_variable(record, "eu") for name, record in PROVIDERS.items()}
    assert names["stripe"] == "STRIPE_EU_WEBHOOK_SECRET"
    assert names["slack"] == "SLACK_EU_SIGNING_SECRET"
    assert names["standard"] == "STANDARD_EU_WEBHOOK_SECRET"


@pytest.mark.parametrize(("env", "variable"), [
    ({"STRIPE_SOURCES": "connect"}, "STRIPE_CONNECT_WEBHOOK_SECRET"),
    ({"SLACK_SOURCES": "ops"}, "SLACK_OPS_SIGNING_SECRET"),
    ({"STRIPE_SOURCES": "d", "STRIPE_D_WEBHOOK_SECRET": "whsec_d", "STRIPE_D_EVENTS": "thin"},
     "STRIPE_D_API_KEY"),
])
def test_a_missing_secret_or_a_thin_sources_api_key_is_a_missing_variable(
        env: dict[str, str], variable: str) -> None:
    with pytest.raises(MissingVariable, match=f"^{variable}: "):
        Settings.from_env(env)


@pytest.mark.parametrize("names", ["stripe", "default", "Connect", "a-b", "x" * 33, "a,a",
                                   "1abc"])
def test_a_bad_source_name_is_refused(names: str) -> None:
    with pytest.raises(ConfigError, match=r"^STRIPE_SOURCES: ") as refused:
        Settings.from_env({"STRIPE_SOURCES": names})
    assert not isinstance(refused.value, MissingVariable)


def test_a_path_names_its_provider_and_its_sources_label() -> None:
    from webhooks.ingest.webhooks import provider_of

    assert provider_of("/webhooks/stripe") == ("stripe", "stripe")
    assert provider_of("/webhooks/stripe/connect") == ("stripe", "stripe/connect")
    for path in ("/webhooks/", "/webhooks/stripe/", "/webhooks/stripe/a/b", "/other/stripe"):
        assert provider_of(path) is None, path
