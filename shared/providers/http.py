"""An HTTP session for the providers' REST APIs (Paddle, GitHub): urllib3's Retry retries
idempotent GETs on 429 and 5xx, sleeping as long as a Retry-After header asks (capped),
else with exponential backoff; every other failure ends the run as ReconcileFailed. The
session carries the API key, so it requests nothing but the configured API base (same
scheme, host and port), whatever pagination link the API answers."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import requests
from requests.adapters import HTTPAdapter
from urllib3.util.retry import Retry

from webhooks.shared.errors import WebhooksError
from webhooks.shared.terminal import visible

TIMEOUT_SECONDS = 15
RETRIES = 4
MAX_RETRY_AFTER_SECONDS = 60


class ApiError(WebhooksError):
    """A provider API request that failed after its retries. Its text quotes the API's
    answer, control characters escaped (shared/terminal.py `visible`): it is printed by
    `webhooks reconcile`, logged and kept as a run's last_error."""


class Api:
    """One provider's REST API: its base URL, and a session that carries its key. Every
    request, a pagination link the API answered included, goes to the base's scheme, host
    and port or nowhere (ApiError): the key must not go to another host."""

    def __init__(self, base: str, headers: dict[str, str]) -> None:
        self.base = base.rstrip("/")
        self._http = _session(headers)

    def get_json(self, url: str, params: dict[str, Any] | None = None,
                 ) -> tuple[Any, requests.Response]:
        """GET url and its JSON body; ApiError on a failed request, a body that is not
        JSON, or a URL off the API base."""
        _check_same_origin(self.base, url)
        try:
            response = self._http.get(url, params=params, timeout=TIMEOUT_SECONDS)
        except requests.RequestException as error:
            raise ApiError(f"GET {url}: {type(error).__name__}: {error}") from None
        if response.status_code >= 400:
            raise ApiError(f"GET {visible(url)}: HTTP {response.status_code}: "
                           f"{visible(response.text[:200])}")
        try:
            return response.json(), response
        except ValueError:
            raise ApiError(f"GET {url}: the answer is not JSON") from None


def _session(headers: dict[str, str]) -> requests.Session:
    retry = Retry(total=RETRIES, backoff_factor=0.5, status_forcelist=(429, 500, 502, 503, 504),
                  allowed_methods=frozenset({"GET"}), respect_retry_after_header=True,
                  raise_on_status=False)
    retry.DEFAULT_BACKOFF_MAX = MAX_RETRY_AFTER_SECONDS
    http = requests.Session()
    http.headers.update(headers)
    adapter = HTTPAdapter(max_retries=retry)
    http.mount("http://", adapter)
    http.mount("https://", adapter)
    return http


def _check_same_origin(base: str, url: str) -> None:
    want, got = urlsplit(base), urlsplit(url)
    if (want.scheme, want.hostname, want.port) != (got.scheme, got.hostname, got.port):
        raise ApiError(f"a request to {got.scheme}://{got.netloc} refused (a pagination link "
                       f"off the API base {want.scheme}://{want.netloc})")
