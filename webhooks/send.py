"""`webhooks send`: sign a JSON file as the provider would and POST it to the ingest,
optionally many times at once, to watch deduplication work."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import requests

from webhooks.shared import providers


@dataclass(frozen=True)
class Answer:
    status: int
    body: str


def signed_headers(provider: str, body: bytes, secret: str) -> dict[str, str]:
    module = providers.get(provider)
    if module is None:
        raise ValueError(f"unknown provider {provider!r}")
    headers: dict[str, str] = {"Content-Type": "application/json"}
    # Providers whose event id is a header derive it from the body in sign(), so sending
    # the same file twice is the same event (a retry), as the provider would do.
    headers.update(module.sign(body, secret, time.time()))
    return headers


def post(url: str, body: bytes, headers: dict[str, str], repeat: int,
         concurrency: int) -> list[Answer]:
    def one(_: int) -> Answer:
        try:
            response = requests.post(url, data=body, headers=headers, timeout=30)
        except requests.RequestException as error:
            return Answer(0, f"{type(error).__name__}: {error}")
        return Answer(response.status_code, response.text.strip())

    with ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
        return list(pool.map(one, range(repeat)))
