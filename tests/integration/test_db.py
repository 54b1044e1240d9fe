"""shared.db's statements straight through psycopg, on a real Postgres."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from shared import db

NUMBERS = sa.text("SELECT n, n * 2 AS double FROM generate_series(1, :last) AS n")


def test_fetch_all_in_returns_rows_by_name_and_position(clean_db: Engine) -> None:
    with clean_db.connect() as conn:
        rows = db.fetch_all_in(conn, NUMBERS, {"last": 3})
        assert [(row.n, row.double) for row in rows] == [(1, 2), (2, 4), (3, 6)]
        assert rows[2][0] == 3
        assert db.fetch_all_in(conn, sa.text("SELECT 1 WHERE false"), {}) == []


def test_execute_in_returns_the_row_count(clean_db: Engine) -> None:
    with clean_db.begin() as conn:
        conn.execute(sa.text("CREATE TEMP TABLE t (n int) ON COMMIT DROP"))
        assert db.execute_in(conn, sa.text("INSERT INTO t SELECT generate_series(1, 5)"), {}) == 5
        assert db.execute_in(conn, sa.text("UPDATE t SET n = 0 WHERE n > :n"), {"n": 3}) == 2


def test_errors_come_out_as_sqlalchemy_errors(clean_db: Engine) -> None:
    with clean_db.connect() as conn, pytest.raises(sa.exc.DataError):
        db.execute_in(conn, sa.text("SELECT 1 / :zero"), {"zero": 0})
