"""Versioned migrations of the journal tables: a lakehouse made with the pre-migration schema is
upgraded without losing a row, on SQLite and on a real PostgreSQL; concurrent starters are safe.

The pre-migration ("v1") database is built by the baseline revision ``0001`` (exactly the schema
that code created, before Alembic) with its version table dropped, as such a lakehouse has none.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from alembic import command
from sqlalchemy import MetaData, create_engine, inspect, text

import wap_core.checks.store
import wap_core.notify.deliverer
import wap_core.security.tokens
import wap_core.store.batches
import wap_core.workflow.review  # noqa: F401  (with the imports above: every owner of a table, on the metadata)
from wap_core import Lakehouse, Settings
from wap_core.lake.profile import TableProfile
from wap_core.store.journal import Journal
from wap_core.store.migrate import (
    BASELINE,
    HEAD,
    VERSION_TABLE,
    _alembic_config,
    current_revision,
    script_head,
)
from wap_core.store.profiles import ProfileStore
from wap_core.store.schema import metadata

ROOT = Path(__file__).resolve().parent.parent

AT = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
BIG = 8_123_456_789_012_345_678  # snapshot ids are 64-bit


def make_v1(url: str) -> None:
    """A catalog database as the pre-migration code left it: v1 tables, rows in every one, no version table."""
    engine = create_engine(url)
    with engine.begin() as conn:
        command.upgrade(_alembic_config(conn), BASELINE)
        conn.execute(text(f"DROP TABLE {VERSION_TABLE}"))
    v1 = MetaData()
    v1.reflect(engine)
    t = v1.tables
    with engine.begin() as conn:
        conn.execute(
            t["wap_journal"].insert(),
            [
                {
                    "at": AT,
                    "user_name": "ann",
                    "action": "ingest",
                    "table_name": "demo.people",
                    "branch": "b1",
                    "snapshot_before": None,
                    "snapshot_after": BIG,
                    "outcome": "written",
                    "reason": None,
                    "details": json.dumps({"rows": 2}),
                },
                {
                    "at": AT,
                    "user_name": "bob",
                    "action": "publish",
                    "table_name": "demo.people",
                    "branch": "b1",
                    "snapshot_before": 1,
                    "snapshot_after": BIG,
                    "outcome": "forced",
                    "reason": "owner accepts",
                    "details": json.dumps({"forced": True}),
                },
            ],
        )
        conn.execute(
            t["wap_audits"].insert(),
            [
                {
                    "at": AT,
                    "user_name": "ann",
                    "table_name": "demo.people",
                    "branch": "b1",
                    "snapshot_id": BIG,
                    "fork_snapshot_id": 1,
                    "status": "failed",
                    "result": json.dumps({"status": "failed"}),
                }
            ],
        )
        conn.execute(
            t["wap_profiles"].insert(),
            [{"table_name": "demo.people", "snapshot_id": BIG, "at": AT, "profile": json.dumps({"rows": 5})}],
        )
        conn.execute(
            t["wap_batch_profiles"].insert(),
            [
                {
                    "table_name": "demo.people",
                    "head_snapshot_id": BIG,
                    "fork_snapshot_id": 1,
                    "at": AT,
                    "profile": json.dumps({"rows": 2}),
                }
            ],
        )
    engine.dispose()


def assert_v1_rows_intact(journal: Journal) -> None:
    hist = journal.history("demo.people")
    assert [(e.user, e.action, e.outcome, e.reason, e.snapshot_after, e.at) for e in hist] == [
        ("bob", "publish", "forced", "owner accepts", BIG, AT),
        ("ann", "ingest", "written", None, BIG, AT),
    ]
    assert all(e.intent_id is None and e.reconciled is False for e in hist)
    assert hist[0].details == {"forced": True}
    audit = journal.latest_audit("demo.people", "b1")
    assert audit is not None and (audit.status, audit.snapshot_id, audit.user) == ("failed", BIG, "ann")
    profiles = ProfileStore(journal.engine)
    assert profiles.load_profile("demo.people", BIG) == TableProfile(5, {})
    assert profiles.load_batch_profile("demo.people", BIG) == (1, TableProfile(2, {}))
    assert journal.created_times("demo.people") == {("demo.people", "b1"): AT}


def assert_schema_is_the_model(url: str) -> None:
    """The migrated database and the Table models of their owners agree (no missing migration, no model
    missing for a table the migrations make)."""
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            ctx = MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE})
            diff = [
                d
                for d in compare_metadata(ctx, metadata)
                if not (isinstance(d, tuple) and d[0] == "remove_table" and not d[1].name.startswith("wap_"))
            ]
            assert diff == []
            assert current_revision(conn) == HEAD
            assert conn.execute(text(f"select count(*) from {VERSION_TABLE}")).scalar_one() == 1
    finally:
        engine.dispose()


def use_new_schema(journal: Journal) -> None:
    i = journal.begin_intent(
        user="cy", action="discard", table="demo.people", branch="b9", expected_before=BIG, reason="r"
    )
    entry = journal.resolve_intent(i, outcome="discarded", done=True)
    journal.release(i)
    assert entry is not None and journal.history("demo.people")[0].intent_id == i.id


def test_head_constant_is_the_newest_script() -> None:
    assert script_head() == HEAD


def test_a_lakehouse_with_the_pre_migration_schema_is_upgraded_without_losing_a_row(tmp_path: Path) -> None:
    home = tmp_path / "lh"
    home.mkdir()
    url = f"sqlite:///{home / 'catalog.db'}"
    make_v1(url)
    lh = Lakehouse(Settings(home=home, user="tester", catalog_name="migr"))  # the real entry point, no Spark
    assert_v1_rows_intact(lh.journal)
    assert_schema_is_the_model(url)
    use_new_schema(lh.journal)
    assert len(lh.journal.history("demo.people")) == 3
    Journal(create_engine(url))  # current: a no-op
    assert_schema_is_the_model(url)


def test_a_new_database_gets_every_table_at_head(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'new.db'}"
    journal = Journal(create_engine(url))
    assert set(metadata.tables) <= set(inspect(journal.engine).get_table_names())
    assert_schema_is_the_model(url)
    use_new_schema(journal)


_STARTER = "import sys; from sqlalchemy import create_engine; from wap_core.store.journal import Journal; Journal(create_engine(sys.argv[1]))"


@pytest.mark.parametrize("v1", [True, False], ids=["v1-lakehouse", "new-lakehouse"])
def test_processes_starting_at_once_migrate_exactly_once(tmp_path: Path, v1: bool) -> None:
    url = f"sqlite:///{tmp_path / 'c.db'}"
    if v1:
        make_v1(url)
    procs = [
        subprocess.Popen([sys.executable, "-c", _STARTER, url], cwd=ROOT, stderr=subprocess.PIPE, text=True)
        for _ in range(4)
    ]
    errors = [p.communicate(timeout=300)[1] for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, errors
    assert_schema_is_the_model(url)
    if v1:
        assert_v1_rows_intact(Journal(create_engine(url)))


def _pg_database(postgres: str, name: str) -> str:
    admin = create_engine(postgres, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f"DROP DATABASE IF EXISTS {name}"))
        conn.execute(text(f"CREATE DATABASE {name}"))
    admin.dispose()
    return postgres.rsplit("/", 1)[0] + f"/{name}"


@pytest.mark.postgres
def test_the_upgrade_on_a_real_postgresql_keeps_every_row_and_serializes_upgraders(postgres: str) -> None:
    url = _pg_database(postgres, "mig_v1")
    make_v1(url)
    errors: list[BaseException] = []
    barrier = threading.Barrier(3)

    def start() -> None:
        barrier.wait()
        try:
            Journal(create_engine(url))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=start) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    journal = Journal(create_engine(url))
    assert_v1_rows_intact(journal)
    assert_schema_is_the_model(url)
    use_new_schema(journal)
    with journal.engine.connect() as conn:
        cols: dict[str, Any] = {c["name"]: c for c in inspect(conn).get_columns("wap_journal")}
    assert isinstance(cols["reconciled"]["type"], sa.Boolean) and cols["intent_id"]["nullable"]
    fresh = _pg_database(postgres, "mig_new")
    Journal(create_engine(fresh))
    assert_schema_is_the_model(fresh)
