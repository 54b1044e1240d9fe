"""An HTTP session for the providers' REST APIs (Paddle, GitHub): urllib3's Retry retries
idempotent GETs on 429 and 5xx, sleeping as long as a Retry-After header asks (capped),
else with exponential backoff; every other failure ends the run as ReconcileFailed. The
session carries the API key, so a pagination link the API answers is followed only to the
configured API base (same scheme, host and port)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import requests
from requests.adapters import HTTPAdapter
from urllib3.util.retry import Retry

from shared.errors import WebhooksError

TIMEOUT_SECONDS = 15
RETRIES = 4
MAX_RETRY_AFTER_SECONDS = 60


class ApiError(WebhooksError):
    """A provider API request that failed after its retries."""


def session(headers: dict[str, str]) -> requests.Session:
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


def get_json(http: requests.Session, url: str, params: dict[str, Any] | None = None,
             ) -> tuple[Any, requests.Response]:
    """GET url and its JSON body; ApiError on a failed request or a body that is not JSON."""
    try:
        response = http.get(url, params=params, timeout=TIMEOUT_SECONDS)
    except requests.RequestException as error:
        raise ApiError(f"GET {url}: {type(error).__name__}: {error}") from None
    if response.status_code >= 400:
        raise ApiError(f"GET {url}: HTTP {response.status_code}: {response.text[:200]}")
    try:
        return response.json(), response
    except ValueError:
        raise ApiError(f"GET {url}: the answer is not JSON") from None


def check_same_origin(base: str, url: str) -> str:
    """url, if it is on the API base's scheme, host and port; else ApiError (the key must
    not go to another host)."""
    want, got = urlsplit(base), urlsplit(url)
    if (want.scheme, want.hostname, want.port) != (got.scheme, got.hostname, got.port):
        raise ApiError(f"a pagination link to {got.scheme}://{got.netloc} refused: the API "
                       f"base is {want.scheme}://{want.netloc}")
    return url
