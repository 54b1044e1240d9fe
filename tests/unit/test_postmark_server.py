"""The fake Postmark as a separate process, the way acceptance tests run it: started with
`python -m tests.fakes.postmark_server`, controlled and read over HTTP."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.fakes.postmark_server import DEFAULT_TOKEN
from webhooks.shared.errors import EmailOutcomeUnknown
from webhooks.worker.postmark import OutboundEmail, PostmarkSender, Sent

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture()
def server_url() -> Iterator[str]:
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.fakes.postmark_server", "--port", "0",
         "--mode", "fail_first=1", "--mode", "invalid_pattern=bogus"],
        cwd=ROOT, stdout=subprocess.PIPE, text=True,
    )
    try:
        assert process.stdout is not None
        port = int(process.stdout.readline())
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(timeout=10)


def test_the_fake_runs_as_a_process_with_modes_set_by_flags_and_over_http(server_url):
    sender = PostmarkSender(DEFAULT_TOKEN, server_url, "billing@example.com", timeout=2)
    email = OutboundEmail("k1", "a@example.com", "s", "t", "<p>h</p>")

    [first] = sender.send([email])  # fail_first=1 from the command line
    [second] = sender.send([email])
    modes = requests.post(f"{server_url}/_control/mode", json={"drop_after_accept": 1},
                          timeout=5).json()
    [third] = sender.send([OutboundEmail("k2", "b@example.com", "s", "t", "")])
    seen = requests.get(f"{server_url}/_control/messages", timeout=5).json()

    assert isinstance(first, EmailOutcomeUnknown)
    assert isinstance(second, Sent)
    assert (modes["drop_after_accept"], modes["invalid_pattern"]) == (1, "bogus")
    assert isinstance(third, EmailOutcomeUnknown)
    assert seen["by_key"] == {"k1": 1, "k2": 1}
    assert seen["requests"]["POST /email"] == 3
    requests.post(f"{server_url}/_control/reset", timeout=5)
    assert requests.get(f"{server_url}/_control/messages", timeout=5).json()["total"] == 0
