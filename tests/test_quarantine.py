"""Quarantine (issue 29): repair a failed batch on real Spark + Iceberg.

One module-scoped lakehouse: ``shop.orders`` (id, name, qty) whose main ALSO holds rows failing the checks
(a NULL name, a negative qty), under an access file (sam is steward, vic a viewer). Proved here: the books
balance per check and in total (a row failing two checks is kept once, listing both); only the batch's rows
leave (main's data files are still referenced by the new head, no delete file exists, main's own failing rows
are still on the branch); the quarantine table's contents; the batch then publishes both tables together;
the refusals; kill -9 at the fault points, then reconcile (never deleted without being kept, never kept twice).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from helpers import SAM, cli_as, cli_process, lake_env, lake_settings, refs, write_csv

from wap_core import Lakehouse, TableId
from wap_core.exceptions import AccessDeniedError, RefusedError
from wap_core.faults import FAULT_EXIT_CODE
from wap_core.lake import catalog as cat
from wap_core.session import session_of
from wap_core.states import Action, CheckStatus, Outcome
from wap_core.workflow.audit import latest_audit
from wap_core.workflow.batch import load_batch
from wap_core.workflow.ingest import ingest
from wap_core.workflow.publish import publish, publish_batch
from wap_core.workflow.quarantine import quarantine, quarantine_table_id
from wap_core.workflow.reconcile import reconcile
from wap_core.workflow.review import authors_of

ORD, ITM = TableId("shop", "orders"), TableId("shop", "items")
QORD = quarantine_table_id(ORD)
HEADER = ("id", "name", "qty")
VIC = "vic@corp.test"
CHECKS = """\
shop.orders:
  checks:
    - not_null: [name]
    - range: {column: qty, min: 0}
    - unique: [id]
    - row_count: {min: 1}
shop.items:
  checks:
    - not_null: [name]
"""
ACCESS = f"""\
roles:
  viewer: ["*", {VIC}]
  steward: [{SAM}]
  admin: [root]
policies:
  "*": {{approvals: 0}}
"""
# main: a NULL name and a negative qty (main's own failing rows, which must stay)
MAIN_ROWS = [(1, "ann", 5), (2, None, 3), (3, "cy", -1)]
# the batch: 11 NULL name, 12 negative qty, 13 both, the second 14 a duplicate, 1 already in main
BATCH = [
    (10, "a", 1),
    (11, None, 2),
    (12, "b", -5),
    (13, None, -1),
    (14, "c", 1),
    (14, "d", 2),
    (1, "e", 1),
    (15, "f", 3),
]


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory, spark_session: None) -> Lakehouse:
    home = tmp_path_factory.mktemp("quarantine")
    settings = lake_settings(
        home, "quarantine", "{}\n", access_path=home / "access.yml", ingest_roots=(home,)
    )
    lh = Lakehouse(settings)
    for t in (ORD, ITM):  # main seeded before the checks exist (its failing rows are main's own)
        ingest(
            lh,
            t,
            [write_csv(home / "src" / f"{t.name}0.csv", HEADER, MAIN_ROWS)],
            create=True,
            branch="first",
        )
        publish(lh, t, "first")
    settings.checks_file.write_text(CHECKS)
    settings.access_file.write_text(ACCESS)
    return lh


def src(lh: Lakehouse, name: str, rows: list[tuple[object, ...]]) -> str:
    return write_csv(Path(lh.settings.home) / "src" / f"{name}.csv", HEADER, rows)


def failed_branch(
    lh: Lakehouse, branch: str, rows: list[tuple[object, ...]] = BATCH, table: TableId = ORD
) -> int:
    r = ingest(lh, table, [src(lh, f"{table.name}-{branch}", rows)], branch=branch, user=SAM)
    assert r.audit is not None and r.audit.status is CheckStatus.FAILED, r.audit
    return refs(lh, table)[branch]


def count(lh: Lakehouse, table: TableId, branch: str, where: str = "true") -> int:
    return int(lh.spark.sql(f"SELECT count(*) FROM {lh.sql_name(table, branch)} WHERE {where}").first()[0])


def data_files(lh: Lakehouse, table: TableId, snapshot_id: int) -> tuple[set[str], int]:
    """The data files of a snapshot (read from its manifests) and how many delete files it references."""
    files = lh.table(table).inspect.files(snapshot_id=snapshot_id).to_pylist()
    return {f["file_path"] for f in files if f["content"] == 0}, sum(1 for f in files if f["content"] != 0)


def test_the_books_balance_and_mains_rows_stay(lake: Lakehouse) -> None:
    head = failed_branch(lake, "w1")
    fork = refs(lake, ORD)["main"]
    before_batch = count(lake, ORD, "w1") - count(lake, ORD, "main")
    r = quarantine(lake, ORD, "w1", reason="bad rows from the vendor", user=SAM)
    # the books: 11, 12, 13 (both checks), the second 14, and 1 (already in main)
    assert r.checks == {"not_null(name)": 2, "range(qty)": 2, "unique(id)": 2}, r.checks
    assert (r.quarantined, r.rows_before, r.rows_after) == (5, 8, 3) == (5, before_batch, before_batch - 5)
    assert r.old_head == head and r.new_head == refs(lake, ORD)["w1"] != head
    assert count(lake, ORD, "w1") == len(MAIN_ROWS) + 3
    # main's rows are untouched: its data files are all still referenced, no delete file anywhere
    main_files, _ = data_files(lake, ORD, fork)
    new_files, deletes = data_files(lake, ORD, r.new_head)
    assert main_files <= new_files and deletes == 0
    assert count(lake, ORD, "w1", "name IS NULL") == 1 == count(lake, ORD, "main", "name IS NULL")
    assert count(lake, ORD, "w1", "qty < 0") == 1 == count(lake, ORD, "main", "qty < 0")
    assert (
        count(lake, ORD, "w1", "id = 14") == 1 and count(lake, ORD, "w1", "name = 'c'") == 1
    )  # the first 14
    # the quarantine table: the rows, why, who
    kept = {
        (row["id"], row["name"]): row
        for row in lake.spark.sql(f"SELECT * FROM {lake.sql_name(QORD, 'w1')}").collect()
    }
    assert set(kept) == {(11, None), (12, "b"), (13, None), (14, "d"), (1, "e")}
    assert kept[(13, None)]["_wap_checks"] == ["not_null(name)", "range(qty)"]
    assert kept[(1, "e")]["_wap_checks"] == ["unique(id)"]
    row = kept[(12, "b")]
    assert (row["_wap_batch"], row["_wap_reason"], row["_wap_user"]) == (
        "w1",
        "bad rows from the vendor",
        SAM,
    )
    assert row["_wap_quarantined_at"] is not None and row["qty"] == -5
    # re-audited at once: the branch passes now; the journal holds the action with its counts
    assert r.audit is not None and r.audit.status is CheckStatus.PASSED and r.audit.snapshot_id == r.new_head
    audit = latest_audit(lake, ORD, "w1")
    assert audit is not None and audit.snapshot_id == r.new_head
    done = lake.journal.history(str(ORD), branch="w1", action=Action.QUARANTINE)
    assert done[0].outcome == Outcome.QUARANTINED and done[0].details["quarantined"] == 5
    # the quarantine table joined the batch
    assert load_batch(lake, "w1").table_ids == (ORD, QORD)


def test_the_batch_publishes_both_tables_together(lake: Lakehouse) -> None:
    main_before = count(lake, ORD, "main")
    res = publish_batch(session_of(lake, "root"), "w1")
    assert {t.table for t in res.tables} == {str(ORD), str(QORD)}
    assert count(lake, ORD, "main") == main_before + 3
    assert count(lake, QORD, "main") == 5
    assert "w1" not in refs(lake, ORD) and "w1" not in refs(lake, QORD)


def test_cli_quarantine_json(lake: Lakehouse) -> None:
    failed_branch(lake, "w3", [(20, None, 1), (21, "ok", 1)])
    code, out, err = cli_as(
        lake, "root", "quarantine", str(ORD), "w3", "--check", "not_null(name)", "--reason", "nulls", "--json"
    )
    assert code == 0, err
    got = json.loads(out)
    assert (got["quarantined"], got["checks"], got["rows_after"]) == (1, {"not_null(name)": 1}, 1)
    assert got["quarantine_table"] == str(QORD) and got["audit"]["status"] == "passed"
    assert authors_of(lake, ORD, "w3") == (SAM, "root")  # who repaired the batch is one of its authors


@pytest.fixture(scope="module")
def refused_branch(lake: Lakehouse) -> str:
    failed_branch(lake, "r1", [(30, None, 1), (31, "x", 1)])
    return "r1"


@pytest.mark.parametrize(
    ("user", "branch", "checks", "error", "message"),
    [
        (SAM, "main", (), RefusedError, "only an audit branch"),
        (SAM, "r1", ("no_such_check",), RefusedError, "has no check named 'no_such_check'"),
        (SAM, "r1", ("row_count",), RefusedError, "cannot be repaired by removing rows"),
        (VIC, "r1", (), AccessDeniedError, "may not quarantine"),
    ],
    ids=["main", "unknown-check", "aggregate-check", "viewer"],
)
def test_refusals(
    lake: Lakehouse,
    refused_branch: str,
    user: str,
    branch: str,
    checks: tuple[str, ...],
    error: type[Exception],
    message: str,
) -> None:
    before = refs(lake, ORD)
    with pytest.raises(error, match=message):
        quarantine(lake, ORD, branch, checks=checks, reason="why", user=user)
    assert refs(lake, ORD) == before
    last = lake.journal.history(str(ORD), action=Action.QUARANTINE)[0]
    assert last.outcome == Outcome.REFUSED and last.branch == branch


def test_refusals_of_a_passed_and_a_moved_branch(lake: Lakehouse, refused_branch: str) -> None:
    ok = ingest(lake, ORD, [src(lake, "passed", [(40, "ok", 1)])], branch="p1", user=SAM)
    assert ok.audit is not None and ok.audit.passed
    with pytest.raises(RefusedError, match="nothing to quarantine"):
        quarantine(lake, ORD, "p1", reason="why", user=SAM)
    # the branch moves after its audit (a commit nobody audited)
    lake.spark.sql(f"INSERT INTO {lake.sql_name(ORD, 'r1')} VALUES (32, 'late', 1)")
    with pytest.raises(RefusedError, match="moved since its audit"):
        quarantine(lake, ORD, "r1", reason="why", user=SAM)
    code, _, err = cli_as(lake, SAM, "quarantine", str(ORD), "r1", "--reason", "why")
    assert code == 1 and "moved since its audit" in err and len(err.strip().splitlines()) == 1


def test_a_blank_reason_is_bad_input(lake: Lakehouse, refused_branch: str) -> None:
    before = refs(lake, ORD)
    code, _, err = cli_as(lake, SAM, "quarantine", str(ORD), refused_branch, "--reason", "  ")
    assert code == 2 and "needs a reason" in err and refs(lake, ORD) == before


def test_refused_when_the_quarantine_table_does_not_fit(lake: Lakehouse) -> None:
    qitm = quarantine_table_id(ITM)
    lake.spark.sql(f"CREATE TABLE {lake.sql_name(qitm)} (id BIGINT, name INT, note STRING) USING iceberg")
    failed_branch(lake, "s1", [(50, None, 1)], table=ITM)
    with pytest.raises(
        RefusedError, match=r"incompatible schema: .*qty \(missing\).*name \(int, not string\)"
    ):
        quarantine(lake, ITM, "s1", reason="why", user=SAM)
    assert count(lake, qitm, "main") == 0 and "s1" not in refs(lake, qitm)


def _killed(lh: Lakehouse, point: str, *args: str) -> None:
    env = {
        **os.environ,
        **lake_env(lh.settings, SAM, access=True, roots=True, WAP_SPARK_DRIVER_MEMORY="1g"),
        "WAP_FAULT": point,
        "PYSPARK_PYTHON": sys.executable,
    }
    p = cli_process(env, *args, timeout=600)
    assert p.returncode == FAULT_EXIT_CODE, (
        f"exit {p.returncode}, expected a kill at {point}\n{p.stderr[-3000:]}"
    )


KILL_POINTS = [
    "after_quarantine_intent",
    "after_quarantine_keep",
    "after_quarantine_write",
    "after_quarantine_commit",
]


@pytest.mark.parametrize("point", KILL_POINTS)
def test_kill_at_each_point_then_reconcile(lake: Lakehouse, point: str) -> None:
    branch = f"k{KILL_POINTS.index(point)}"
    head = failed_branch(lake, branch, [(60, None, 1), (61, "ok", 1), (62, None, 2)])
    _killed(lake, point, "quarantine", str(ORD), branch, "--reason", "killed")
    reconcile(lake, ORD)
    entry = lake.journal.history(str(ORD), branch=branch, action=Action.QUARANTINE)[0]
    kept = cat.table_exists(
        lake.catalog, QORD
    )  # killed at the intent: the quarantine table may not exist yet
    qrows = count(lake, QORD, branch) if kept and branch in refs(lake, QORD) else 0
    qmain = count(lake, QORD, "main") if kept else 0
    if point == "after_quarantine_commit":  # landed: the rows left the branch and are kept, once
        assert entry.outcome == Outcome.QUARANTINED and entry.reconciled
        assert refs(lake, ORD)[branch] != head and count(lake, ORD, branch, "id >= 60") == 1
        assert qrows - qmain == 2
        return
    # not landed: nothing deleted, nothing kept (the kept rows were taken back)
    assert entry.outcome == Outcome.ABANDONED
    assert refs(lake, ORD)[branch] == head and count(lake, ORD, branch, "id >= 60") == 3
    assert qrows - qmain in (0, -qmain)  # no branch, or the branch without our rows
    assert not [n for n in refs(lake, ORD) if n.startswith(branch) and n != branch]  # no temp branch left
    # a retry keeps them exactly once
    r = quarantine(lake, ORD, branch, reason="again", user=SAM)
    assert r.quarantined == 2 and count(lake, QORD, branch, "id >= 60") == 2


def test_the_default_takes_only_the_failed_fail_level_checks_of_a_failed_audit(lake: Lakehouse) -> None:
    """Issue 39 item 3: a check passed within its max_failing_rows and a warn-level check are never taken by
    default (only when named); a passed (or warned) audit is refused; malformed_rows is refused saying why."""
    notes = TableId("shop", "notes")
    checks = lake.settings.checks_file
    old = checks.read_text()
    checks.write_text(
        old
        + "shop.notes:\n  checks:\n    - not_null: [name]\n    - range: {column: qty, min: 0, level: warn}\n"
        "    - unique: {columns: [id], max_failing_rows: 5}\n"
    )
    try:
        ingest(lake, notes, [src(lake, "notes0", [(1, "a", 1)])], create=True, branch="first", user="root")
        publish(lake, notes, "first", user="root")
        failed_branch(lake, "d1", [(2, None, 1), (3, "b", -1), (3, "c", 1), (4, "d", 2)], table=notes)
        q = quarantine(lake, notes, "d1", reason="default choice", user=SAM)
        assert (q.checks, q.quarantined, q.rows_after) == (
            {"not_null(name)": 1},
            1,
            3,
        )  # not range, not unique
        assert q.audit is not None and q.audit.status is CheckStatus.WARNED
        with pytest.raises(RefusedError, match="its audit warned: nothing to quarantine"):
            quarantine(lake, notes, "d1", reason="again", user=SAM)
        with pytest.raises(RefusedError, match="never became rows of the batch"):
            quarantine(lake, notes, "d1", checks=["malformed_rows"], reason="lines", user=SAM)
        named = quarantine(lake, notes, "d1", checks=["range(qty)"], reason="the warning too", user=SAM)
        assert (named.checks, named.quarantined) == ({"range(qty)": 1}, 1)
    finally:
        checks.write_text(old)
