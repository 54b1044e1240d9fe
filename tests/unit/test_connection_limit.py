"""How many connections a `web` process serves (ingest/server.py `connection_limit`): its
open-files limit raised as far as allowed, and what cannot be held said in one line."""

from __future__ import annotations

import logging
import resource

import pytest

from webhooks.ingest import server


class Limits:
    def __init__(self, soft: int, hard: int, settable: bool = True) -> None:
        self.soft, self.hard, self.settable = soft, hard, settable

    def get(self, which: int) -> tuple[int, int]:
        assert which == resource.RLIMIT_NOFILE
        return self.soft, self.hard

    def set(self, which: int, limits: tuple[int, int]) -> None:
        if not self.settable:
            raise ValueError("not allowed")
        self.soft, self.hard = limits


def limit_with(monkeypatch: pytest.MonkeyPatch, limits: Limits) -> int:
    monkeypatch.setattr(resource, "getrlimit", limits.get)
    monkeypatch.setattr(resource, "setrlimit", limits.set)
    return server.connection_limit()


def test_the_soft_limit_is_raised_for_every_connection(monkeypatch: pytest.MonkeyPatch,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    limits = Limits(1024, 1_048_576)
    assert limit_with(monkeypatch, limits) == server.CONNECTIONS
    assert limits.soft == server.CONNECTIONS + server.RESERVED_DESCRIPTORS
    assert not caplog.records


def test_a_low_hard_limit_serves_fewer_and_says_so(monkeypatch: pytest.MonkeyPatch,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    limits = Limits(1024, 4096)
    assert limit_with(monkeypatch, limits) == 4096 - server.RESERVED_DESCRIPTORS
    assert limits.soft == 4096
    assert [record.levelname for record in caplog.records] == ["WARNING"]
    assert "ulimit -n" in caplog.records[0].getMessage()


def test_a_limit_that_cannot_be_raised_keeps_a_quarter_for_the_process(
        monkeypatch: pytest.MonkeyPatch) -> None:
    assert limit_with(monkeypatch, Limits(1024, 1024, settable=False)) == 768
