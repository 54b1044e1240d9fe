"""Every environment variable's bad value stops every Procfile process at start: one line
on stderr naming the variable, exit 2, no traceback (SPEC, "Configuration"). Each variable
is tried on the real command, `python -m webhooks <process>`, the Procfile processes taken
in turn; and every declared variable whose text can be wrong has its bad value here."""

from __future__ import annotations

import itertools
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from webhooks.console.settings import ConsoleSettings
from webhooks.shared import variables
from webhooks.shared.providers import PROVIDERS
from webhooks.shared.settings import Settings
from webhooks.shared.sources import DefaultOptions

ROOT = Path(__file__).resolve().parents[2]
PROCESSES = ("web", "worker", "clock", "console", "migrate")

BAD_VALUES: dict[str, str] = {
    "DATABASE_URL": "mysql://u@h/db",
    "DATABASE_POOLER": "session",
    "BROKER_URL": "redis://",
    "PORT": "eighty",
    "STANDARD_WEBHOOK_SECRET": "whsec_not*base64",
    "WEBHOOK_TOLERANCE_SECONDS": "0",
    "MAX_BODY_BYTES": "-1",
    "JOB_MAX_ATTEMPTS": "many",
    "JOB_RETRY_BASE_SECONDS": "-2",
    "SWEEP_INTERVAL_SECONDS": "0",
    "RETENTION_DAYS": "1.5",
    "DEDUP_HORIZON_DAYS": "6",
    "POSTMARK_API_URL": "ftp://postmark",
    "EMAIL_FROM": "billing",
    "WEBHOOK_HANDLERS": "no.such.module",
    "WEB_CONCURRENCY": "x",
    "WEB_THREADS": "0",
    "WEB_BODY_BUDGET_BYTES": "64M",
    "WORKER_METRICS_PORT": "abc",
    "WORKER_METRICS_HOST": "not-an-address",
    "LOG_FORMAT": "xml",
    "LOG_LEVEL": "LOUD",
    "STRIPE_API_BASE": "stripe.com",
    "PADDLE_API_BASE": "http://",
    "GITHUB_API_BASE": "https://[::1",
    "GITHUB_HOOKS": "repos/acme",
    "RECONCILE_INTERVAL_SECONDS": "hourly",
    "CALL_STRIPE_KEY_HOURS": "0",
    "RECONCILE_AFTER_FAILOVER_HOURS": "-1",
    "AUDIT_INTERVAL_SECONDS": "-1",
    "TRUSTED_PROXIES": "33",
    "OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4318",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://[collector",
    "PROMETHEUS_MULTIPROC_DIR": "/no/such/folder",
    "CONSOLE_PORT": "70000",
    "CONSOLE_HOST": "not-an-address",
    "CONSOLE_USER": "ad:min",
    "CONSOLE_READONLY": "maybe",
    **{f"{name.upper()}_ALLOWED_IPS": "10.0.0.0/33" for name in PROVIDERS},
    "STRIPE_LIVEMODE": "sometimes",
    "STRIPE_SOURCES": "Connect",
    "PADDLE_SOURCES": "paddle",
    "SHOPIFY_SOURCES": "9shop",
    "GITHUB_SOURCES": "org,org",
    "SLACK_SOURCES": "default",
    "STANDARD_SOURCES": "x" * 33,
    "NOTIFY_SLACK_WEBHOOK_URL": "hooks.slack.com/services/x",
    "NOTIFY_EMAIL_TO": "oncall",
    "NOTIFY_WEBHOOK_URL": "ftp://hooks.example.com",
    "NOTIFY_WEBHOOK_SECRET": "whsec_***",
    "NOTIFY_WINDOW_SECONDS": "0",
    "NOTIFY_FAILING_THRESHOLD": "0",
    "CONSOLE_URL": "console.example.com",
}
# A named source's variables (the README's patterns, `STRIPE_<NAME>_EVENTS`): each with the
# variables that name its source and give it a secret.
CONNECT = {"STRIPE_SOURCES": "connect", "STRIPE_CONNECT_WEBHOOK_SECRET": "whsec_x"}
SOURCE_BAD_VALUES: dict[str, tuple[str, dict[str, str]]] = {
    "STANDARD_CLERK_WEBHOOK_SECRET": ("whsec_not*base64", {"STANDARD_SOURCES": "clerk"}),
    "STRIPE_CONNECT_ALLOWED_IPS": ("10.0.0.0/33", CONNECT),
    "STRIPE_CONNECT_CONNECT": ("maybe", CONNECT),
    "STRIPE_CONNECT_EVENTS": ("fat", CONNECT),
    "STRIPE_CONNECT_LIVEMODE": ("sometimes", CONNECT),
    "GITHUB_ORG_HOOKS": ("repos/acme", {"GITHUB_SOURCES": "org",
                                        "GITHUB_ORG_WEBHOOK_SECRET": "s"}),
    # A call target's variables (CALL_<N>_*: the names are the operator's).
    "CALL_CRM_URL": ("crm.example.com", {}),
    "CALL_CRM_KEY_HOURS": ("a day", {"CALL_CRM_URL": "https://crm.example.com"}),
    "CALL_STRIPE_URL": ("https://api.stripe.com", {}),
}
# Variables any text is valid for: tokens, passwords, names, paths, the HMAC secrets.
ANY_TEXT = {declared.name for declared in variables.declarations(Settings, ConsoleSettings)
            if isinstance(declared, variables.Variable)
            and declared.parse in (variables.text, variables.path)}
ANY_TEXT |= {variable.name for _, _, variable in DefaultOptions().variables()
             if variable.parse is variables.text}
ANY_TEXT |= {record.secret_variable for record in PROVIDERS.values()
             if record.secret_format.problem("not base64!") is None}
CONSOLE_ONLY = {declared.name for declared in variables.declarations(ConsoleSettings)}


def declared_names() -> set[str]:
    found: set[str] = set()
    for declared in variables.declarations(Settings, ConsoleSettings):
        found |= ({declared.name} if isinstance(declared, variables.Variable)
                  else set(declared.names()))
    return found


def test_every_declared_variable_has_a_bad_value_here() -> None:
    assert declared_names() - ANY_TEXT == set(BAD_VALUES)


def _process_for(variable: str, turn: int) -> str:
    return "console" if variable in CONSOLE_ONLY else PROCESSES[turn % len(PROCESSES)]


CASES = [(variable, _process_for(variable, turn))
         for turn, variable in zip(itertools.count(), BAD_VALUES, strict=False)]


@pytest.mark.parametrize(("variable", "process"), CASES, ids=[v for v, _ in CASES])
def test_a_bad_value_is_one_line_naming_it_and_exit_2(variable: str, process: str,
                                                      tmp_path: Path) -> None:
    _check_refused(variable, {variable: BAD_VALUES[variable]}, process, tmp_path)


SOURCE_CASES = [(variable, PROCESSES[turn % len(PROCESSES)])
                for turn, variable in enumerate(SOURCE_BAD_VALUES)]


@pytest.mark.parametrize(("variable", "process"), SOURCE_CASES, ids=[v for v, _ in SOURCE_CASES])
def test_a_named_sources_bad_value_is_one_line_naming_it_and_exit_2(
        variable: str, process: str, tmp_path: Path) -> None:
    bad, named = SOURCE_BAD_VALUES[variable]
    _check_refused(variable, {**named, variable: bad}, process, tmp_path)


def _check_refused(variable: str, values: dict[str, str], process: str, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OTEL_", "CONSOLE_", "WEBHOOK", "WEB_", "WORKER_"))}
    env.update({"DATABASE_URL": "postgresql://u@127.0.0.1:1/db", "BROKER_URL": "redis://127.0.0.1:1/0",
                "CONSOLE_PASSWORD": "a long enough password", "PYTHONPATH": str(ROOT),
                **values})
    result = subprocess.run([sys.executable, "-m", "webhooks", process], cwd=tmp_path,
                            env=env, capture_output=True, text=True, timeout=60)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert len(lines) == 1 and lines[0].startswith(f"webhooks: {variable}: "), lines


def test_a_notification_webhook_without_its_secret_stops_the_process(tmp_path: Path) -> None:
    _check_refused("NOTIFY_WEBHOOK_SECRET", {"NOTIFY_WEBHOOK_URL": "https://hooks.example.com/x"},
                   "worker", tmp_path)


@pytest.mark.parametrize(("variable", "url", "password"), [
    ("DATABASE_URL", "postgresql://app:Xy7/Qz9#k@db.internal:5432/app", "Xy7/Qz9#k"),
    ("DATABASE_URL", "postgresql://user:S3cretPw/db", "S3cretPw"),  # "@host" forgotten
    ("DATABASE_URL", "postgresql://app:Pw9?x=1@db.internal/app", "Pw9?x=1"),
    ("DATABASE_URL", "postgresql://app:Zq[8@db.internal/app", "Zq[8"),
    ("DATABASE_URL", "postgresql://app:Pw%ZZ@db.internal:99999/app", "Pw%ZZ"),
    ("DATABASE_URL", "app:Hk2pass@db.internal/app", "Hk2pass"),  # no scheme
    ("BROKER_URL", "redis://:Rd5/Pw@cache.internal:6379/0", "Rd5/Pw"),
    ("NOTIFY_SLACK_WEBHOOK_URL", "https://hooks.slack.com:T0K3N/services/x", "T0K3N"),
])
def test_a_bad_url_names_its_variable_and_never_a_part_of_its_password(
        variable: str, url: str, password: str, tmp_path: Path) -> None:
    """An unencoded `/`, `#` or `?` in a password (a common paste mistake) makes the
    URL's port or host unreadable. The one line goes to the platform's logs: it says what
    is wrong and hints at the encoding, but quotes no part of the URL's login (urllib's
    message would: "Port could not be cast to integer value as 'Xy7'")."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OTEL_", "CONSOLE_", "WEBHOOK", "WEB_", "WORKER_"))}
    env.update({"DATABASE_URL": "postgresql://u@127.0.0.1:1/db",
                "BROKER_URL": "redis://127.0.0.1:1/0", "PYTHONPATH": str(ROOT), variable: url})
    result = subprocess.run([sys.executable, "-m", "webhooks", "migrate"], cwd=tmp_path,
                            env=env, capture_output=True, text=True, timeout=60)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2, result.stderr
    assert len(lines) == 1 and lines[0].startswith(f"webhooks: {variable}: "), lines
    output = result.stdout + result.stderr
    for part in {password, *(piece for piece in re.split(r"[/#?\[%=]", password)
                             if len(piece) >= 3)}:
        assert part not in output, (part, output)
