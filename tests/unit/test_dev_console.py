"""`webhooks dev`'s console: a password generated once and kept in the data folder, and
CONSOLE_PORT 8001 unless set, or a free port when 8001 is taken or is the web's."""

from __future__ import annotations

import socket
import stat
from pathlib import Path

from webhooks import dev


def test_the_password_is_generated_once_and_kept_private(tmp_path: Path) -> None:
    first = dev.dev_console_password(tmp_path / "data")
    assert len(first) >= 20
    assert dev.dev_console_password(tmp_path / "data") == first
    mode = (tmp_path / "data" / "console-password").stat().st_mode
    assert stat.S_IMODE(mode) == 0o600


def test_the_console_port_is_the_one_set_or_a_free_one() -> None:
    assert dev._console_port({"CONSOLE_PORT": "9123"}, 8000) == "9123"
    with socket.socket() as taken:
        try:
            taken.bind(("127.0.0.1", dev.CONSOLE_PORT))
        except OSError:
            pass  # something else holds 8001 already: the fallback is what is tested anyway
        chosen = dev._console_port({}, 8000)
    assert chosen != str(dev.CONSOLE_PORT)
    assert dev._console_port({}, dev.CONSOLE_PORT) != str(dev.CONSOLE_PORT)


def test_the_dev_secret_files_are_private_from_their_creation(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Created 0600 by open() itself (never written 0644 and chmod'ed after: a reader that
    opened it in between kept it), in a 0700 folder."""
    import os
    import stat

    from webhooks import dev

    modes: list[int] = []
    real_open = os.open

    def spying_open(path, flags, mode=0o777, *args, **kwargs):  # type: ignore[no-untyped-def]
        if str(path).startswith(str(tmp_path)) and flags & os.O_CREAT:
            modes.append(mode)
        return real_open(path, flags, mode, *args, **kwargs)

    monkeypatch.setattr(os, "open", spying_open)
    folder = tmp_path / "data"
    dev.dev_secrets(folder)
    dev.dev_console_password(folder)
    assert modes == [0o600, 0o600]
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    for name in ("dev-secrets.json", "console-password"):
        assert stat.S_IMODE((folder / name).stat().st_mode) == 0o600


def test_the_banner_prints_no_database_or_broker_password() -> None:
    from webhooks.dev import without_password

    assert without_password("postgresql://app:s3cret@db:5432/x") == "postgresql://app:***@db:5432/x"
    assert without_password("redis://:hunter2@cache:6379/0") == "redis://:***@cache:6379/0"
    assert without_password("unix:///tmp/redis.sock?db=0") == "unix:///tmp/redis.sock?db=0"
