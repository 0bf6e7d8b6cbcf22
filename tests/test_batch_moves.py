"""Discard, roll back and rebase a batch that spans tables: every table's ref moves, or none (issue 27, item 4).

Real Spark + Iceberg on a JDBC catalog in SQLite and in PostgreSQL (one module-scoped lakehouse each, seeded
once). Each batch move is ONE multi-table commit: a table that lost a race (its branch or main moved since it
was read) refuses the whole move, journaled ``refused`` naming it; kill -9 (a CLI subprocess with
``WAP_FAULT``) at the commit points of a batch's discard, rollback and rebase, then
``reconcile``: every table's ref moved or none did, the journal says which under the original user. Two of
the rebase's points (``after_rebase_batch_write``, ``before_rebase_batch_outcome``: the killed child starts a
JVM and replays, 10-14 s a kill) are killed on SQLite only (``REBASE_POINTS_SQLITE``). One test runs the three
moves on SeaweedFS's REST catalog, in tests/test_s3.py's object-store run.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from conftest import Backend, create_pg_database
from helpers import ANN, ROOT, ROOT_, SAM, TWO_PERSON_ACCESS, lake_env, lake_settings, run_cli, seed_tables
from test_batch_publish import ARROW, cli, cli_env, mains, stage
from test_notify import FAST, Receiver, meta_lakehouse, pyiceberg_branch

from wap_core import Lakehouse, TableId, notify
from wap_core.exceptions import AccessDeniedError, ConflictError, RefusedError
from wap_core.faults import FAULT_EXIT_CODE, FAULT_POINTS, PAUSE_ENV
from wap_core.identifiers import MAIN
from wap_core.session import Identity, Session
from wap_core.states import Action, Outcome, RebaseOutcome
from wap_core.store import batches as store
from wap_core.workflow.batch import join
from wap_core.workflow.discard import discard_batch
from wap_core.workflow.publish import publish_batch
from wap_core.workflow.rebase import rebase_batch
from wap_core.workflow.reconcile import reconcile
from wap_core.workflow.rollback import batch_rollback_state, batches_taken_off, rollback_batch

T1, T2, T3 = (TableId("bm", n) for n in ("airports", "flights", "planes"))
TABLES = (T1, T2, T3)
SUITE = "".join(f"{t}:\n  checks:\n    - not_null: [name]\n" for t in TABLES)


@pytest.fixture(params=["sqlite", "postgres"], scope="module")
def lake(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, spark_session: None
) -> Lakehouse:
    home = tmp_path_factory.mktemp(f"bm_{request.param}")
    kw: dict[str, Any] = {}
    if request.param == "postgres":
        kw["catalog_uri"] = create_pg_database(request.getfixturevalue("postgres"), f"bm_{os.getpid()}")
    settings = lake_settings(
        home, f"bm_{request.param}", SUITE, access_path=home / "access.yml", ingest_roots=(home,), **kw
    )
    lh = Lakehouse(settings)
    seed_tables(lh, TABLES, home / "src")
    settings.access_file.write_text(TWO_PERSON_ACCESS)
    return lh


def as_(lh: Lakehouse, user: str) -> Session:
    return Session(lh, Identity(user))


def cli_as(lh: Lakehouse, user: str, *args: str) -> tuple[int, str, str]:
    more = {"WAP_CATALOG_URI": lh.settings.catalog_uri} if lh.settings.catalog_uri else {}
    return run_cli(lake_env(lh.settings, user, access=True, roots=True, **more), *args)


def branches(lh: Lakehouse, name: str, tables: tuple[TableId, ...] = TABLES) -> dict[TableId, int | None]:
    """Every table's ref ``name``, raw from the catalog (no reconciliation)."""
    out = {}
    for t in tables:
        ref = lh.catalog.load_table(t.tuple).metadata.refs.get(name)
        out[t] = ref.snapshot_id if ref is not None else None
    return out


def rows_of(lh: Lakehouse, branch: str, action: Action, *, ref: str | None = None) -> list[Any]:
    """The outcome rows of intents of ``action`` of batch ``branch`` (on ``ref``: main for a rollback)."""
    return [
        e
        for e in lh.journal.history(branch=ref or branch, action=action)
        if e.intent_id is not None and e.details.get("batch") == branch
    ]


def append_on(lh: Lakehouse, t: TableId, branch: str, value: int) -> int:
    """A row appended on ``t``'s ``branch`` by PyIceberg (another writer); the branch's new head."""
    lh.catalog.load_table(t.tuple).append(
        pa.table({"id": [value], "name": [f"x{value}"]}, schema=ARROW), branch=branch
    )
    return lh.catalog.load_table(t.tuple).metadata.refs[branch].snapshot_id


def published(lh: Lakehouse, tables: list[TableId], name: str, value: int) -> dict[TableId, int]:
    """Batch ``name`` staged on ``tables`` and published (forced by root: no audit needed); the new mains."""
    heads = stage(lh, tables, name, value, audit=False)
    publish_batch(as_(lh, ROOT_), name, force=True, reason="test batch")
    return heads


def held(lh: Lakehouse, point: str, *args: str, seconds: int = 10) -> subprocess.Popen[str]:
    """``wap ARGS`` as root in a subprocess held at ``point`` (``WAP_PAUSE``) for ``seconds``."""
    return subprocess.Popen(
        [sys.executable, "-m", "wap_core", *args],
        cwd=ROOT,
        env=cli_env(lh, ROOT_, **{PAUSE_ENV: f"{point}={seconds}"}),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_pending(lh: Lakehouse, ref: str, n: int) -> None:
    deadline = time.monotonic() + 120
    while len([i for i in lh.journal.pending_intents() if i.branch == ref]) < n:
        assert time.monotonic() < deadline, f"no pending intents on {ref}"
        time.sleep(0.2)


# --------------------------------------------------------------------------- discard --batch


def test_discard_batch_is_all_or_none_when_a_branch_moved(lake: Lakehouse) -> None:
    heads = stage(lake, [T1, T2], "dx1", 10, audit=False)
    before = mains(lake, TABLES)
    p = held(lake, "after_discard_batch_intents", "discard", "--batch", "dx1", "--reason", "wrong day")
    wait_pending(lake, "dx1", 2)  # read and announced; not committed
    moved = append_on(lake, T2, "dx1", 11)  # flights' branch moves meanwhile
    _, err = p.communicate(timeout=300)
    assert p.returncode == 1, err
    assert "bm.flights lost" in err and len(err.strip().splitlines()) == 1
    # nothing went: airports' branch is still there (table by table, it would have been removed)
    assert branches(lake, "dx1", (T1, T2)) == {T1: heads[T1], T2: moved}
    assert mains(lake, TABLES) == before
    rows = rows_of(lake, "dx1", Action.DISCARD)
    assert {(e.table, e.outcome, e.user) for e in rows} == {
        (str(T1), Outcome.REFUSED, ROOT_),
        (str(T2), Outcome.REFUSED, ROOT_),
    }
    assert all(e.details.get("lost") == str(T2) for e in rows)
    assert {m.closed_as for m in store.members(lake.journal.engine, "dx1")} == {None}
    # again: every branch goes in one commit, each intent resolved discarded, the memberships closed
    code, out, err = cli_as(lake, SAM, "discard", "--batch", "dx1", "--reason", "wrong day", "--json")
    assert code == 0, err
    assert [t["table"] for t in json.loads(out)["tables"]] == [str(T1), str(T2)]
    assert branches(lake, "dx1", (T1, T2)) == {T1: None, T2: None}
    done = [e for e in rows_of(lake, "dx1", Action.DISCARD) if e.outcome is Outcome.DISCARDED]
    assert {(e.table, e.user, e.reason) for e in done} == {
        (str(T1), SAM, "wrong day"),
        (str(T2), SAM, "wrong day"),
    }
    assert {m.closed_as for m in store.members(lake.journal.engine, "dx1")} == {"discarded"}
    assert mains(lake, TABLES) == before


DISCARD_NOTHING = ("after_discard_batch_intents", "after_discard_batch_write", "in_discard_batch_transaction")
DISCARD_ALL = ("after_discard_batch_commit", "before_discard_batch_outcome")


@pytest.mark.parametrize("point", DISCARD_NOTHING + DISCARD_ALL)
def test_killed_batch_discard_is_all_or_none_after_reconcile(lake: Lakehouse, point: str) -> None:
    n = (DISCARD_NOTHING + DISCARD_ALL).index(point)
    name = f"dk{n}"
    heads = stage(lake, [T1, T3], name, 20 + n, audit=False)
    p = cli(cli_env(lake, ROOT_, WAP_FAULT=point), "discard", "--batch", name, "--reason", "killed")
    assert p.returncode == FAULT_EXIT_CODE, p.stderr[-2000:]
    gone = point in DISCARD_ALL
    assert branches(lake, name, (T1, T3)) == (
        {T1: None, T3: None} if gone else {T1: heads[T1], T3: heads[T3]}
    )
    assert len([i for i in lake.journal.pending_intents() if i.branch == name]) == 2
    reconcile(lake)  # another process decides, under the original user
    rows = rows_of(lake, name, Action.DISCARD)
    assert len(rows) == 2 and {e.user for e in rows} == {ROOT_} and all(e.reconciled for e in rows)
    assert {e.outcome for e in rows} == ({Outcome.DISCARDED} if gone else {Outcome.ABANDONED})
    closed = {m.closed_as for m in store.members(lake.journal.engine, name)}
    if gone:
        assert closed == {"discarded"}
    else:  # the batch is whole on its branches: discardable again
        assert closed == {None}
        discard_batch(as_(lake, ROOT_), name, reason="again")
        assert branches(lake, name, (T1, T3)) == {T1: None, T3: None}


# --------------------------------------------------------------------------- rollback --batch


def test_rollback_batch_moves_every_main_back_or_none(lake: Lakehouse) -> None:
    before = mains(lake, TABLES)
    assert batch_rollback_state(lake, "rb1") is None  # never published
    heads = published(lake, [T1, T2], "rb1", 30)
    assert mains(lake, TABLES) == {**before, T1: heads[T1], T2: heads[T2]}
    state = batch_rollback_state(lake, "rb1")  # what the batch Review shows before its Roll back batch
    assert state is not None and state.allowed and not state.rolled_back
    assert state.published.mains == {str(T1): (before[T1], heads[T1]), str(T2): (before[T2], heads[T2])}
    # admin only, and a reason
    with pytest.raises(AccessDeniedError, match="may not rollback:"):
        rollback_batch(as_(lake, ANN), "rb1", reason="bad day")
    code, _, err = cli_as(lake, ROOT_, "rollback", "--batch", "rb1", "--to", "1", "--reason", "x")
    assert code == 2 and "not both" in err and len(err.strip().splitlines()) == 1
    code, out, err = cli_as(lake, ROOT_, "rollback", "--batch", "rb1", "--reason", "bad day", "--json")
    assert code == 0, err
    res = json.loads(out)
    assert res["batch"] == "rb1" and [t["table"] for t in res["tables"]] == [str(T1), str(T2)]
    assert {t["table"]: [r["snapshot_id"] for r in t["rolled_back"]] for t in res["tables"]} == {
        str(T1): [heads[T1]],
        str(T2): [heads[T2]],
    }
    assert mains(lake, TABLES) == before  # every main back where the batch found it
    rows = rows_of(lake, "rb1", Action.ROLLBACK, ref=MAIN)
    assert {(e.table, e.outcome, e.user, e.snapshot_after) for e in rows} == {
        (str(T1), Outcome.ROLLED_BACK, ROOT_, before[T1]),
        (str(T2), Outcome.ROLLED_BACK, ROOT_, before[T2]),
    }
    assert {e.table: e.details["rolled_back"] for e in rows} == {str(T1): [heads[T1]], str(T2): [heads[T2]]}
    # the batch tag stays (what was published); again: refused, nothing moves
    assert lake.catalog.load_table(T1.tuple).metadata.refs["batch-rb1"].snapshot_id == heads[T1]
    state = batch_rollback_state(lake, "rb1")
    assert state is not None and not state.allowed and state.rolled_back
    with pytest.raises(RefusedError, match="already where it was"):
        rollback_batch(as_(lake, ROOT_), "rb1", reason="again")
    assert mains(lake, TABLES) == before
    code, _, err = cli_as(lake, ROOT_, "rollback", "--batch", "never_was", "--reason", "x")
    assert code == 2 and "never published" in err


def test_rollback_batch_is_refused_when_a_main_moved_since(lake: Lakehouse) -> None:
    published(lake, [T1, T3], "rb2", 40)
    later = published(lake, [T3], "rb2_later", 41)  # planes' main moves on after the batch
    now = mains(lake, TABLES)
    state = batch_rollback_state(lake, "rb2")  # the Review's button is disabled with the refusal's words
    assert state is not None and not state.allowed and state.code == "conflict"
    assert "bm.planes's main moved since the batch's publish" in state.message
    with pytest.raises(ConflictError, match=r"bm\.planes's main moved since the batch's publish"):
        rollback_batch(as_(lake, ROOT_), "rb2", reason="bad day")
    assert mains(lake, TABLES) == now and now[T3] == later[T3]
    refused = lake.journal.history(branch=MAIN, action=Action.ROLLBACK, limit=5)
    assert {(e.table, e.outcome) for e in refused[:2]} == {
        (str(T1), Outcome.REFUSED),
        (str(T3), Outcome.REFUSED),
    }
    # a main that moves between the read and the commit: the whole rollback lost, journaled naming it
    before = mains(lake, TABLES)
    heads = published(lake, [T1, T2], "rb3", 42)
    p = held(lake, "after_rollback_batch_intents", "rollback", "--batch", "rb3", "--reason", "bad day")
    wait_pending(lake, MAIN, 2)
    won = published(lake, [T2], "rb3_race", 43)
    _, err = p.communicate(timeout=300)
    assert p.returncode == 1 and "bm.flights lost" in err, err
    assert mains(lake, TABLES) == {**before, T1: heads[T1], T2: won[T2]}
    rows = rows_of(lake, "rb3", Action.ROLLBACK, ref=MAIN)
    assert {(e.table, e.outcome) for e in rows} == {(str(T1), Outcome.REFUSED), (str(T2), Outcome.REFUSED)}
    assert all(e.details.get("lost") == str(T2) for e in rows)


ROLLBACK_NOTHING = (
    "after_rollback_batch_intents",
    "after_rollback_batch_write",
    "in_rollback_batch_transaction",
)
ROLLBACK_ALL = ("after_rollback_batch_commit", "before_rollback_batch_outcome")


def test_history_rollback_of_a_batch_publish_says_so_and_offers_the_batch(
    lake: Lakehouse, monkeypatch: pytest.MonkeyPatch
) -> None:
    # issue 40 item 8: rolling back one table's snapshot that a batch published left the others on the batch
    import streamlit as st
    from helpers import app_test, use_env

    before = mains(lake, TABLES)
    heads = published(lake, [T1, T2], "hx1", 70)
    (undone,) = batches_taken_off(lake, T1, before[T1])  # the core: which batch publishes a rollback undoes
    assert undone.published.batch == "hx1" and undone.allowed
    assert batches_taken_off(lake, T1, heads[T1]) == []  # nothing taken off
    more = {"WAP_CATALOG_URI": lake.settings.catalog_uri} if lake.settings.catalog_uri else {}
    # the console starts its reconcile tick on this lakehouse (a daemon thread that outlives the AppTest): made
    # to wait a day after its first round, so that it never settles the next tests' deliberately pending intents
    use_env(monkeypatch, lake_env(lake.settings, ROOT_, access=True, WAP_RECONCILE_SECONDS="86400", **more))
    st.cache_data.clear()
    at = app_test("pages/history.py")
    at.selectbox(key=next(s.key for s in at.selectbox if s.label == "Timeline of table")).select(
        str(T1)
    ).run()
    next(b for b in at.button if b.key == f"wf_rb_{before[T1]}").click().run()
    warned = re.sub(r"`\s*([^`]*?)\s*`", r"\1", "\n".join(str(w.value) for w in at.warning).replace("\\", ""))
    assert "This undoes the publish of batch hx1, which also published bm.flights" in warned, warned
    assert "keeps the tag batch-hx1" in warned
    scope = at.radio(key=f"wf_rollback_scope_{T1}_{before[T1]}")
    assert scope.value.startswith("The whole batch hx1")  # the batch's own rollback is offered first
    at.text_input(key="wf_rollback_reason").input("bad day")
    next(b for b in at.button if b.label == "Roll back" and "FormSubmitter" in str(b.key)).click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert mains(lake, TABLES) == before  # every table of the batch back, all or none
    assert "Rolled back batch hx1" in "\n".join(str(s.value) for s in at.success).replace("\\", "")


@pytest.mark.parametrize("point", ROLLBACK_NOTHING + ROLLBACK_ALL)
def test_killed_batch_rollback_is_all_or_none_after_reconcile(lake: Lakehouse, point: str) -> None:
    n = (ROLLBACK_NOTHING + ROLLBACK_ALL).index(point)
    name = f"rk{n}"
    before = mains(lake, TABLES)
    heads = published(lake, [T2, T3], name, 50 + n)
    p = cli(cli_env(lake, ROOT_, WAP_FAULT=point), "rollback", "--batch", name, "--reason", "killed")
    assert p.returncode == FAULT_EXIT_CODE, p.stderr[-2000:]
    back = point in ROLLBACK_ALL
    assert mains(lake, TABLES) == (before if back else {**before, T2: heads[T2], T3: heads[T3]})
    assert len([i for i in lake.journal.pending_intents() if i.branch == MAIN]) == 2
    reconcile(lake)
    rows = rows_of(lake, name, Action.ROLLBACK, ref=MAIN)
    assert len(rows) == 2 and {e.user for e in rows} == {ROOT_} and all(e.reconciled for e in rows)
    assert {e.outcome for e in rows} == ({Outcome.ROLLED_BACK} if back else {Outcome.ABANDONED})
    if not back:  # nothing moved: the rollback can run again
        rollback_batch(as_(lake, ROOT_), name, reason="again")
        assert mains(lake, TABLES) == before


# --------------------------------------------------------------------------- rebase --batch


def test_rebase_batch_swaps_every_branch_in_one_commit(lake: Lakehouse) -> None:
    heads = stage(lake, [T1, T2], "rx1", 60, audit=False)
    with pytest.raises(AccessDeniedError, match="may not rebase:"):
        rebase_batch(as_(lake, "vic@corp.test"), "rx1")  # a viewer
    published(lake, [T1], "rx1_main", 61)  # airports' main moves on: the batch must be rebased
    with pytest.raises(RefusedError):
        publish_batch(as_(lake, ROOT_), "rx1")  # not a fast-forward of airports' main (nor audited)
    code, out, err = cli_as(lake, SAM, "rebase", "--batch", "rx1", "--json")
    assert code == 0, err
    res = json.loads(out)
    assert res["outcome"] == "rebased" and res["audit"]["status"] == "passed"
    by = {r["table"]: r for r in res["tables"]}
    assert by[str(T1)]["outcome"] == "rebased" and by[str(T2)]["outcome"] == "up_to_date"
    new = branches(lake, "rx1", (T1, T2))
    assert new[T2] == heads[T2] and new[T1] == by[str(T1)]["new_head"] != heads[T1]
    tbl = lake.catalog.load_table(T1.tuple)
    assert tbl.snapshot_by_id(new[T1]).parent_snapshot_id == tbl.metadata.refs["main"].snapshot_id
    assert not [r for r in tbl.metadata.refs if "__rebase_" in r]  # the temp branch went with the swap
    rows = [e for e in lake.journal.history(branch="rx1", action=Action.REBASE) if e.intent_id]
    assert [(e.table, e.outcome, e.user, e.snapshot_after) for e in rows] == [
        (str(T1), Outcome.REBASED, SAM, new[T1])
    ]
    ids = {r.id for r in lake.spark.table(lake.spark_name(T1, "rx1")).select("id").collect()}
    assert {60, 61} <= ids
    again = rebase_batch(as_(lake, SAM), "rx1")  # nothing left to replay
    assert again.outcome is RebaseOutcome.UP_TO_DATE and again.audit is None
    assert branches(lake, "rx1", (T1, T2)) == new
    assert publish_batch(as_(lake, ANN), "rx1").tag == "batch-rx1"  # now a fast-forward, audited


def test_rebase_batch_is_refused_as_a_whole_when_a_branch_moved(lake: Lakehouse) -> None:
    heads = stage(lake, [T1, T3], "rx2", 70, audit=False)
    published(lake, [T1], "rx2_m1", 71)
    published(lake, [T3], "rx2_m3", 72)  # both mains moved: both tables are replayed
    errors: list[BaseException] = []

    def run() -> None:
        try:
            rebase_batch(as_(lake, SAM), "rx2")
        except Exception as exc:
            errors.append(exc)

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(PAUSE_ENV, "after_rebase_batch_intents=6")
        th = threading.Thread(target=run)
        th.start()
        wait_pending(lake, "rx2", 2)
        moved = append_on(lake, T3, "rx2", 73)  # planes' branch moves while the rebase replays
        th.join(300)
    assert len(errors) == 1 and isinstance(errors[0], ConflictError), errors
    assert "bm.planes lost" in str(errors[0])
    assert branches(lake, "rx2", (T1, T3)) == {
        T1: heads[T1],
        T3: moved,
    }  # airports' branch not swapped either
    for t in (T1, T3):
        assert not [r for r in lake.catalog.load_table(t.tuple).metadata.refs if "__rebase_" in r]
    rows = [e for e in lake.journal.history(branch="rx2", action=Action.REBASE) if e.intent_id]
    assert {(e.table, e.outcome) for e in rows} == {(str(T1), Outcome.REFUSED), (str(T3), Outcome.REFUSED)}
    discard_batch(as_(lake, SAM), "rx2", reason="cleanup")


REBASE_POINTS = (
    "after_rebase_batch_intents",  # before Spark: the killed child never starts a JVM (cheap)
    "after_rebase_batch_temp_branches",  # before Spark too
    "in_rebase_batch_transaction",
    "after_rebase_batch_commit",
)
# The two other points, each a child that starts a JVM and replays (10-14 s a kill), run on SQLite only: the
# state they leave (temporary branches replayed and new metadata files written, nothing swapped; every branch
# swapped, no outcome) is the catalog's metadata, which reconcile reads the same way on both catalogs, and the
# PostgreSQL transaction itself is killed above (in_rebase_batch_transaction, after_rebase_batch_commit).
REBASE_POINTS_SQLITE = ("after_rebase_batch_write", "before_rebase_batch_outcome")
REBASE_SWAPPED = ("after_rebase_batch_commit", "before_rebase_batch_outcome")


def _killed_rebase(lake: Lakehouse, point: str, n: int) -> None:
    """Batch ``rq<n>`` on airports and flights, both mains moved since; ``wap rebase --batch`` killed at
    ``point``; then reconcile: every branch swapped (rebased) or none (abandoned), no temporary branch left."""
    name = f"rq{n}"
    heads = stage(lake, [T1, T2], name, 80 + n, audit=False)
    published(lake, [T1], f"{name}_m1", 90 + n)
    published(lake, [T2], f"{name}_m2", 100 + n)
    p = cli(cli_env(lake, SAM, WAP_FAULT=point), "rebase", "--batch", name)
    assert p.returncode == FAULT_EXIT_CODE, p.stderr[-2000:]
    swapped = point in REBASE_SWAPPED
    now = branches(lake, name, (T1, T2))
    assert (now != {T1: heads[T1], T2: heads[T2]}) is swapped and all(now.values())
    if swapped:
        assert all(now[t] != heads[t] for t in (T1, T2))
    assert len([i for i in lake.journal.pending_intents() if i.branch == name]) == 2
    reconcile(lake)
    rows = [e for e in lake.journal.history(branch=name, action=Action.REBASE) if e.intent_id]
    assert len(rows) == 2 and {e.user for e in rows} == {SAM} and all(e.reconciled for e in rows)
    assert {e.outcome for e in rows} == ({Outcome.REBASED} if swapped else {Outcome.ABANDONED})
    assert branches(lake, name, (T1, T2)) == now  # reconcile moves no batch branch
    for t in (T1, T2):  # no temp branch is left behind either way
        assert not [r for r in lake.catalog.load_table(t.tuple).metadata.refs if "__rebase_" in r]


@pytest.mark.parametrize("point", REBASE_POINTS)
def test_killed_batch_rebase_is_all_or_none_after_reconcile(lake: Lakehouse, point: str) -> None:
    _killed_rebase(lake, point, REBASE_POINTS.index(point))


@pytest.mark.parametrize("lake", ["sqlite"], indirect=True, scope="module")
@pytest.mark.parametrize("point", REBASE_POINTS_SQLITE)
def test_killed_batch_rebase_after_its_replay_is_all_or_none_after_reconcile(
    lake: Lakehouse, point: str
) -> None:
    """The points that need the killed child's Spark (the replay), on SQLite only (see REBASE_POINTS_SQLITE)."""
    _killed_rebase(lake, point, len(REBASE_POINTS) + REBASE_POINTS_SQLITE.index(point))


def test_every_batch_move_point_has_a_kill_case() -> None:
    """Every kill point of a discard, rollback and rebase (one path: a branch is a batch of one) is killed above
    for a two-table batch (tests/test_durability.py kills them for one table too)."""
    killed = (
        DISCARD_NOTHING + DISCARD_ALL + ROLLBACK_NOTHING + ROLLBACK_ALL + REBASE_POINTS + REBASE_POINTS_SQLITE
    )
    declared = [
        p for p in FAULT_POINTS if any(w in p for w in ("discard_batch", "rollback_batch", "rebase_batch"))
    ]
    assert sorted(killed) == sorted(declared)


# --------------------------------------------------------------------------- the REST catalog (SeaweedFS)


@pytest.mark.only_backends("rest-seaweedfs")
def test_batch_discard_rollback_and_rebase_on_a_rest_catalog(backend: Backend, make_lakehouse: Any) -> None:
    """Discard, rollback and rebase of a 2-table batch through the REST catalog's multi-table commit
    (``POST /v1/{prefix}/transactions/commit``, SeaweedFS): tests/test_s3.py runs it in its object-store run
    (``[rest-seaweedfs]``: Spark there has the store's jars, the rebase replays with it); not collected
    elsewhere (the JDBC catalogs are the tests above)."""
    assert backend.name == "rest-seaweedfs"
    lh = make_lakehouse(SUITE)
    root = as_(lh, ROOT_)  # no access file: everyone is admin
    lh.catalog.create_namespace("bm")
    for t in (T1, T2):
        lh.catalog.create_table(t.tuple, schema=ARROW).append(
            pa.table({"id": [1], "name": ["a"]}, schema=ARROW)
        )
    before = mains(lh, [T1, T2])
    # discard: both branches go in one commit, the mains untouched
    stage(lh, [T1, T2], "rd", 2, audit=False)
    assert [t.table for t in discard_batch(root, "rd", reason="rest").tables] == [str(T1), str(T2)]
    assert branches(lh, "rd", (T1, T2)) == {T1: None, T2: None} and mains(lh, [T1, T2]) == before
    assert {(e.table, e.outcome) for e in rows_of(lh, "rd", Action.DISCARD)} == {
        (str(T1), Outcome.DISCARDED),
        (str(T2), Outcome.DISCARDED),
    }
    # rollback: published, then every main back where the batch found it
    heads = published(lh, [T1, T2], "rr", 3)
    assert mains(lh, [T1, T2]) == heads
    res = rollback_batch(root, "rr", reason="rest")
    assert [(t.table, t.main_before, t.main_after) for t in res.tables] == [
        (str(t), heads[t], before[t]) for t in (T1, T2)
    ]
    assert mains(lh, [T1, T2]) == before
    assert {(e.table, e.outcome) for e in rows_of(lh, "rr", Action.ROLLBACK, ref=MAIN)} == {
        (str(T1), Outcome.ROLLED_BACK),
        (str(T2), Outcome.ROLLED_BACK),
    }
    # rebase: airports' main moves on; its rows are replayed there (Spark), both branches swapped in one commit
    heads = stage(lh, [T1, T2], "rx", 4, audit=False)
    lh.catalog.load_table(T1.tuple).append(pa.table({"id": [5], "name": ["m"]}, schema=ARROW))
    moved = mains(lh, [T1])[T1]
    rb = rebase_batch(as_(lh, SAM), "rx")
    assert rb.outcome is RebaseOutcome.REBASED and rb.audit is not None and rb.audit.passed
    assert [(r.table, r.outcome) for r in rb.tables] == [
        (str(T1), RebaseOutcome.REBASED),
        (str(T2), RebaseOutcome.UP_TO_DATE),
    ]
    new = branches(lh, "rx", (T1, T2))
    tbl = lh.catalog.load_table(T1.tuple)
    assert new[T2] == heads[T2] and new[T1] != heads[T1]
    assert tbl.snapshot_by_id(new[T1]).parent_snapshot_id == moved
    assert not [r for r in tbl.metadata.refs if "__rebase_" in r]
    assert sorted(r.id for r in lh.spark.table(lh.spark_name(T1, "rx")).select("id").collect()) == [1, 4, 5]
    rows = [e for e in lh.journal.history(branch="rx", action=Action.REBASE) if e.intent_id]
    assert [(e.table, e.outcome, e.snapshot_after) for e in rows] == [(str(T1), Outcome.REBASED, new[T1])]


# --------------------------------------------------------------------------- one notification per batch


@pytest.fixture
def hook() -> Iterator[Receiver]:
    """A real HTTP receiver of the notifications (tests/test_notify.py's)."""
    r = Receiver()
    yield r
    r.close()


def test_a_batch_discard_and_rollback_send_one_notification_each(tmp_path: Path, hook: Receiver) -> None:
    """Metadata only (PyIceberg tables, no Spark), a real HTTP receiver: every batch move is ONE event naming
    every table of the batch."""
    lh = meta_lakehouse(tmp_path, f"webhooks:\n  - url: {hook.url('/hook')}\n{FAST}")
    root = as_(lh, ROOT_)
    try:
        for table in ("demo.a", "demo.b"):
            pyiceberg_branch(lh, table, "nb")  # main and a branch nb on each
        join(lh, "nb", TableId("demo", "a"), SAM)  # demo.b's open branch nb is adopted
        publish_batch(root, "nb", force=True, reason="no audit here")
        rollback_batch(root, "nb", reason="bad day")
        for table in ("demo.a", "demo.b"):
            tbl = lh.catalog.load_table(table)
            tbl.manage_snapshots().create_branch(tbl.metadata.refs["main"].snapshot_id, "nd").commit()
        join(lh, "nd", TableId("demo", "a"), SAM)
        discard_batch(root, "nd", reason="not needed")
        bodies = [r.json for r in hook.wait_for("/hook", 3)]
        time.sleep(1)  # nothing more comes
        bodies = [r.json for r in hook.on("/hook")]
        assert [(b["event"], b["table"], b["branch"], b["user"]) for b in bodies] == [
            ("published", "demo.a, demo.b", "nb", ROOT_),
            ("rolled_back", "demo.a, demo.b", "nb", ROOT_),
            ("discarded", "demo.a, demo.b", "nd", ROOT_),
        ]
        assert "rolled back, all 2 tables in one commit" in bodies[1]["summary"]
        assert "bad day" in bodies[1]["summary"]
    finally:
        notify.stop_all()
