"""The project's error hierarchy. Every error a user can cause has a one-line message."""

from __future__ import annotations


class WebhooksError(Exception):
    """Root of every error this project raises on purpose."""


class ConfigError(WebhooksError):
    """A bad environment variable. Stops the process at start."""

    def __init__(self, variable: str, problem: str) -> None:
        self.variable = variable
        super().__init__(f"{variable}: {problem}")


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


class ProviderNotConfigured(RejectedDelivery):
    status = 404
    reason = "not_configured"


class DatabaseUnavailable(WebhooksError):
    """Postgres did not answer; the ingest turns this into a 503."""


class PermanentJobError(WebhooksError):
    """A job that can never succeed (a required field missing): fail it at once."""


class RetryLater(WebhooksError):
    """A job that should be tried again after its backoff, without counting as a bug."""


class EmailRejected(WebhooksError):
    """Postmark refused a message for good (invalid or inactive recipient)."""


class EmailOutcomeUnknown(WebhooksError):
    """A send whose outcome we could not learn (timeout, dropped connection, 5xx)."""
