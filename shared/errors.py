"""The project's error hierarchy. Every error a user can cause has a one-line message."""

from __future__ import annotations


class WebhooksError(Exception):
    """Root of every error this project raises on purpose."""


MAX_ERROR_LENGTH = 2000  # the longest error text stored on a job or an email row


def describe(error: BaseException) -> str:
    """An error as stored in a row's last_error: its type and message, bounded."""
    return f"{type(error).__name__}: {error}"[:MAX_ERROR_LENGTH]


class ConfigError(WebhooksError):
    """A bad environment variable. Stops the process at start."""

    def __init__(self, variable: str, problem: str) -> None:
        self.variable = variable
        super().__init__(f"{variable}: {problem}")


class MissingVariable(ConfigError):
    """A variable a process cannot run without is unset (DATABASE_URL, BROKER_URL): the
    Procfile's processes never fall back to an embedded server."""

    def __init__(self, variable: str, hint: str) -> None:
        super().__init__(variable, f"not set; {hint}")


class UnusableVariable(MissingVariable):
    """A variable set to what a process must not run with, as if it were unset (a console
    password too short to face the network): exits 1, like a missing one."""

    def __init__(self, variable: str, problem: str) -> None:
        ConfigError.__init__(self, variable, problem)


class AppConflict(WebhooksError):
    """The apps named to run cannot run together (two lock keys for one provider): every
    process exits 1 at start, naming both."""


class AppNotLoaded(WebhooksError):
    """A module WEBHOOK_HANDLERS (or an entry point) names failed to import: every process
    exits 1 at start, naming the module and its error."""


class RejectedDelivery(WebhooksError):
    """A delivery the ingest refuses; carries the HTTP status and a metric reason."""

    status = 400
    reason = "rejected"


class InvalidSignature(RejectedDelivery):
    reason = "signature"


class InvalidPayload(RejectedDelivery):
    reason = "payload"


class PayloadTooLarge(RejectedDelivery):
    status = 413
    reason = "too_large"


class BodyTimeout(RejectedDelivery):
    """The client stopped sending before its body was whole (ingest.front)."""

    status = 408
    reason = "body_timeout"


class ProviderNotConfigured(RejectedDelivery):
    status = 404
    reason = "not_configured"


class SourceNotAllowed(RejectedDelivery):
    """The request came from outside the provider's <PROVIDER>_ALLOWED_IPS."""

    status = 403
    reason = "source_ip"


class DatabaseUnavailable(WebhooksError):
    """Postgres did not answer; the ingest turns this into a 503."""


class PermanentJobError(WebhooksError):
    """A job that can never succeed (a required field missing): fail it at once."""


class EmailRejected(WebhooksError):
    """Postmark refused a message for good (invalid or inactive recipient)."""


class EmailOutcomeUnknown(WebhooksError):
    """A send whose outcome we could not learn (timeout, dropped connection, 5xx)."""
