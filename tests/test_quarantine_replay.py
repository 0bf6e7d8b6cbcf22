"""Replay of quarantined rows and ``_wap_source_line`` (issue 29 item 4) on real Spark + Iceberg.

One module-scoped lakehouse: ``shop.orders`` (id, name, qty; checks not_null(name), range(qty), unique(id))
under an access file (sam is steward). Its failing batch ``w1`` is ingested from a CSV whose failing rows sit
on known lines (one record spans two lines), quarantined and published once. Proved here: each kept row's
``_wap_source_line``; ``wap ingest --replay-of w1`` marks the kept rows replayed on the NEW batch's branch of
the quarantine table (joined to that batch, published with it), journaled, its keys flagged where they do not
match; the refusals (unknown batch, nothing quarantined, not yet published, already replayed); an old
quarantine table lacking only the new columns is upgraded; the API and the pipeline API replay too.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers import SAM, cli_as, cli_process, lake_env, lake_settings, refs, write_csv

from wap_core import Lakehouse, TableId, api, pipeline
from wap_core.exceptions import RefusedError, WapError
from wap_core.faults import FAULT_EXIT_CODE
from wap_core.session import session_of
from wap_core.states import Action, CheckStatus, Outcome
from wap_core.workflow.batch import load_batch
from wap_core.workflow.ingest import ingest
from wap_core.workflow.publish import publish, publish_batch
from wap_core.workflow.quarantine import (
    EXTRA_COLUMNS,
    LATER_COLUMNS,
    quarantine,
    quarantine_table_id,
    schema_problems,
    upgradable,
)
from wap_core.workflow.reconcile import reconcile

ORD, ITM = TableId("shop", "orders"), TableId("shop", "items")
QORD, QITM = quarantine_table_id(ORD), quarantine_table_id(ITM)
HEADER = ("id", "name", "qty")
CHECKS = """\
shop.orders:
  checks:
    - not_null: [name]
    - range: {column: qty, min: 0}
    - unique: [id]
shop.items:
  checks:
    - not_null: [name]
"""
ACCESS = f"""\
roles:
  steward: [{SAM}]
  admin: [root]
policies:
  "*": {{approvals: 0}}
"""
# line 1 is the header; the record of id 16 spans lines 8-9
W1 = (
    "id,name,qty\n"
    "10,a,1\n"  # 2
    "11,,2\n"  # 3 NULL name
    "12,b,-5\n"  # 4 negative qty
    "13,,-1\n"  # 5 both
    "14,c,1\n"  # 6
    "14,d,2\n"  # 7 duplicate key: quarantined (the first stays)
    '16,"two\nlines",4\n'  # 8-9
    "17,,1\n"  # 10 NULL name
)
LINES = {11: 3, 12: 4, 13: 5, 14: 7, 17: 10}


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory, spark_session: None) -> Lakehouse:
    home = tmp_path_factory.mktemp("replay")
    settings = lake_settings(home, "replay", "{}\n", access_path=home / "access.yml", ingest_roots=(home,))
    lh = Lakehouse(settings)
    for t in (ORD, ITM):
        ingest(
            lh,
            t,
            [write_csv(home / "src" / f"{t.name}0.csv", HEADER, [(1, "ann", 5)])],
            create=True,
            branch="first",
        )
        publish(lh, t, "first")
    settings.checks_file.write_text(CHECKS)
    settings.access_file.write_text(ACCESS)
    # the failing batch w1, quarantined (its kept rows carry their lines) and published
    path = home / "src" / "w1.csv"
    path.write_text(W1)
    r = ingest(lh, ORD, [str(path)], branch="w1", user=SAM)
    assert r.audit.status is CheckStatus.FAILED
    q = quarantine(lh, ORD, "w1", reason="vendor sent bad rows", user=SAM)
    assert q.quarantined == 5, q
    publish_batch(session_of(lh, "root"), "w1")
    return lh


def src(lh: Lakehouse, name: str, rows: list[tuple[object, ...]]) -> str:
    return write_csv(Path(lh.settings.home) / "src" / f"{name}.csv", HEADER, rows)


def rows_of(lh: Lakehouse, table: TableId, ref: str, where: str = "true") -> list[dict[str, object]]:
    return [
        r.asDict() for r in lh.spark.sql(f"SELECT * FROM {lh.sql_name(table, ref)} WHERE {where}").collect()
    ]


def test_each_kept_row_carries_its_source_line(lake: Lakehouse) -> None:
    kept = rows_of(lake, QORD, "main", "_wap_batch = 'w1'")
    assert {r["id"]: r["_wap_source_line"] for r in kept} == LINES
    assert all(r["_wap_replayed_by"] is None and r["_wap_replayed_at"] is None for r in kept)


def test_source_line_is_null_when_the_file_changed(lake: Lakehouse) -> None:
    path = Path(src(lake, "w2", [(20, None, 1), (21, "ok", 1)]))
    ingest(lake, ORD, [str(path)], branch="w2", user=SAM)
    path.write_text(path.read_text() + "22,late,1\n")  # no longer the file that was ingested
    quarantine(lake, ORD, "w2", reason="nulls", user=SAM)
    kept = rows_of(lake, QORD, "w2", "_wap_batch = 'w2'")
    assert [(r["id"], r["_wap_source_line"]) for r in kept] == [(20, None)]


def test_cli_replay_marks_the_kept_rows_on_the_new_batch(lake: Lakehouse) -> None:
    fixed = src(lake, "w1-fixed", [(11, "a2", 2), (12, "b", 5), (13, "x", 1), (18, "new", 1)])
    code, out, err = cli_as(
        lake, SAM, "ingest", str(ORD), fixed, "--branch", "fix1", "--replay-of", "w1", "--json"
    )
    assert code == 0, err
    got = json.loads(out)
    rp = got["replay"]
    assert (rp["replay_of"], rp["replayed_by"], rp["replayed"], rp["flagged"]) == ("w1", "fix1", 5, True)
    # keys: 18 is not among the kept rows' keys; 14 and 17 are not replayed (a warning, not a refusal)
    assert rp["keys"] == [
        {"check": "unique(id)", "columns": ["id"], "unmatched": 1, "missing": 2, "sample": [{"id": 18}]}
    ]
    # marked on the new batch's branch of the quarantine table only; main still unmarked
    marked = rows_of(lake, QORD, "fix1", "_wap_batch = 'w1'")
    assert len(marked) == 5 and {r["_wap_replayed_by"] for r in marked} == {"fix1"}
    assert all(r["_wap_replayed_at"] is not None for r in marked)
    assert {r["id"]: r["_wap_source_line"] for r in marked} == LINES  # the rest of each row is kept
    assert {r["_wap_replayed_by"] for r in rows_of(lake, QORD, "main", "_wap_batch = 'w1'")} == {None}
    # the quarantine table joined the new batch; journaled with the replayed batch and counts
    assert load_batch(lake, "fix1").table_ids == (ORD, QORD)
    mark = lake.journal.history(str(QORD), branch="fix1", action=Action.INGEST)[0]
    assert mark.outcome == Outcome.WRITTEN and mark.details["replay_of"] == "w1"
    assert mark.details["replayed"] == 5 and mark.details["flagged"] is True
    wrote = lake.journal.history(str(ORD), branch="fix1", action=Action.INGEST)[0]
    assert wrote.details["replay_of"] == "w1"


def test_a_second_replay_while_the_first_is_open_is_refused(lake: Lakehouse) -> None:
    before = refs(lake, ORD)
    fixed = src(lake, "w1-again", [(11, "z", 2)])
    code, _, err = cli_as(lake, SAM, "ingest", str(ORD), fixed, "--branch", "fix2", "--replay-of", "w1")
    assert (
        code == 1
        and "already replayed by fix1 (open batch fix1" in err
        and len(err.strip().splitlines()) == 1
    )
    assert refs(lake, ORD) == before


def test_the_mark_publishes_with_the_replay(lake: Lakehouse) -> None:
    res = publish_batch(session_of(lake, "root"), "fix1")
    assert {t.table for t in res.tables} == {str(ORD), str(QORD)}
    main = rows_of(lake, QORD, "main", "_wap_batch = 'w1'")
    assert len(main) == 5 and {r["_wap_replayed_by"] for r in main} == {"fix1"}
    assert rows_of(lake, ORD, "main", "id = 18")  # the replayed rows are on main too


@pytest.mark.parametrize(
    ("batch", "message", "code"),
    [
        ("nosuch", "no batch nosuch of shop.orders is known", "replay_unknown"),
        ("first", "nothing of batch first is quarantined", "replay_nothing"),
        ("w2", "not published yet: publish the batch first", "replay_unpublished"),
        ("w1", "already replayed by fix1", "replay_done"),
    ],
    ids=["unknown", "nothing-quarantined", "unpublished", "already-replayed"],
)
def test_refusals(lake: Lakehouse, batch: str, message: str, code: str) -> None:
    before = refs(lake, ORD)
    fixed = src(lake, f"refused-{batch}", [(30, "x", 1)])
    rc, _, err = cli_as(lake, SAM, "ingest", str(ORD), fixed, "--replay-of", batch)
    assert rc == 1 and message in err and len(err.strip().splitlines()) == 1, err
    assert refs(lake, ORD) == before  # nothing written
    last = lake.journal.history(str(ORD), action=Action.INGEST)[0]
    assert last.outcome == Outcome.REFUSED and last.details["code"] == code
    assert last.details["replay_of"] == batch


def test_api_and_pipeline_replay(lake: Lakehouse) -> None:
    ingest(lake, ORD, [src(lake, "w3", [(50, None, 1), (51, "ok", 1)])], branch="w3", user=SAM)
    quarantine(lake, ORD, "w3", reason="nulls", user=SAM)
    publish_batch(session_of(lake, "root"), "w3")  # w3's kept row (id 50) is on main now
    r = api.ingest(
        session_of(lake, SAM), ORD, [src(lake, "w3-fixed", [(50, "fixed", 1)])], branch="fix3", replay_of="w3"
    )
    assert r.replay is not None and (r.replay.replayed, r.replay.flagged) == (1, False)
    assert [x["_wap_replayed_by"] for x in rows_of(lake, QORD, "fix3", "_wap_batch = 'w3'")] == ["fix3"]
    # the pipeline API passes it on (here: refused, fix3 replays w3 already)
    with pytest.raises(RefusedError, match="already replayed by fix3"):
        pipeline.ingest(
            ORD, [src(lake, "w3-fixed2", [(50, "again", 1)])], lh=session_of(lake, SAM), replay_of="w3"
        )


def test_an_old_quarantine_table_is_upgraded(lake: Lakehouse) -> None:
    old = ", ".join(f"{n} {t}" for n, t in EXTRA_COLUMNS if n not in LATER_COLUMNS)
    lake.spark.sql(f"CREATE TABLE {lake.sql_name(QITM)} (id INT, name STRING, qty INT, {old}) USING iceberg")
    ingest(lake, ITM, [src(lake, "items-u1", [(40, None, 1), (41, "ok", 1)])], branch="u1", user=SAM)
    q = quarantine(lake, ITM, "u1", reason="nulls", user=SAM)
    assert q.quarantined == 1
    cols = lake.spark.table(lake.spark_name(QITM)).columns
    assert set(LATER_COLUMNS) <= set(cols) and cols[:3] == ["id", "name", "qty"]
    assert lake.spark.table(lake.spark_name(ITM)).columns == list(HEADER)  # the table's own schema untouched
    kept = rows_of(lake, QITM, "u1")
    assert [(r["id"], r["_wap_source_line"]) for r in kept] == [(40, 2)]


def test_only_the_later_columns_are_upgradable() -> None:
    assert upgradable(["_wap_source_line (missing)", "_wap_replayed_by (missing)"]) == [
        "_wap_source_line",
        "_wap_replayed_by",
    ]
    assert upgradable(["_wap_source_line (missing)", "name (int, not string)"]) == []
    assert upgradable(["qty (missing)"]) == []
    assert callable(schema_problems)


def test_a_parquet_rows_line_is_its_position_in_the_file(lake: Lakehouse) -> None:
    path = Path(lake.settings.home) / "src" / "w4.parquet"
    ids, names = [60, 61, 62], ["ok", None, "ok"]
    pq.write_table(
        pa.table({"id": pa.array(ids, pa.int32()), "name": names, "qty": pa.array([1, 1, 1], pa.int32())}),
        path,
    )
    ingest(lake, ORD, [str(path)], branch="w4", user=SAM)
    quarantine(lake, ORD, "w4", reason="nulls", user=SAM)
    kept = rows_of(lake, QORD, "w4", "_wap_batch = 'w4'")
    assert [(r["id"], r["_wap_source_line"]) for r in kept] == [(61, 2)]


def test_replay_into_a_misfit_quarantine_table_is_refused_naming_the_columns(lake: Lakehouse) -> None:
    parts = TableId("shop", "parts")
    lake.spark.sql(f"CREATE TABLE {lake.sql_name(parts)} (id INT, name STRING, qty INT) USING iceberg")
    qparts = quarantine_table_id(parts)
    lake.spark.sql(
        f"CREATE TABLE {lake.sql_name(qparts)} (id INT, name INT, _wap_batch STRING) USING iceberg"
    )
    rc, _, err = cli_as(
        lake, SAM, "ingest", str(parts), src(lake, "parts", [(1, "x", 1)]), "--replay-of", "w1"
    )
    assert rc == 1 and len(err.strip().splitlines()) == 1, err
    assert "incompatible schema" in err and "qty (missing)" in err and "name (int, not string)" in err
    assert lake.spark.table(lake.spark_name(qparts)).columns == ["id", "name", "_wap_batch"]  # not upgraded
    assert refs(lake, parts) == {}


def test_a_json_lines_rows_line_is_its_line_in_the_file(lake: Lakehouse) -> None:
    # line 2 is blank (counted, as the malformed rows' sample counts it); a BOM opens the file; line 4's keys are
    # in another order; lines 6 and 7 are the same record (the duplicate key's last line is the one kept out)
    path = Path(lake.settings.home) / "src" / "w5.jsonl"
    path.write_text(
        "\ufeff"
        '{"id": 70, "name": "ok", "qty": 1}\n'  # 1
        "\n"  # 2
        '{"id": 71, "name": null, "qty": 1}\n'  # 3 NULL name
        '{"qty": -3, "name": "x", "id": 72}\n'  # 4 negative qty
        '{"id": 73, "name": "ok", "qty": 2}\n'  # 5
        '{"id": 74, "name": "dup", "qty": 1}\n'  # 6
        '  {"id": 74, "name": "dup", "qty": 1}\r\n'  # 7 duplicate key
        '{"id": 75, "qty": 1}\n',  # 8 NULL name (absent)
        encoding="utf-8",
    )
    ingest(lake, ORD, [str(path)], branch="w5", user=SAM)
    quarantine(lake, ORD, "w5", reason="bad json rows", user=SAM)
    kept = rows_of(lake, QORD, "w5", "_wap_batch = 'w5'")
    assert sorted((r["id"], r["_wap_source_line"]) for r in kept) == [(71, 3), (72, 4), (74, 7), (75, 8)]


@pytest.fixture(scope="module")
def kept_w6(lake: Lakehouse) -> str:
    """A batch whose kept rows (ids 80, 82) are published, for the kill tests of a replay's mark."""
    ingest(lake, ORD, [src(lake, "w6", [(80, None, 1), (81, "ok", 1), (82, "x", -1)])], branch="w6", user=SAM)
    assert quarantine(lake, ORD, "w6", reason="to replay", user=SAM).quarantined == 2
    publish_batch(session_of(lake, "root"), "w6")
    return "w6"


MARK_POINTS = ["after_replay_mark_branch", "after_replay_mark_write"]


@pytest.mark.parametrize("point", MARK_POINTS)
def test_a_replay_killed_at_its_mark_is_reconciled(lake: Lakehouse, kept_w6: str, point: str) -> None:
    new = f"rk{MARK_POINTS.index(point)}"
    fixed = src(lake, f"{new}-fixed", [(80, "fixed", 1), (82, "x", 1)])
    env = {
        **os.environ,
        **lake_env(lake.settings, SAM, access=True, roots=True, WAP_SPARK_DRIVER_MEMORY="1g"),
        "WAP_FAULT": point,
        "PYSPARK_PYTHON": sys.executable,
    }
    p = cli_process(env, "ingest", str(ORD), fixed, "--branch", new, "--replay-of", kept_w6, timeout=600)
    assert p.returncode == FAULT_EXIT_CODE, (
        f"exit {p.returncode}, expected a kill at {point}\n{p.stderr[-3000:]}"
    )
    reconcile(lake)  # every table: the table's and the quarantine table's pending intents
    # the mark comes after the replay batch is written: never a mark without it
    wrote = lake.journal.history(str(ORD), branch=new, action=Action.INGEST)[0]
    assert (
        wrote.outcome == Outcome.WRITTEN and wrote.details["replay_of"] == kept_w6 and new in refs(lake, ORD)
    )
    mark = lake.journal.history(str(QORD), branch=new, action=Action.INGEST)[0]
    assert mark.reconciled and mark.details["replay_of"] == kept_w6
    on_branch = rows_of(lake, QORD, new, f"_wap_batch = '{kept_w6}'")
    assert len(on_branch) == 2  # the kept rows, once each
    assert {r["_wap_replayed_by"] for r in rows_of(lake, QORD, "main", f"_wap_batch = '{kept_w6}'")} == {None}
    if point == "after_replay_mark_write":  # landed: marked once, journaled written
        assert mark.outcome == Outcome.WRITTEN
        assert {r["_wap_replayed_by"] for r in on_branch} == {new}
        assert all(r["_wap_replayed_at"] is not None for r in on_branch)
        with pytest.raises(RefusedError, match=f"already replayed by {new}"):  # never marked twice
            api.ingest(session_of(lake, SAM), ORD, [fixed], branch=f"{new}_again", replay_of=kept_w6)
        return
    # killed before the mark: nothing marked, the mark journaled incomplete, and the replay cannot publish
    # unmarked (the quarantine table's branch of the batch is incomplete); a replay again may mark them
    assert mark.outcome == Outcome.INCOMPLETE
    assert {r["_wap_replayed_by"] for r in on_branch} == {None}
    with pytest.raises(WapError) as refused:
        publish_batch(session_of(lake, "root"), new)
    assert str(QORD) in str(refused.value), refused.value
    assert {r["_wap_replayed_by"] for r in rows_of(lake, QORD, "main", f"_wap_batch = '{kept_w6}'")} == {None}


def test_the_key_warning_reads_as_a_sentence_not_a_repr() -> None:
    from wap_core.workflow.replay import KeyMatch

    k = KeyMatch("unique(id)", ["id"], 2, 1, [{"id": 50}, {"id": 51}])
    assert k.describe() == "unique(id): 2 key(s) no kept row had (e.g. id=50, id=51), 1 kept key(s) missing"
    assert "KeyMatch(" not in k.describe()
