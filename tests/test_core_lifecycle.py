"""The whole lifecycle on real Spark + Iceberg: ingest, refusals, publish, rebase, discard, journal.

Every refusal asserts that main is unchanged, read back with PyIceberg.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
from helpers import in_threads, refs, write_csv

from wap_core import TableId
from wap_core.exceptions import NotFoundError, RefusedError, SchemaMismatchError, SourceError, ValidationError
from wap_core.lake.catalog import lineage
from wap_core.workflow.audit import run_audit
from wap_core.workflow.discard import discard
from wap_core.workflow.ingest import ingest
from wap_core.workflow.publish import publish
from wap_core.workflow.readiness import publish_readiness
from wap_core.workflow.rebase import rebase

T = TableId("demo", "people")
HEADER = ["id", "name", "age"]
SUITE = "demo.people:\n  checks:\n    - not_null: [name]\n    - unique: [id]\n    - range: {column: age, min: 0, max: 150}\n"


@pytest.fixture
def lh(make_lakehouse, tmp_path: Path):  # type: ignore[no-untyped-def]
    """A lakehouse with demo.people published: ids 1..3."""
    lh = make_lakehouse(SUITE)
    r = ingest(
        lh,
        T,
        [write_csv(tmp_path / "seed.csv", HEADER, [(1, "ann", 30), (2, "bob", 40), (3, "cy", 50)])],
        create=True,
    )
    assert r.audit.status == "passed", r.audit.checks
    publish(lh, T, r.branch)
    return lh


def _w(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


def _csv(tmp_path: Path, name: str, rows) -> str:  # type: ignore[no-untyped-def]
    return write_csv(tmp_path / name, HEADER, rows)


def test_ingest_writes_only_to_a_new_branch_with_provenance(lh, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    before = refs(lh, T)
    r = ingest(lh, T, [_csv(tmp_path, "b.csv", [(4, "dee", 20), (5, "eve", 25)])])
    after = refs(lh, T)
    assert after["main"] == before["main"]
    assert r.branch.startswith("audit_") and after[r.branch] == r.snapshot_id
    assert r.rows_written == 2 and r.audit.status == "passed"
    snap = lh.table(T).metadata.snapshot_by_id(r.snapshot_id)
    props = snap.summary.additional_properties
    assert props["wap.source"].endswith("b.csv") and props["wap.user"] == "tester" and props["wap.batch-id"]
    main_rows = lh.spark.table(lh.spark_name(T)).count()
    assert main_rows == 3  # main untouched
    assert lh.spark.table(lh.spark_name(T, r.branch)).count() == 5


def test_publish_fast_forwards_main_to_the_audited_head_and_removes_the_branch(lh, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    r = ingest(lh, T, [_csv(tmp_path, "b.csv", [(4, "dee", 20)])], branch="good")
    files_before = {f.file.file_path for f in lh.table(T).scan(snapshot_id=r.snapshot_id).plan_files()}
    p = publish(lh, T, "good")
    assert p.outcome == "published" and p.main_after == r.snapshot_id
    now = refs(lh, T)
    assert now["main"] == r.snapshot_id and "good" not in now
    files_after = {f.file.file_path for f in lh.table(T).scan().plan_files()}
    assert files_after == files_before  # a pointer move: no data file written
    assert lh.spark.table(lh.spark_name(T)).count() == 4
    again = publish(lh, T, "good")  # publishing a published branch is a no-op success
    assert again.outcome == "already_published" and refs(lh, T)["main"] == r.snapshot_id
    entry = lh.journal.history("demo.people", action="publish")[0]
    assert (entry.user, entry.outcome, entry.snapshot_after) == ("tester", "published", r.snapshot_id)


def test_publish_refuses_a_failed_audit_and_force_needs_a_reason(lh, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    r = ingest(lh, T, [_csv(tmp_path, "bad.csv", [(4, None, 200)])], branch="bad")
    assert r.audit.status == "failed"
    main = refs(lh, T)["main"]
    with pytest.raises(RefusedError, match="latest audit failed: not_null\\(name\\), range\\(age\\)"):
        publish(lh, T, "bad")
    with pytest.raises(ValidationError, match="--reason"):
        publish(lh, T, "bad", force=True)
    assert refs(lh, T)["main"] == main and "bad" in refs(lh, T)
    refusal = lh.journal.history("demo.people", action="publish")[0]
    assert refusal.outcome == "refused" and "audit failed" in (refusal.reason or "")
    forced = publish(lh, T, "bad", force=True, reason="owner accepts the outlier")
    assert forced.forced and refs(lh, T)["main"] == r.snapshot_id
    entry = lh.journal.history("demo.people", action="publish")[0]
    assert entry.outcome == "forced" and entry.reason == "owner accepts the outlier"


def test_publish_refuses_missing_audit_and_a_branch_written_after_its_audit(lh, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    lh.spark.sql(f"ALTER TABLE {lh.sql_name(T)} CREATE BRANCH manual")
    main = refs(lh, T)["main"]
    with pytest.raises(RefusedError, match="nothing to publish"):
        publish(lh, T, "manual")
    lh.spark.sql(f"INSERT INTO {lh.sql_name(T, 'manual')} VALUES (7, 'gus', 22)")
    with pytest.raises(RefusedError, match="not been audited") as info:
        publish(lh, T, "manual")
    assert info.value.reason_code == "not_audited"
    r = ingest(lh, T, [_csv(tmp_path, "b.csv", [(4, "dee", 20)])], branch="moving")
    assert r.audit.status == "passed"
    # someone writes a bad row to the branch after the audit passed
    lh.spark.sql(f"INSERT INTO {lh.sql_name(T, 'moving')} VALUES (5, NULL, 999)")
    with pytest.raises(RefusedError, match="moved since its last audit") as info:
        publish(lh, T, "moving")
    assert info.value.reason_code == "stale"
    assert refs(lh, T)["main"] == main
    assert publish_readiness(lh, T, "moving").code == "stale"
    assert run_audit(lh, T, "moving").status == "failed"  # re-audit sees the late row


def test_typo_d_refs_and_unknown_tables_are_clear_errors(lh) -> None:  # type: ignore[no-untyped-def]
    main = refs(lh, T)["main"]
    with pytest.raises(NotFoundError, match="branch 'mian' does not exist"):
        publish(lh, T, "mian")
    with pytest.raises(NotFoundError, match=r"table demo\.nope does not exist"):
        publish(lh, TableId("demo", "nope"), "b")
    with pytest.raises(ValidationError):
        publish(lh, T, "x; DROP TABLE y")
    with pytest.raises(ValidationError):
        publish(lh, T, "main")
    assert refs(lh, T) == {"main": main}  # fast_forward would have created 'mian'


def test_main_moved_refuses_publish_then_rebase_replays_and_needs_a_new_audit(lh, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    a = ingest(lh, T, [_csv(tmp_path, "a.csv", [(10, "amy", 20)])], branch="a")
    b = ingest(lh, T, [_csv(tmp_path, "b.csv", [(20, "ben", 30), (21, "bea", 31)])], branch="b")
    publish(lh, T, "a")
    main_after_a = refs(lh, T)["main"]
    with pytest.raises(RefusedError, match="main moved since this branch forked") as info:
        publish(lh, T, "b")
    assert info.value.reason_code == "main_moved"
    with pytest.raises(RefusedError):
        publish(lh, T, "b", force=True, reason="cannot force a non-fast-forward")
    assert refs(lh, T)["main"] == main_after_a
    rb = rebase(lh, T, "b")
    assert rb.outcome == "rebased" and rb.new_fork == main_after_a and rb.rows == 2
    lin = lineage(lh.table(T), "b")
    assert lin.fork == main_after_a and not lin.main_moved
    assert {r.id for r in lh.spark.table(lh.spark_name(T, "b")).select("id").collect()} == {
        1,
        2,
        3,
        10,
        20,
        21,
    }
    assert refs(lh, T)["main"] == main_after_a  # rebase never touches main
    assert not [n for n in refs(lh, T) if "rebase" in n]  # temp branch cleaned up
    # the new audit is the rebase's own (as ingest audits its batch): on the new head, recorded
    assert rb.audit is not None and (rb.audit.snapshot_id, rb.audit.status) == (rb.new_head, "passed")
    assert publish(lh, T, "b").outcome == "published"
    assert lh.spark.table(lh.spark_name(T)).count() == 6
    assert b.audit.status == "passed" and a.audit.status == "passed"


def test_concurrent_publish_of_one_branch_moves_main_exactly_once(lh, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    r = ingest(lh, T, [_csv(tmp_path, "b.csv", [(4, "dee", 20)])], branch="race")
    results: list[object] = []
    barrier = threading.Barrier(2)

    def go() -> None:
        barrier.wait()
        try:
            results.append(publish(lh, T, "race"))
        except Exception as exc:
            results.append(exc)

    in_threads(go, [(), ()])
    moved = [x for x in results if getattr(x, "moved_main", False)]
    assert len(moved) == 1, results
    others = [x for x in results if x is not moved[0]]
    assert all(
        getattr(x, "outcome", None) == "already_published" or isinstance(x, RefusedError) for x in others
    ), others
    assert refs(lh, T) == {"main": r.snapshot_id}
    assert lh.spark.table(lh.spark_name(T)).count() == 4
    published = [e for e in lh.journal.history("demo.people", action="publish") if e.outcome == "published"]
    assert (
        next(e.branch for e in published) == "race" and len(published) == 2
    )  # the race journaled once, after the seed


def test_a_commit_to_main_between_check_and_publish_is_a_conflict_not_a_lost_write(
    lh, tmp_path: Path, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    import wap_core.workflow.publish as pub

    ingest(lh, T, [_csv(tmp_path, "b.csv", [(4, "dee", 20)])], branch="late")
    real = pub.publish_readiness

    def readiness_then_someone_commits(*args, **kwargs):  # type: ignore[no-untyped-def]
        ready = real(*args, **kwargs)
        lh.spark.sql(f"INSERT INTO {lh.sql_name(T)} VALUES (99, 'zed', 60)")  # a real concurrent writer
        return ready

    monkeypatch.setattr(pub, "publish_readiness", readiness_then_someone_commits)
    with pytest.raises(RefusedError) as info:
        publish(lh, T, "late")
    assert info.value.reason_code == "conflict"
    ids = {r.id for r in lh.spark.table(lh.spark_name(T)).select("id").collect()}
    assert ids == {1, 2, 3, 99}  # the concurrent write survived; the branch was not published
    assert "late" in refs(lh, T)


def test_discard_drops_the_branch_and_keeps_main(lh, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    ingest(lh, T, [_csv(tmp_path, "b.csv", [(4, None, 20)])], branch="junk")
    main = refs(lh, T)["main"]
    d = discard(lh, T, "junk", reason="null names")
    assert d.reason == "null names"
    assert refs(lh, T) == {"main": main}
    e = lh.journal.history("demo.people", action="discard")[0]
    assert (e.branch, e.outcome, e.reason, e.user) == ("junk", "discarded", "null names", "tester")
    with pytest.raises(NotFoundError):
        discard(lh, T, "junk")


def test_schema_mismatch_lists_every_problem_and_writes_nothing(lh, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    before = refs(lh, T)
    src = write_csv(tmp_path / "wrong.csv", ["id", "fullname", "age", "extra"], [(4, "dee", 20, 1)])
    with pytest.raises(SchemaMismatchError) as info:
        ingest(lh, T, [src])
    assert "missing column name" in str(info.value) and "unexpected column fullname" in str(info.value)
    assert "unexpected column extra" in str(info.value)
    assert "\n" not in str(info.value)  # one line (issue 39 item 5)
    with pytest.raises(SchemaMismatchError, match="column age: no value casts to int"):
        ingest(lh, T, [write_csv(tmp_path / "types.csv", HEADER, [(4, "dee", "old"), (5, "eve", "young")])])
    assert refs(lh, T) == before
    assert [f.name for f in lh.table(T).schema().fields] == HEADER  # schema never evolved


def test_malformed_csv_rows_are_counted_located_and_fail_the_audit(lh, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    p = tmp_path / "ragged.csv"
    p.write_text("id,name,age\n4,dee,20\n5,eve\n6,fay,x7\n7,gus,22,extra\n8,hal,23\n")
    main = refs(lh, T)["main"]
    r = ingest(lh, T, [str(p)], branch="ragged")
    assert r.malformed_rows == 3 and r.rows_written == 2
    assert r.audit.status == "failed"
    check = next(c for c in r.audit.checks if c.name == "malformed_rows")
    assert check.status == "failed" and check.failing_rows == 3
    assert sorted(s["__line"] for s in check.sample) == [3, 4, 5]
    assert refs(lh, T)["main"] == main
    ids = {row.id for row in lh.spark.table(lh.spark_name(T, "ragged")).select("id").collect()}
    assert ids == {1, 2, 3, 4, 8}  # never NULL-filled: bad rows are kept out of the branch
    assert run_audit(lh, T, "ragged").status == "failed"  # re-audit still knows
    with pytest.raises(RefusedError):
        publish(lh, T, "ragged")


@pytest.mark.parametrize(
    ("setup", "error", "fragment"),
    [
        (lambda d: str(d / "missing.csv"), SourceError, "does not exist"),
        (lambda d: _w(d / "empty.csv", ""), SourceError, "is empty"),
        (lambda d: _w(d / "header.csv", "id,name,age\n"), SourceError, "no data rows"),
        (lambda d: str(d / "*.nothing"), SourceError, "matches no file"),
        (lambda d: _w(d / "x.txt", "a"), SourceError, "--format"),
        (lambda d: _w(d / "allbad.csv", "id,name,age\n1\n2\n"), SourceError, "none of the 2"),
    ],
)
def test_bad_sources_are_clear_errors_and_leave_no_branch(lh, tmp_path: Path, setup, error, fragment) -> None:  # type: ignore[no-untyped-def]
    before = refs(lh, T)
    with pytest.raises(error, match=fragment):
        ingest(lh, T, [setup(tmp_path)])
    assert refs(lh, T) == before
    assert lh.journal.history("demo.people", action="ingest")[0].outcome == "error"


def test_unknown_table_needs_create_and_create_takes_the_source_schema(
    make_lakehouse, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    lh = make_lakehouse()
    t = TableId("raw", "events")
    src = tmp_path / "e.json"
    src.write_text("\n".join(json.dumps({"id": i, "kind": k}) for i, k in [(1, "a"), (2, "b")]) + "\n")
    with pytest.raises(NotFoundError, match="--create"):
        ingest(lh, t, [str(src)])
    assert not lh.tables()
    r = ingest(lh, t, [str(src)], create=True)
    assert r.created_table and r.rows_written == 2 and r.audit.status == "passed"
    assert "main" not in refs(lh, t) or refs(lh, t)["main"] != r.snapshot_id
    publish(lh, t, r.branch)
    assert lh.spark.table(lh.spark_name(t)).count() == 2
    assert {f.name for f in lh.table(t).schema().fields} == {"id", "kind"}


def test_parquet_and_globs_and_castable_types(lh, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    import pyarrow as pa
    import pyarrow.parquet as pq

    for i, rows in enumerate([[(4, "dee", 20)], [(5, "eve", 21)]]):
        ids, names, ages = zip(*rows, strict=False)
        # age as int64 (table has int): castable, values fit
        pq.write_table(
            pa.table({"id": pa.array(ids, pa.int64()), "name": names, "age": pa.array(ages, pa.int64())}),
            tmp_path / f"p{i}.parquet",
        )
    r = ingest(lh, T, [str(tmp_path / "p*.parquet")], branch="pq")
    assert r.rows_written == 2 and r.audit.status == "passed"
    pq.write_table(pa.table({"id": [6], "name": ["x"], "age": [True]}), tmp_path / "bool.parquet")
    with pytest.raises(SchemaMismatchError, match="column age: source type boolean cannot become int"):
        ingest(lh, T, [str(tmp_path / "bool.parquet")])


def test_branch_name_clash_is_refused(lh, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    ingest(lh, T, [_csv(tmp_path, "b.csv", [(4, "dee", 20)])], branch="dup")
    head = refs(lh, T)["dup"]
    with pytest.raises(ValidationError, match="already exists"):
        ingest(lh, T, [_csv(tmp_path, "c.csv", [(5, "eve", 20)])], branch="dup")
    assert refs(lh, T)["dup"] == head


def test_publish_of_a_branch_already_published_is_known_from_main_lineage(lh, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Even before (or without) the journal entry: the published snapshot carries wap.branch."""
    r = ingest(lh, T, [_csv(tmp_path, "b.csv", [(4, "dee", 20)])], branch="quick")
    tbl = lh.table(T)
    tbl.manage_snapshots().create_branch(r.snapshot_id, "main").remove_branch(
        "quick"
    ).commit()  # published elsewhere
    res = publish(lh, T, "quick")
    assert res.outcome == "already_published" and res.main_after == r.snapshot_id
    with pytest.raises(NotFoundError):
        publish(lh, T, "never_existed")


def test_concurrent_ingests_into_two_branches_of_one_table_both_land(lh, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Commits to different branches of one table race on the table metadata; both must land."""
    main = refs(lh, T)["main"]
    srcs = {f"c{i}": _csv(tmp_path, f"c{i}.csv", [(100 + i, f"n{i}", 20 + i)]) for i in range(3)}
    results: dict[str, object] = {}
    barrier = threading.Barrier(len(srcs))

    def go(branch: str, src: str) -> None:
        barrier.wait()
        try:
            results[branch] = ingest(lh, T, [src], branch=branch)
        except Exception as exc:
            results[branch] = exc

    in_threads(go, srcs.items())
    assert all(
        getattr(r, "audit", None) is not None and r.audit.status == "passed" for r in results.values()
    ), results  # type: ignore[attr-defined]
    now = refs(lh, T)
    assert now["main"] == main and set(srcs) <= set(now)
    for i, branch in enumerate(srcs):
        ids = {r.id for r in lh.spark.table(lh.spark_name(T, branch)).select("id").collect()}
        assert ids == {1, 2, 3, 100 + i}
