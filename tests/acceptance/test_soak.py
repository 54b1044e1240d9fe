"""The long run (tests/acceptance/soak.py): only with `pytest --soak` or WEBHOOKS_SOAK=1;
WEBHOOKS_SOAK_MINUTES shortens or lengthens it (default 10)."""

from __future__ import annotations

import os

import pytest

from tests.acceptance import soak
from tests.acceptance.harness import System


@pytest.mark.soak
@pytest.mark.timeout(3600)
def test_long_run_with_a_worker_kill_every_minute(fresh: System) -> None:
    minutes = float(os.environ.get("WEBHOOKS_SOAK_MINUTES", "10"))
    report = soak.run(fresh, minutes=minutes)
    print("\nlong run: " + "; ".join(f"{key} {value}" for key, value in report.items()))
