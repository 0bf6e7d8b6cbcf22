"""A user's own Spark job writes the branch: MERGE, UPDATE, DELETE, INSERT OVERWRITE and appends, audited on
what main becomes (issue 37), with real Spark on real Iceberg tables.

The table ``t.sales(id, region, amount)`` holds 40 rows on main; checks ``not_null(amount)``,
``unique(id)``, ``range(amount 0..1000)``. Each test's branch is made and written the way a user's job
does it: ``ALTER TABLE ... CREATE BRANCH`` and plain Spark SQL on ``t.branch_<name>``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from wap_core import Lakehouse, TableId
from wap_core.lake import catalog as cat
from wap_core.lake.batch import batch_frame, removed_frame
from wap_core.states import BatchRead
from wap_core.workflow.audit import AuditResult, run_audit

SALES = TableId("t", "sales")
PARTS = TableId("t", "parts")
MOR = TableId("t", "mor")
SUITE = """\
t.sales:
  checks:
    - not_null: [amount]
    - unique: [id]
    - range: {column: amount, min: 0, max: 1000}
t.parts:
  checks:
    - not_null: [amount]
    - unique: [id]
    - range: {column: amount, min: 0, max: 1000}
    - removed_rows: {max_pct: 5}
    - changed_rows: {max: 1000}
t.mor:
  checks:
    - unique: [id]
"""


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory, spark_session: None, backend) -> Lakehouse:  # type: ignore[no-untyped-def]
    d: Path = tmp_path_factory.mktemp("upserts")
    lh = Lakehouse(backend.settings(d / "lh", SUITE))
    spark = lh.spark
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS `{lh.settings.catalog_name}`.`t`")
    spark.sql(f"CREATE TABLE {lh.sql_name(SALES)} (id int, region string, amount double) USING iceberg")
    spark.sql(
        f"INSERT INTO {lh.sql_name(SALES)} "
        "SELECT CAST(id AS int), IF(id % 2 = 0, 'EU', 'US'), id * 10.0 FROM range(1, 41) AS r(id)"
    )
    spark.sql(
        f"CREATE TABLE {lh.sql_name(PARTS)} (id int, region string, amount double) USING iceberg "
        "PARTITIONED BY (region)"
    )
    spark.sql(
        f"INSERT INTO {lh.sql_name(PARTS)} "
        "SELECT CAST(id AS int), IF(id % 2 = 0, 'EU', 'US'), id * 10.0 FROM range(1, 41) AS r(id)"
    )
    spark.sql(
        f"CREATE TABLE {lh.sql_name(MOR)} (id int, region string, amount double) USING iceberg "
        "TBLPROPERTIES ('format-version'='2', 'write.merge.mode'='merge-on-read', "
        "'write.delete.mode'='merge-on-read', 'write.update.mode'='merge-on-read')"
    )
    spark.sql(f"INSERT INTO {lh.sql_name(MOR)} SELECT CAST(id AS int), 'EU', 1.0 FROM range(1, 41) AS r(id)")
    return lh


def _branch(lh: Lakehouse, table: TableId, branch: str, *statements: str) -> AuditResult:
    """The user's job: create the branch, run its statements on ``{b}`` (the branch's SQL name), audit it."""
    lh.spark.sql(f"ALTER TABLE {lh.sql_name(table)} CREATE BRANCH `{branch}`")
    for sql in statements:
        lh.spark.sql(sql.format(b=lh.sql_name(table, branch)))
    return run_audit(lh, table, branch, user="job")


def _check(a: AuditResult, name: str):  # type: ignore[no-untyped-def]
    return next(c for c in a.checks if c.name == name)


def test_a_clean_merge_upsert_passes_unique_and_is_counted(lake: Lakehouse) -> None:
    a = _branch(
        lake,
        SALES,
        "upsert",
        "MERGE INTO {b} t USING (SELECT 5 AS id, 'EU' AS region, 999.0 AS amount "
        "UNION ALL SELECT 41, 'US', 1.0) s ON t.id = s.id "
        "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *",
    )
    assert a.status == "passed", [(c.name, c.message) for c in a.checks]
    assert _check(a, "unique(id)").observed["rows_already_in_main"] == 0
    assert a.rows_checked == 2  # the inserted row and the updated row's new version, not the 40 rows
    assert a.changes is not None
    assert (a.changes.method, a.changes.inserted, a.changes.updated, a.changes.deleted) == (
        BatchRead.CHANGELOG,
        1,
        1,
        0,
    )
    assert a.changes.main_rows == 40 and a.changes.key == ("id",)
    # the JSON form carries the changes and reads back
    from wap_core.values import to_jsonable

    j = to_jsonable(a)
    assert j["changes"]["method"] == "changelog" and j["changes"]["updated"] == 1
    assert AuditResult.from_dict(j).changes == a.changes


def test_a_bad_value_written_by_an_update_fails_its_row_check(lake: Lakehouse) -> None:
    a = _branch(lake, SALES, "bad_update", "UPDATE {b} SET amount = 5000.0 WHERE id = 3")
    assert a.status == "failed"
    r = _check(a, "range(amount)")
    assert r.failing_rows == 1 and r.sample[0]["id"] == 3
    assert _check(a, "unique(id)").status == "passed"
    assert a.changes is not None and (a.changes.updated, a.changes.inserted, a.changes.deleted) == (1, 0, 0)


def test_a_duplicate_created_by_an_upsert_fails_unique_naming_the_key(lake: Lakehouse) -> None:
    a = _branch(
        lake,
        SALES,
        "dup",
        "UPDATE {b} SET amount = 1.0 WHERE id = 9",
        "INSERT INTO {b} VALUES (6, 'EU', 2.0)",  # id 6 stays on main: a second row with it
    )
    u = _check(a, "unique(id)")
    assert u.status == "failed" and u.observed["rows_already_in_main"] == 1
    assert "id=6" in u.message and [s["id"] for s in u.sample] == [6]


def test_a_half_table_delete_is_counted_and_passes_without_a_limit(lake: Lakehouse) -> None:
    a = _branch(lake, SALES, "half", "DELETE FROM {b} WHERE id <= 20")
    assert a.status == "passed"
    assert a.rows_checked == 0
    assert a.changes is not None and (a.changes.deleted, a.changes.inserted, a.changes.updated) == (20, 0, 0)
    assert a.changes.pct(a.changes.deleted) == 50.0
    tbl = lake.table(SALES)
    lin = cat.lineage(tbl, "half")
    assert removed_frame(lake.spark, lake.spark_name(SALES), lin).count() == 20
    assert batch_frame(lake.spark, lake.spark_name(SALES), lin).count() == 0


def test_every_kind_of_write_in_one_branch_with_change_limits(lake: Lakehouse) -> None:
    a = _branch(
        lake,
        PARTS,
        "mixed",
        "MERGE INTO {b} t USING (SELECT 2 AS id, 'EU' AS region, 7.0 AS amount) s ON t.id = s.id "
        "WHEN MATCHED THEN UPDATE SET *",
        "UPDATE {b} SET amount = amount + 1 WHERE id = 4",
        "INSERT INTO {b} VALUES (100, 'EU', 3.0)",
        "DELETE FROM {b} WHERE id = 1",
        # static partition overwrite: region US replaced by two rows (ids 1..39 odd go, 201 and 203 come)
        "INSERT OVERWRITE {b} PARTITION (region = 'US') SELECT 201, 7.0 UNION ALL SELECT 203, 8.0",
    )
    assert a.changes is not None and a.changes.method is BatchRead.CHANGELOG
    # main keeps the 20 EU rows (2 and 4 updated), gains 100 and the two new US rows; the 20 US rows go
    assert (a.changes.inserted, a.changes.updated, a.changes.deleted) == (3, 2, 20)
    assert a.rows_checked == 5
    removed = _check(a, "removed_rows")
    assert removed.status == "failed" and removed.failing_rows == 20
    assert removed.observed == {"rows": 20, "pct_of_main": 50.0}
    assert _check(a, "changed_rows").status == "passed"
    assert _check(a, "unique(id)").status == "passed"
    # dynamic partition overwrite: the EU partition replaced by the query's rows (ids kept, amounts new)
    lake.spark.conf.set("spark.sql.sources.partitionOverwriteMode", "dynamic")
    try:
        lake.spark.sql(
            f"INSERT OVERWRITE {lake.sql_name(PARTS, 'mixed')} "
            f"SELECT id, region, amount FROM {lake.sql_name(PARTS, 'mixed')} WHERE region = 'EU' AND id <> 100"
        )
    finally:
        lake.spark.conf.unset("spark.sql.sources.partitionOverwriteMode")
    b = run_audit(lake, PARTS, "mixed", user="job")
    assert b.changes is not None and (b.changes.inserted, b.changes.updated, b.changes.deleted) == (
        2,
        2,
        20,
    )  # 100 is gone again: not on main, so not a deletion


def test_merge_on_read_falls_back_to_a_full_comparison_and_says_so(lake: Lakehouse) -> None:
    a = _branch(
        lake,
        MOR,
        "mor",
        "MERGE INTO {b} t USING (SELECT 5 AS id, 'EU' AS region, 9.0 AS amount "
        "UNION ALL SELECT 41, 'US', 1.0) s ON t.id = s.id "
        "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *",
    )
    assert a.changes is not None and a.changes.method is BatchRead.FULL_COMPARISON
    assert "delete files" in a.changes.note and "merge-on-read" in a.changes.note
    assert (a.changes.inserted, a.changes.updated, a.changes.deleted) == (1, 1, 0)
    assert a.status == "passed", [(c.name, c.message) for c in a.checks]


def test_an_append_branch_is_read_and_judged_as_before(lake: Lakehouse) -> None:
    a = _branch(lake, SALES, "append", "INSERT INTO {b} VALUES (50, 'EU', 1.0), (1, 'US', 2.0)")
    assert a.changes is not None and a.changes.method is BatchRead.APPEND
    assert (a.changes.inserted, a.changes.updated, a.changes.deleted) == (2, 0, 0)
    u = _check(a, "unique(id)")
    assert u.status == "failed" and u.observed["rows_already_in_main"] == 1 and "id=1" in u.message


def test_a_snapshot_staged_under_spark_wap_id_is_named_when_looked_for_not_taken_as_a_batch(
    lake: Lakehouse,
) -> None:
    from wap_core.exceptions import NotFoundError

    staged = TableId("t", "staged")
    lake.spark.sql(
        f"CREATE TABLE {lake.sql_name(staged)} (id int, region string, amount double) USING iceberg "
        "TBLPROPERTIES ('write.wap.enabled'='true')"
    )
    lake.spark.sql(f"INSERT INTO {lake.sql_name(staged)} VALUES (1, 'EU', 1.0)")
    main0 = cat.ref_snapshot_id(lake.table(staged), "main")
    lake.spark.conf.set("spark.wap.id", "nightly_7")
    try:
        lake.spark.sql(f"INSERT INTO {lake.sql_name(staged)} VALUES (2, 'EU', 2.0)")
    finally:
        lake.spark.conf.unset("spark.wap.id")
    tbl = lake.table(staged)
    assert cat.ref_snapshot_id(tbl, "main") == main0  # staged, not published
    assert list(cat.staged_wap_snapshots(tbl).values()) == ["nightly_7"]
    with pytest.raises(NotFoundError, match=r"staged under spark.wap.id \(nightly_7\) are not batches here"):
        run_audit(lake, staged, "nightly_7", user="job")


def test_the_keyed_diff_of_an_upsert_reads_the_changes_and_shows_before_and_after(lake: Lakehouse) -> None:
    from wap_core.analysis.keyed_diff import keyed_diff, keyed_samples

    d = keyed_diff(lake, SALES, "upsert", ["id"])  # branch of the first test: id 5 updated, id 41 inserted
    assert (d.method, d.keys_added, d.keys_removed, d.rows_changed, d.batch_rows) == ("changes", 1, 0, 1, 2)
    assert d.keys_unchanged == 39 and dict(d.changed_by_column) == {"region": 1, "amount": 1}
    s = keyed_samples(lake, SALES, "upsert", ["id"])
    assert [r["id"] for r in s.added] == [41] and s.removed == ()
    (row,) = s.changed
    assert row.key == {"id": 5}
    assert {(c.column, c.old, c.new) for c in row.cells} == {("region", "US", "EU"), ("amount", 50.0, 999.0)}
    half = keyed_diff(lake, SALES, "half", ["id"])  # DELETE of half the table
    assert (half.keys_removed, half.keys_added, half.rows_changed, half.keys_unchanged) == (20, 0, 0, 20)


def test_every_changed_row_is_reachable_in_full_with_how_it_changed(lake: Lakehouse) -> None:
    # issue 37 item 4: Explore's "(changed rows)" (and its CSV) lists every changed row, not a sample
    from wap_core.analysis.explore import CHANGED_ROWS, failing_rows

    _branch(
        lake,
        SALES,
        "every_change",
        "MERGE INTO {b} t USING (SELECT 6 AS id, 'EU' AS region, 66.0 AS amount "
        "UNION ALL SELECT 42, 'US', 2.0) s ON t.id = s.id "
        "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *",
        "DELETE FROM {b} WHERE id IN (7, 8)",
    )
    got = failing_rows(lake, SALES, "every_change", CHANGED_ROWS, user="job")
    rows = sorted((r["_wap_change"], r["id"]) for r in got.rows.to_dict("records"))
    assert rows == [
        ("delete", 7),
        ("delete", 8),
        ("insert", 42),
        ("update_after", 6),
        ("update_before", 6),
    ], rows
    assert got.rows.columns[0] == "_wap_change" and not got.truncated
    after = got.rows[got.rows["_wap_change"] == "update_after"].iloc[0]
    assert float(after["amount"]) == 66.0
    assert b"_wap_change" in got.csv().splitlines()[0]
