"""The embedded Postgres keeps to its data folder, also as root: no parent folder gains a
permission, its socket and password file are private, and a login needs the password,
also when the data path is too long for a socket in it."""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from webhooks import embedded


def modes(*paths: Path) -> dict[Path, int]:
    return {path: stat.S_IMODE(path.stat().st_mode) for path in paths}


@pytest.fixture
def private_home(tmp_path: Path) -> Iterator[Path]:
    """A project inside a 0700 folder, as under /root or a home folder."""
    home = tmp_path / "home"
    (home / "proj").mkdir(parents=True)
    home.chmod(0o700)
    yield home / "proj"


@contextlib.contextmanager
def started(data_dir: Path) -> Iterator[str]:
    url = embedded.start_postgres(data_dir)
    try:
        yield url
    finally:
        embedded.stop_postgres(data_dir)


def test_it_changes_no_permission_outside_its_folder_and_needs_its_password(
        private_home: Path) -> None:
    ancestors = [private_home, *private_home.parents]
    before = modes(*ancestors, *embedded._bindir().parents)
    data_dir = private_home / ".webhooks"
    with started(data_dir) as url:
        assert modes(*ancestors, *embedded._bindir().parents) == before
        assert modes(data_dir, data_dir / "pgdata") == {data_dir: 0o700,
                                                        data_dir / "pgdata": 0o700}
        assert modes(embedded.postgres_password_file(data_dir)) == {
            embedded.postgres_password_file(data_dir): 0o600}
        assert f"host={data_dir / 'pgdata'}" in url  # the socket in the 0700 pgdata
        with psycopg.connect(url) as conn:
            assert conn.execute("SELECT current_user").fetchone() == ("postgres",)
        without = url.replace(embedded.postgres_password_file(data_dir).read_text().strip(),
                              "guess")
        with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
            psycopg.connect(without)
        assert embedded.running_postgres_url(data_dir) == url
    assert embedded.running_postgres_url(data_dir) is None


def test_a_data_path_too_long_for_a_socket_gets_a_private_socket_folder(
        private_home: Path) -> None:
    data_dir = private_home / ("d" * 100) / ".webhooks"
    with started(data_dir) as url:
        socket_dir = Path(url.split("host=", 1)[1])
        assert socket_dir != data_dir / "pgdata"
        assert socket_dir.stat().st_uid == os.geteuid()
        assert modes(socket_dir) == {socket_dir: 0o700}
        with psycopg.connect(url) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
    assert not socket_dir.exists()


def test_a_restart_reuses_the_cluster_and_its_password(private_home: Path) -> None:
    data_dir = private_home / ".webhooks"
    with started(data_dir) as url:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE TABLE kept (n int)")
    with started(data_dir) as again:
        assert again == url
        with psycopg.connect(again) as conn:
            assert conn.execute("SELECT count(*) FROM kept").fetchone() == (0,)
