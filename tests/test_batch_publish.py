"""Publish (force, discard) a batch that spans tables: every table's main moves, or none (issue 27, items 4-6).

Real Spark + Iceberg on a JDBC catalog in SQLite and in PostgreSQL (one module-scoped lakehouse each, seeded
once): ``wap ingest --batch`` and real audits, ``publish_batch`` / ``wap publish --batch``; kill -9 (a CLI
subprocess with ``WAP_FAULT``) at every point of a batch publish, then ``reconcile``: all mains moved or none,
the journal under the original user; races (two batches over a shared table, a one-table publish against a
batch: one winner per table, the loser journaled ``refused``); a reader of every main pointer in one catalog
transaction while batches publish, and readers at the batch tag through PyIceberg and Spark: never half a
batch.
The REST path runs on SeaweedFS's Iceberg REST catalog (PyIceberg only).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from conftest import create_pg_database, make_settings
from helpers import (
    ROOT,
    ROOT_,
    SAM,
    TWO_PERSON_ACCESS,
    lake_env,
    lake_settings,
    run_cli,
    seed_tables,
    write_csv,
)
from py4j.protocol import Py4JJavaError
from pyiceberg.table import StaticTable
from sqlalchemy import text

from wap_core import Lakehouse, TableId
from wap_core.exceptions import AccessDeniedError, ConflictError, RefusedError
from wap_core.faults import FAULT_EXIT_CODE, PAUSE_ENV
from wap_core.lake.multitable import Atomicity
from wap_core.session import Identity, Session
from wap_core.states import Action, Outcome, PublishOutcome
from wap_core.store import batches as store
from wap_core.workflow.audit import audit_branch
from wap_core.workflow.batch import join, load_batch
from wap_core.workflow.discard import discard_batch
from wap_core.workflow.ingest import ingest
from wap_core.workflow.publish import publish, publish_batch
from wap_core.workflow.readiness import batch_readiness
from wap_core.workflow.reconcile import reconcile

T1, T2, T3, T4 = (TableId("bp", n) for n in ("airports", "flights", "planes", "weather"))
TABLES = (T1, T2, T3, T4)
SUITE = "".join(f"{t}:\n  checks:\n    - not_null: [name]\n    - unique: [id]\n" for t in TABLES)
VIEWER = "vic@corp.test"
ANN, BOB = "ann@corp.test", "bob@corp.test"
ARROW = pa.schema([pa.field("id", pa.int32()), pa.field("name", pa.string())])


@pytest.fixture(params=["sqlite", "postgres"], scope="module")
def lake(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, spark_session: None
) -> Lakehouse:
    home = tmp_path_factory.mktemp(f"bp_{request.param}")
    kw: dict[str, Any] = {}
    if request.param == "postgres":
        kw["catalog_uri"] = create_pg_database(request.getfixturevalue("postgres"), f"bp_{os.getpid()}")
    settings = lake_settings(
        home,
        f"bp_{request.param}",
        SUITE,
        access_path=home / "access.yml",
        ingest_roots=(home,),
        **kw,
    )
    lh = Lakehouse(settings)
    seed_tables(lh, TABLES, home / "src")
    settings.access_file.write_text(TWO_PERSON_ACCESS)
    return lh


def cli_as(lh: Lakehouse, user: str, *args: str) -> tuple[int, str, str]:
    """The CLI in this process as ``user`` on ``lh`` (its catalog database too: SQLite or PostgreSQL)."""
    more = {"WAP_CATALOG_URI": lh.settings.catalog_uri} if lh.settings.catalog_uri else {}
    return run_cli(lake_env(lh.settings, user, access=True, roots=True, **more), *args)


def as_(lh: Lakehouse, user: str) -> Session:
    return Session(lh, Identity(user))


def mains(lh: Lakehouse, tables: tuple[TableId, ...] | list[TableId] = TABLES) -> dict[TableId, int | None]:
    """Every table's main, raw from the catalog (no reconciliation)."""
    out = {}
    for t in tables:
        ref = lh.catalog.load_table(t.tuple).metadata.refs.get("main")
        out[t] = ref.snapshot_id if ref is not None else None
    return out


def stage(
    lh: Lakehouse, tables: list[TableId], name: str, value: int, *, audit: bool = True
) -> dict[TableId, int]:
    """Batch ``name``: a row ``value`` appended by PyIceberg on a branch ``name`` of each table (forked from
    main), each a member; audited for real (Spark) unless ``audit`` is False. The branch heads."""
    heads = {}
    for t in tables:
        join(lh, name, t, SAM)
        tbl = lh.catalog.load_table(t.tuple)
        tbl.manage_snapshots().create_branch(tbl.metadata.refs["main"].snapshot_id, name).commit()
        lh.catalog.load_table(t.tuple).append(
            pa.table({"id": [value], "name": [f"r{value}"]}, schema=ARROW), branch=name
        )
        heads[t] = lh.catalog.load_table(t.tuple).metadata.refs[name].snapshot_id
        if audit:
            assert audit_branch(lh, t, name, user=SAM).passed
    return heads


def journal_rows(lh: Lakehouse, branch: str) -> list[Any]:
    return [e for e in lh.journal.history(branch=branch, action=Action.PUBLISH) if e.intent_id is not None]


def pointers(lh: Lakehouse) -> dict[str, str]:
    """Every table's metadata location, read in ONE catalog transaction."""
    with lh.catalog.engine.connect() as conn:  # type: ignore[attr-defined]
        rows = conn.execute(
            text("SELECT table_name, metadata_location FROM iceberg_tables WHERE catalog_name = :c"),
            {"c": lh.catalog.name},
        ).all()
    return {r[0]: r[1] for r in rows}


# --------------------------------------------------------------------------- publish, refuse, discard


def test_publish_batch_moves_every_main_with_the_batch_tag(lake: Lakehouse) -> None:
    src = Path(lake.settings.home) / "src"
    for n, t in enumerate((T1, T2, T3)):
        r = ingest(
            lake,
            t,
            [write_csv(src / f"d1_{t.name}.csv", ("id", "name"), [(10 + n, "new")])],
            batch="day1",
            user=SAM,
        )
        assert r.audit.passed
    snaps_before = {t: len(lake.catalog.load_table(t.tuple).metadata.snapshots) for t in (T1, T2, T3)}
    heads = load_batch(lake, "day1").heads
    before = mains(lake)
    res = publish_batch(as_(lake, ANN), "day1")
    assert res.outcome is PublishOutcome.PUBLISHED and res.tag == "batch-day1" and not res.forced
    assert res.atomicity is Atomicity.ATOMIC
    assert [r.table for r in res.tables] == [str(T1), str(T2), str(T3)]
    after = mains(lake)
    for t in (T1, T2, T3):
        tbl = lake.catalog.load_table(t.tuple)
        assert after[t] == heads[str(t)] and "day1" not in tbl.metadata.refs
        assert tbl.metadata.refs["batch-day1"].snapshot_id == heads[str(t)]
        assert len(tbl.metadata.snapshots) == snaps_before[t]  # no snapshot, so 0 data files written
    assert after[T4] == before[T4]
    # Spark reads main's new pointer at once (the catalog's cache is off)
    assert lake.spark.table(lake.spark_name(T2)).where("id = 11").count() == 1
    # the journal: one intent per table, resolved published, under ann, with the batch in its details
    rows = journal_rows(lake, "day1")
    assert {(e.table, e.outcome, e.user) for e in rows} == {
        (str(t), Outcome.PUBLISHED, ANN) for t in (T1, T2, T3)
    }
    assert all(e.details["batch"] == "day1" and len(e.details["tables"]) == 3 for e in rows)
    assert {m.closed_as for m in store.members(lake.journal.engine, "day1")} == {"published"}
    # again: already published, nothing moves
    again = publish_batch(as_(lake, ANN), "day1")
    assert again.outcome is PublishOutcome.ALREADY_PUBLISHED and mains(lake) == after


def test_publish_batch_is_refused_when_one_table_failed_its_audit(lake: Lakehouse) -> None:
    src = Path(lake.settings.home) / "src"
    ingest(lake, T1, [write_csv(src / "bad_a.csv", ("id", "name"), [(20, "ok")])], batch="bad1", user=SAM)
    r = ingest(lake, T2, [write_csv(src / "bad_f.csv", ("id", "name"), [(21, "")])], batch="bad1", user=SAM)
    assert not r.audit.passed  # not_null(name) fails on flights
    before = mains(lake)
    with pytest.raises(RefusedError, match=r"bp\.flights") as err:
        publish_batch(as_(lake, ANN), "bad1")
    assert err.value.reason_code == "audit_failed"
    assert mains(lake) == before  # nothing moved, not even airports
    refused = [e for e in lake.journal.history(branch="bad1") if e.outcome is Outcome.REFUSED]
    assert {e.table for e in refused} == {str(T1), str(T2)}
    # a viewer may not publish (nor discard) a batch: access refuses it
    with pytest.raises(AccessDeniedError, match="may not publish:"):
        publish_batch(as_(lake, VIEWER), "bad1")
    with pytest.raises(AccessDeniedError, match="may not discard:"):
        discard_batch(as_(lake, VIEWER), "bad1")
    # forced: needs a reason, an admin; then every main moves
    code, _, err_ = cli_as(lake, ANN, "publish", "--batch", "bad1", "--force", "--reason", "known gap")
    assert code == 1 and "may not force publish" in err_
    code, out, err_ = cli_as(
        lake, ROOT_, "publish", "--batch", "bad1", "--force", "--reason", "known gap", "--json"
    )
    assert code == 0, err_
    res = json.loads(out)
    assert (
        res["forced"] and res["batch"] == "bad1" and [t["table"] for t in res["tables"]] == [str(T1), str(T2)]
    )
    assert {e.outcome for e in journal_rows(lake, "bad1")} == {Outcome.FORCED}


def test_discard_batch_removes_every_branch(lake: Lakehouse) -> None:
    stage(lake, [T3, T4], "drop1", 30, audit=False)
    before = mains(lake)
    code, out, err = cli_as(lake, SAM, "discard", "--batch", "drop1", "--reason", "wrong day")
    assert code == 0, err
    assert "bp.planes" in out and "bp.weather" in out
    assert mains(lake) == before
    assert all("drop1" not in lake.catalog.load_table(t.tuple).metadata.refs for t in (T3, T4))
    rows = lake.journal.history(branch="drop1", action=Action.DISCARD)
    assert {(e.table, e.outcome) for e in rows} == {
        (str(T3), Outcome.DISCARDED),
        (str(T4), Outcome.DISCARDED),
    }
    assert {m.closed_as for m in store.members(lake.journal.engine, "drop1")} == {"discarded"}


def test_cli_publish_needs_table_branch_or_batch(lake: Lakehouse) -> None:
    code, _, err = cli_as(lake, ANN, "publish", str(T1), "x", "--batch", "y")
    assert code == 2 and "not both" in err and len(err.strip().splitlines()) == 1
    code, _, err = cli_as(lake, ANN, "publish")
    assert code == 2 and "--batch" in err
    code, _, err = cli_as(lake, ANN, "discard", str(T1))
    assert code == 2


# --------------------------------------------------------------------------- kill -9 at every point

POINTS_NOTHING = ("after_publish_batch_intents", "after_publish_batch_write", "in_publish_batch_transaction")
POINTS_ALL = ("after_publish_batch_commit", "before_publish_batch_outcome")


def cli_env(lh: Lakehouse, user: str, **more: str) -> dict[str, str]:
    env = {
        **os.environ,
        **lake_env(lh.settings, user, access=True, roots=True, **more),
        "PYSPARK_PYTHON": sys.executable,
    }
    if lh.settings.catalog_uri:
        env["WAP_CATALOG_URI"] = lh.settings.catalog_uri
    env.pop("WAP_FAULT", None)
    env.pop(PAUSE_ENV, None)
    env.update(more)
    return env


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "wap_core", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.parametrize("point", POINTS_NOTHING + POINTS_ALL)
def test_killed_batch_publish_is_all_or_none_after_reconcile(lake: Lakehouse, point: str) -> None:
    n = (POINTS_NOTHING + POINTS_ALL).index(point)
    name = f"kill{n}"
    heads = stage(lake, [T1, T3], name, 40 + n)
    before = mains(lake)
    p = cli(cli_env(lake, ROOT_, WAP_FAULT=point), "publish", "--batch", name)
    assert p.returncode == FAULT_EXIT_CODE, p.stderr[-2000:]
    moved = point in POINTS_ALL
    now = mains(lake)
    assert now == ({**before, T1: heads[T1], T3: heads[T3]} if moved else before)
    pending = [i for i in lake.journal.pending_intents() if i.branch == name]
    assert len(pending) == 2  # every point is after the intents: one per table, pending
    reconcile(lake)  # another process (this one) decides, under the original user
    rows = journal_rows(lake, name)
    assert len(rows) == 2 and {e.user for e in rows} == {ROOT_} and all(e.reconciled for e in rows)
    assert {e.outcome for e in rows} == ({Outcome.PUBLISHED} if moved else {Outcome.ABANDONED})
    assert not [i for i in lake.journal.pending_intents() if i.branch == name]
    if moved:
        assert {m.closed_as for m in store.members(lake.journal.engine, name)} == {"published"}
        assert publish_batch(as_(lake, ROOT_), name).outcome is PublishOutcome.ALREADY_PUBLISHED
    else:  # the batch is whole on its branches: publishable again
        assert publish_batch(as_(lake, ROOT_), name).outcome is PublishOutcome.PUBLISHED
        assert mains(lake) == {**before, T1: heads[T1], T3: heads[T3]}


# --------------------------------------------------------------------------- races


def _held(lh: Lakehouse, name: str, *args: str) -> subprocess.Popen[str]:
    """``wap publish ARGS`` in a subprocess held at its point after the intents (``WAP_PAUSE``) for 12 s."""
    env = cli_env(lh, ROOT_, **{PAUSE_ENV: f"{name}=12"})
    return subprocess.Popen(
        [sys.executable, "-m", "wap_core", "publish", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_pending(lh: Lakehouse, branch: str, n: int) -> None:
    deadline = time.monotonic() + 120
    while len([i for i in lh.journal.pending_intents() if i.branch == branch]) < n:
        assert time.monotonic() < deadline, f"no pending intents on {branch}"
        time.sleep(0.2)


def test_two_batches_over_a_shared_table_one_wins(lake: Lakehouse) -> None:
    a = stage(lake, [T1, T2], "race_a", 50)
    b = stage(lake, [T2, T3], "race_b", 51)
    before = mains(lake)
    held = _held(lake, "after_publish_batch_intents", "--batch", "race_a")
    _wait_pending(lake, "race_a", 2)  # a read its tables and announced; it has not committed
    publish_batch(as_(lake, ANN), "race_b")  # b wins planes and flights
    _, err = held.communicate(timeout=300)
    assert held.returncode == 1, err
    assert "bp.flights lost" in err and len(err.strip().splitlines()) == 1
    now = mains(lake)
    assert now[T2] == b[T2] and now[T3] == b[T3] and now[T1] == before[T1]  # a moved nothing
    rows = journal_rows(lake, "race_a")
    assert {(e.table, e.outcome) for e in rows} == {(str(T1), Outcome.REFUSED), (str(T2), Outcome.REFUSED)}
    assert all(e.details.get("lost") == str(T2) for e in rows)
    assert all(
        "race_a" in lake.catalog.load_table(t.tuple).metadata.refs for t in (T1,)
    )  # a's airports branch stays
    assert a[T1] == lake.catalog.load_table(T1.tuple).metadata.refs["race_a"].snapshot_id


def test_a_one_table_publish_racing_a_batch(lake: Lakehouse) -> None:
    # the batch is held; a one-table publish of a shared table wins it
    stage(lake, [T1, T3], "race_c", 60)
    src = Path(lake.settings.home) / "src"
    r = ingest(
        lake, T1, [write_csv(src / "solo1.csv", ("id", "name"), [(61, "solo")])], branch="solo1", user=SAM
    )
    assert r.audit.passed
    before = mains(lake)
    held = _held(lake, "after_publish_batch_intents", "--batch", "race_c")
    _wait_pending(lake, "race_c", 2)
    won = publish(as_(lake, ANN), T1, "solo1")
    _, err = held.communicate(timeout=300)
    assert held.returncode == 1 and "bp.airports lost" in err, err
    assert mains(lake) == {**before, T1: won.main_after}
    assert {e.outcome for e in journal_rows(lake, "race_c")} == {Outcome.REFUSED}
    # the other way round: the one-table publish is held after its intent, the batch wins
    d = stage(lake, [T1, T4], "race_d", 62)
    r = ingest(
        lake, T4, [write_csv(src / "solo2.csv", ("id", "name"), [(63, "solo")])], branch="solo2", user=SAM
    )
    assert r.audit.passed
    before = mains(lake)
    held = _held(lake, "after_publish_batch_intents", str(T4), "solo2")
    _wait_pending(lake, "solo2", 1)
    publish_batch(as_(lake, ANN), "race_d")
    _, err = held.communicate(timeout=300)
    assert held.returncode == 1 and "lost a race" in err, err
    assert mains(lake) == {**before, T1: d[T1], T4: d[T4]}
    solo = [e for e in lake.journal.history(str(T4), branch="solo2", action=Action.PUBLISH) if e.intent_id]
    assert [e.outcome for e in solo] == [Outcome.REFUSED]


def test_another_refs_commit_between_load_and_swap_is_retried_not_lost(lake: Lakehouse) -> None:
    # the batch is held after its intents (its tables loaded once, before); another branch of airports is
    # created meanwhile: airports' pointer moved, but not its main nor the batch's branch: the swap retries
    heads = stage(lake, [T1, T3], "retry1", 80)
    before = mains(lake)
    held = _held(lake, "after_publish_batch_intents", "--batch", "retry1")
    _wait_pending(lake, "retry1", 2)
    tbl = lake.catalog.load_table(T1.tuple)
    tbl.manage_snapshots().create_branch(tbl.metadata.refs["main"].snapshot_id, "elsewhere").commit()
    _, err = held.communicate(timeout=300)
    assert held.returncode == 0, err
    assert mains(lake) == {**before, T1: heads[T1], T3: heads[T3]}
    assert {e.outcome for e in journal_rows(lake, "retry1")} == {Outcome.PUBLISHED}
    assert "elsewhere" in lake.catalog.load_table(T1.tuple).metadata.refs


def test_a_busy_branch_refuses_the_whole_batch(lake: Lakehouse) -> None:
    stage(lake, [T2, T3], "busy1", 70)
    before = mains(lake)
    # another action holds planes' branch: the batch's intents are all or none
    lake.journal.begin_intent(user=BOB, action=Action.DISCARD, table=str(T3), branch="busy1")
    with pytest.raises(ConflictError, match="busy"):
        publish_batch(as_(lake, ANN), "busy1")
    assert mains(lake) == before
    assert not [i for i in lake.journal.intents() if i.branch == "busy1" and i.user == ANN]
    assert {e.table for e in lake.journal.history(branch="busy1") if e.outcome is Outcome.REFUSED} == {
        str(T2),
        str(T3),
    }
    for i in lake.journal.pending_intents():
        if i.branch == "busy1":
            lake.journal.resolve_intent(i, outcome=Outcome.ABANDONED, done=False)


# --------------------------------------------------------------------------- readers never see half a batch


def _at_tag(lh: Lakehouse, table: TableId, tag: str) -> int | None:
    """Through Spark SQL (``VERSION AS OF``, a fresh load: the catalog's cache is off): the largest round id
    (>= 100) of ``table`` at ``tag``; None while the table has no such tag."""
    try:
        row = lh.spark.sql(
            f"SELECT max(id) AS m FROM {lh.sql_name(table)} VERSION AS OF '{tag}' WHERE id >= 100"
        ).collect()[0]
    except Py4JJavaError as exc:  # Iceberg's ValidationException: no snapshot or ref of that name (yet)
        if "Cannot find matching snapshot ID or reference name" not in str(exc.java_exception):
            raise
        return None
    return None if row["m"] is None else int(row["m"])


def test_readers_never_see_half_a_batch(lake: Lakehouse) -> None:
    """50 forced batch publishes of 2-4 tables; one reader takes every main pointer in one catalog transaction,
    another loads the tables one by one through PyIceberg and reads the batch tags, a third reads the tables
    of the round being published one by one through Spark at its tag (``VERSION AS OF 'batch-<name>'``):
    0 mixed states."""
    rounds = [list(TABLES[: 2 + (r % 3)]) for r in range(50)]
    reads: list[dict[str, str]] = []
    tag_reads: list[list[set[str]]] = []
    spark_reads: list[tuple[int, list[int | None]]] = []
    publishing = [100]  # the round being published now
    spark_errors: list[Exception] = []
    done = threading.Event()

    def pointer_reader() -> None:
        while not done.is_set():
            reads.append(pointers(lake))
            time.sleep(0.005)

    def tag_reader() -> None:
        while not done.is_set():
            tag_reads.append([set(lake.catalog.load_table(t.tuple).metadata.refs) for t in TABLES])
            time.sleep(0.02)

    def spark_tag_reader() -> None:
        try:
            while not done.is_set():
                r = publishing[0]
                spark_reads.append((r, [_at_tag(lake, t, f"batch-rd{r}") for t in rounds[r - 100]]))
        except Exception as exc:  # the test fails on it below (a thread's exception would only warn)
            spark_errors.append(exc)

    round_of_head: dict[int, int] = {}
    threads = [
        threading.Thread(target=pointer_reader),
        threading.Thread(target=tag_reader),
        threading.Thread(target=spark_tag_reader),
    ]
    for th in threads:
        th.start()
    try:
        for r, tables in enumerate(rounds, start=100):
            heads = stage(lake, tables, f"rd{r}", r, audit=False)  # branches only: main stays put meanwhile
            round_of_head.update(dict.fromkeys(heads.values(), r))
            publishing[0] = r
            publish_batch(as_(lake, ROOT_), f"rd{r}", force=True, reason="reader loop")
    finally:
        done.set()
        for th in threads:
            th.join(60)
    main_at = {
        loc: StaticTable.from_metadata(loc).metadata.refs["main"].snapshot_id
        for loc in {v for rd in reads for v in rd.values()}
    }
    mixed = []
    for rd in reads:
        shown = {name: round_of_head.get(main_at[loc], -1) for name, loc in rd.items()}
        for r, tables in enumerate(rounds, start=100):
            values = [shown[t.name] for t in tables]
            if r in values and any(v < r for v in values):
                mixed.append((r, shown))
    assert len(reads) > 10 and mixed == []
    # at the tag, loading table by table: once a table shows batch-<r>, every table of r loaded after it does
    torn = []
    for sweep in tag_reads:
        for r, tables in enumerate(rounds, start=100):
            seen = [f"batch-rd{r}" in sweep[TABLES.index(t)] for t in tables]
            if any(seen) and not all(seen[seen.index(True) :]):
                torn.append((r, seen))
    assert len(tag_reads) > 5 and torn == []
    # through Spark at the tag, table by table: once a table has batch-<r>, every table read after it has it
    # too, and each shows round r's rows and no later round's (its max id is r); the last round once more, done
    assert spark_errors == []
    spark_reads.append((149, [_at_tag(lake, t, "batch-rd149") for t in rounds[-1]]))
    spark_torn = [
        (r, seen)
        for r, seen in spark_reads
        if any(v not in (None, r) for v in seen)
        or (any(v is not None for v in seen) and None in seen[[v is not None for v in seen].index(True) :])
    ]
    whole = [seen for r, seen in spark_reads if all(v == r for v in seen)]
    assert len(spark_reads) > 3 and whole and spark_torn == [], (len(spark_reads), spark_torn)
    # and each tag reads its round's rows on every table (PyIceberg scan at the tag)
    for r in (100, 124, 149):
        for t in rounds[r - 100]:
            tbl = lake.catalog.load_table(t.tuple)
            ids = (
                tbl.scan(snapshot_id=tbl.metadata.refs[f"batch-rd{r}"].snapshot_id)
                .to_arrow()
                .column("id")
                .to_pylist()
            )
            assert r in ids


# --------------------------------------------------------------------------- REST (SeaweedFS)


def test_rest_batch_publish_through_the_multi_table_endpoint(seaweed: Any, tmp_path: Path) -> None:
    if os.environ.get("WAP_TEST_SKIP_REST"):
        pytest.skip("WAP_TEST_SKIP_REST")
    bucket = seaweed.create_table_bucket(f"wapbp-{os.getpid()}")
    settings = make_settings(
        tmp_path / "rest",
        catalog_uri="rest+" + seaweed.rest_uri,
        warehouse=f"s3://{bucket}",
        catalog_properties=(("credential", f"{seaweed.access_key}:{seaweed.secret_key}"),),
        s3_endpoint=seaweed.endpoint,
        s3_access_key=seaweed.access_key,
        s3_secret_key=seaweed.secret_key,
    )
    lh = Lakehouse(settings)
    lh.catalog.create_namespace("bp")
    for t in (T1, T2):
        lh.catalog.create_table(t.tuple, schema=ARROW).append(
            pa.table({"id": [1], "name": ["a"]}, schema=ARROW)
        )
    heads = stage(lh, [T1, T2], "rb1", 5, audit=False)
    assert batch_readiness(lh, "rb1").atomicity is Atomicity.FAILURES_ONLY
    res = publish_batch(as_(lh, "root"), "rb1", force=True, reason="rest")
    assert res.atomicity is Atomicity.FAILURES_ONLY
    for t in (T1, T2):
        tbl = lh.catalog.load_table(t.tuple)
        assert tbl.metadata.refs["main"].snapshot_id == heads[t] and "rb1" not in tbl.metadata.refs
        assert tbl.metadata.refs["batch-rb1"].snapshot_id == heads[t]
    assert {e.outcome for e in journal_rows(lh, "rb1")} == {Outcome.FORCED}
    # a table dropped while a batch publish is held after its intents: the 404 names the missing table
    # (not "no multi-table commit"); nothing moves
    stage(lh, [T1, T2], "rb2", 6, audit=False)
    before = mains(lh, [T1])
    errors: list[BaseException] = []

    def run() -> None:
        try:
            publish_batch(as_(lh, "root"), "rb2", force=True, reason="rest")
        except Exception as exc:
            errors.append(exc)

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(PAUSE_ENV, "after_publish_batch_intents=4")
        th = threading.Thread(target=run)
        th.start()
        _wait_pending(lh, "rb2", 2)
        lh.catalog.drop_table(T2.tuple)
        th.join(120)
    assert len(errors) == 1 and isinstance(errors[0], RefusedError), errors
    assert "does not exist on the catalog" in str(
        errors[0]
    )  # the 404 named the table: not a missing endpoint
    assert "no multi-table commit" not in str(errors[0]) and "bp.flights" in str(errors[0])
    assert mains(lh, [T1]) == before


def test_a_published_batch_name_is_not_reused_and_a_member_discarded_alone_leaves_the_batch(
    lake: Lakehouse,
) -> None:
    """Issue 39 item 4: the tag batch-<name> is never split (the name of a published batch is refused, journaled,
    before anything is written); a table's branch discarded alone leaves its batch (a later branch of that
    name on that table is a plain branch, publishable on its own)."""
    from wap_core.workflow.discard import discard

    src = Path(lake.settings.home) / "src"

    def put(table: TableId, batch: str | None, name: str, branch: str | None = None) -> Any:
        return ingest(
            lake,
            table,
            [write_csv(src / f"{name}_{table.name}.csv", ("id", "name"), [(hash(name) % 1000 + 500, "x")])],
            batch=batch,
            branch=branch,
            user=SAM,
        )

    for t in (T1, T2):
        put(t, "reused", "reused1")
    publish_batch(as_(lake, ANN), "reused")
    with pytest.raises(RefusedError, match="batch name 'reused' was already published"):
        put(T1, "reused", "reused2")
    assert "reused" not in lake.catalog.load_table(T1.tuple).metadata.refs  # nothing written
    refusal = lake.journal.history(str(T1), branch="reused", action="ingest")[0]
    assert refusal.outcome is Outcome.REFUSED and refusal.details["code"] == "batch_published"

    for t in (T1, T2):
        put(t, "leave", f"leave_{t.name}")
    discard(lake, T2, "leave", reason="not this table", user=SAM)
    assert [m.table for m in store.open_members(lake.journal.engine, "leave")] == [str(T1)]
    put(T2, None, "leave_again", branch="leave")  # a plain branch of that name: not the batch's
    assert load_batch(lake, "leave").table_ids == (T1,)


def _publish_paused(lh: Lakehouse, name: str, seconds: int) -> tuple[threading.Thread, list[BaseException]]:
    """``publish_batch(name)`` as root on a thread, held ``seconds`` after its intents are committed."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            publish_batch(as_(lh, "root"), name)
        except Exception as exc:
            errors.append(exc)

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(PAUSE_ENV, f"after_publish_batch_intents={seconds}")
        th = threading.Thread(target=run)
        th.start()
        _wait_pending(lh, name, 2)
    return th, errors


def test_a_table_never_joins_a_batch_whose_publish_is_in_flight(lake: Lakehouse) -> None:
    # issue 39 item 4: a table that joined while the publish was in flight was left behind as an open member
    heads = stage(lake, [T1, T2], "late1", 90)
    th, errors = _publish_paused(lake, "late1", 15)
    src = Path(lake.settings.home) / "src"
    with pytest.raises(ConflictError, match="cannot join batch late1: its publish is in flight"):
        ingest(
            lake, T3, [write_csv(src / "late1.csv", ("id", "name"), [(91, "late")])], batch="late1", user=SAM
        )
    th.join(120)
    assert errors == []
    assert mains(lake, [T1, T2]) == heads  # the batch published whole
    assert "late1" not in lake.catalog.load_table(T3.tuple).metadata.refs  # nothing written for planes
    closed = {m.table: m.closed_as for m in store.members(lake.journal.engine, "late1")}
    assert closed == {str(T1): "published", str(T2): "published", str(T3): "refused"}
    refused = [e for e in lake.journal.history(str(T3), branch="late1", action=Action.INGEST) if e.intent_id]
    assert [e.outcome for e in refused] == [Outcome.REFUSED]


def test_a_publish_that_finds_a_table_joined_since_it_read_the_batch_moves_nothing(lake: Lakehouse) -> None:
    # the other order: planes joined (and wrote its branch) after the publish read the batch, before the
    # publish's intents: the publish sees it once its intents are committed and refuses the whole batch
    stage(lake, [T1, T2], "late2", 92)
    before = mains(lake)
    th, errors = _publish_paused(lake, "late2", 3)
    stage(lake, [T3], "late2", 93)  # joined without the in-flight check: as if its join came just before
    th.join(120)
    assert len(errors) == 1 and isinstance(errors[0], ConflictError), errors
    assert "bp.planes joined batch late2 after its tables were read" in str(errors[0])
    assert mains(lake) == before
    assert {e.outcome for e in journal_rows(lake, "late2")} == {Outcome.REFUSED}
    # published again, the batch takes planes with it
    done = publish_batch(as_(lake, "root"), "late2")
    assert [r.table for r in done.tables] == [str(T1), str(T2), str(T3)]
    assert {m.closed_as for m in store.members(lake.journal.engine, "late2")} == {"published"}
