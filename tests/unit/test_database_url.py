"""DATABASE_URL with several hosts, as libpq writes it, becomes the host list SQLAlchemy
hands to libpq; each host's port is checked at start."""

from __future__ import annotations

import pytest

from webhooks.shared import db
from webhooks.shared.errors import ConfigError
from webhooks.shared.settings import Settings


@pytest.mark.parametrize(("raw", "expected"), [
    ("postgresql://app:pw@db1:5432,db2:5433/shop?target_session_attrs=read-write",
     "postgresql+psycopg://app:pw@/shop?host=db1:5432&host=db2:5433"
     "&target_session_attrs=read-write"),
    ("postgres://app@db1,db2:6432/shop", "postgresql+psycopg://app@/shop?host=db1&host=db2:6432"),
    ("postgresql://app:pw@db:5432/shop", "postgresql+psycopg://app:pw@db:5432/shop"),
    ("postgresql://postgres:pw@/postgres?host=/run/pg",
     "postgresql+psycopg://postgres:pw@/postgres?host=/run/pg"),
])
def test_several_hosts_become_libpqs_host_list(raw: str, expected: str) -> None:
    assert db.sqlalchemy_url(Settings.from_env({"DATABASE_URL": raw}).database_url or "") \
        == expected


def test_a_bad_port_of_any_host_is_refused_naming_the_variable() -> None:
    # The port's text is not quoted: it can be a piece of a password holding an unencoded
    # `/` (`app:a,b:Zq9/x@h`), tests/integration/test_bad_values.py
    # test_a_bad_url_names_its_variable_and_never_a_part_of_its_password.
    with pytest.raises(ConfigError, match=r"^DATABASE_URL: .*port is not a number") as error:
        Settings.from_env({"DATABASE_URL": "postgresql://app@db1:5432,db2:x/shop"})
    assert "'x'" not in str(error.value)
