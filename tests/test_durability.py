"""A journal that never loses a decision: kill the real CLI at every commit point, then look.

Each case runs ``python -m wap_core ...`` in a subprocess with ``WAP_FAULT=<point>``, so the
process really dies there (``os._exit``, like ``kill -9``). The test process then reads the
refs with PyIceberg (raw loads, no reconciliation) and the journal with SQL: main and every
staged batch are either untouched or fully moved, and exactly one intent is pending. The next
command (``branches`` / ``history`` through the CLI, in-process) reconciles it: exactly one
outcome row, under the crashed process's user, reason and intent time, or ``abandoned``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from helpers import cli_process, in_threads, lake_env, write_csv
from sqlalchemy import text

from wap_core import Lakehouse, TableId
from wap_core.cli import main
from wap_core.faults import FAULT_EXIT_CODE, FAULT_POINTS, fault_point
from wap_core.lake.catalog import lineage
from wap_core.store.journal import _machine, utcnow
from wap_core.workflow.discard import discard
from wap_core.workflow.ingest import ingest
from wap_core.workflow.publish import publish
from wap_core.workflow.readiness import publish_readiness
from wap_core.workflow.rebase import rebase
from wap_core.workflow.reconcile import reconcile
from wap_core.workflow.status import list_branches

T = TableId("demo", "people")
HEADER = ["id", "name"]
SUITE = "demo.people:\n  checks:\n    - not_null: [name]\n    - unique: [id]\n"
CRASH_USER = "crash-user"


# --------------------------------------------------------------------------- helpers


def raw_refs(lh: Lakehouse) -> dict[str, int]:
    """Refs straight from the catalog (``lh.table`` would reconcile first)."""
    return {n: r.snapshot_id for n, r in lh.catalog.load_table(T.tuple).metadata.refs.items()}


def sql(lh: Lakehouse, query: str, **params: Any) -> list[dict[str, Any]]:
    with lh.catalog.engine.connect() as conn:
        return [dict(r) for r in conn.execute(text(query), params).mappings().all()]


def cli_env(lh: Lakehouse, user: str) -> dict[str, str]:
    return lake_env(lh.settings, user, WAP_SPARK_DRIVER_MEMORY="1g")


def run_killed(lh: Lakehouse, point: str, *args: str) -> None:
    env = {**os.environ, **cli_env(lh, CRASH_USER), "WAP_FAULT": point, "PYSPARK_PYTHON": sys.executable}
    p = cli_process(env, *args, timeout=600)
    assert p.returncode == FAULT_EXIT_CODE, (
        f"exit {p.returncode}, expected a kill at {point}\n{p.stderr[-3000:]}"
    )


def seed(lh: Lakehouse, tmp_path: Path) -> int:
    r = ingest(
        lh,
        T,
        [write_csv(tmp_path / "seed.csv", HEADER, [(1, "ann"), (2, "bob")])],
        create=True,
        branch="seed",
    )
    publish(lh, T, "seed")
    return r.snapshot_id


@dataclass(frozen=True)
class Case:
    point: str
    args: Callable[[Path], list[str]]  # CLI args of the killed command
    setup: Callable[[Lakehouse, Path], dict[str, Any]]  # in-process, same lakehouse
    outcome: str  # the one outcome row reconciliation records
    done: bool  # the ref moved (intent done) or not (abandoned)
    check_crash: Callable[[dict[str, int], dict[str, Any]], None]  # raw refs right after the kill
    check_after: Callable[[Lakehouse, dict[str, Any], Path], None]  # after reconciliation
    next_command: tuple[str, ...] = ("branches", "--json")
    reason: str | None = None


def _setup_branch(branch: str, rows: list[tuple[object, ...]]) -> Callable[[Lakehouse, Path], dict[str, Any]]:
    def setup(lh: Lakehouse, tmp_path: Path) -> dict[str, Any]:
        main_head = seed(lh, tmp_path)
        r = ingest(lh, T, [write_csv(tmp_path / f"{branch}.csv", HEADER, rows)], branch=branch)
        return {"main": main_head, "head": r.snapshot_id, "passed": r.audit.passed}

    return setup


def _setup_rebase(lh: Lakehouse, tmp_path: Path) -> dict[str, Any]:
    seed(lh, tmp_path)
    ingest(lh, T, [write_csv(tmp_path / "a.csv", HEADER, [(10, "amy")])], branch="a")
    b = ingest(lh, T, [write_csv(tmp_path / "b.csv", HEADER, [(20, "ben"), (21, "bea")])], branch="b")
    publish(lh, T, "a")
    return {"main": raw_refs(lh)["main"], "head": b.snapshot_id}


def _setup_seed(lh: Lakehouse, tmp_path: Path) -> dict[str, Any]:
    return {"main": seed(lh, tmp_path)}


def _ingest_args(tmp_path: Path) -> list[str]:
    return [
        "ingest",
        "demo.people",
        write_csv(tmp_path / "new.csv", HEADER, [(7, "gus"), (8, "hal")]),
        "--branch",
        "incoming",
    ]


# ----- checks right after the kill (raw refs) and after reconciliation


def _no_branch(name: str) -> Callable[[dict[str, int], dict[str, Any]], None]:
    def check(refs: dict[str, int], ctx: dict[str, Any]) -> None:
        assert refs["main"] == ctx["main"] and name not in refs

    return check


def _incoming_empty(refs: dict[str, int], ctx: dict[str, Any]) -> None:
    assert refs == {"main": ctx["main"], "incoming": ctx["main"]}  # created at main, nothing written


def _incoming_written(refs: dict[str, int], ctx: dict[str, Any]) -> None:
    assert refs["main"] == ctx["main"] and refs["incoming"] != ctx["main"]


def _untouched(branch: str) -> Callable[[dict[str, int], dict[str, Any]], None]:
    def check(refs: dict[str, int], ctx: dict[str, Any]) -> None:
        assert refs["main"] == ctx["main"] and refs[branch] == ctx["head"]
        assert not [n for n in refs if "__rebase_" in n]

    return check


def _published(refs: dict[str, int], ctx: dict[str, Any]) -> None:
    assert refs == {"main": ctx["head"]}  # main moved and the branch went in one commit


def _rebasing(written: bool) -> Callable[[dict[str, int], dict[str, Any]], None]:
    def check(refs: dict[str, int], ctx: dict[str, Any]) -> None:
        assert refs["main"] == ctx["main"] and refs["b"] == ctx["head"]  # the branch is intact until the swap
        temps = [n for n in refs if n.startswith("b__rebase_")]
        assert len(temps) == 1
        assert (refs[temps[0]] != ctx["main"]) is written

    return check


def _rebased(refs: dict[str, int], ctx: dict[str, Any]) -> None:
    assert (
        refs["main"] == ctx["main"] and refs["b"] != ctx["head"] and not [n for n in refs if "__rebase_" in n]
    )


def _after_nothing(lh: Lakehouse, ctx: dict[str, Any], tmp_path: Path) -> None:
    assert raw_refs(lh) == {"main": ctx["main"]}


def _after_incomplete(lh: Lakehouse, ctx: dict[str, Any], tmp_path: Path) -> None:
    rows = _cli(lh, "branches", "--json")
    assert [(r["branch"], r["status"]) for r in rows] == [("incoming", "incomplete")]
    assert [r["branch"] for r in _cli(lh, "branches", "--status", "incomplete", "--json")] == ["incoming"]
    _cli(
        lh, "discard", "demo.people", "incoming", json_out=False
    )  # no reason needed; still journaled with who
    assert raw_refs(lh) == {"main": ctx["main"]}
    d = lh.journal.history("demo.people", action="discard")[0]
    assert (d.branch, d.outcome, d.user) == ("incoming", "discarded", "next-user")


def _after_written(lh: Lakehouse, ctx: dict[str, Any], tmp_path: Path) -> None:
    [row] = _cli(lh, "branches", "--json")
    assert (row["branch"], row["status"], row["rows_added"]) == ("incoming", "not_audited", 2)
    assert {r.id for r in lh.spark.table(lh.spark_name(T, "incoming")).select("id").collect()} == {1, 2, 7, 8}


def _after_publish_abandoned(lh: Lakehouse, ctx: dict[str, Any], tmp_path: Path) -> None:
    assert raw_refs(lh) == {"main": ctx["main"], "ready": ctx["head"]}
    assert publish(lh, T, "ready").outcome == "published"  # the branch is free again
    assert len(_outcomes(lh, "publish", "ready", "published")) == 1


def _after_published(lh: Lakehouse, ctx: dict[str, Any], tmp_path: Path) -> None:
    again = publish(lh, T, ctx.get("branch", "ready"))  # the idempotent re-run adds nothing
    assert again.outcome == "already_published"
    assert len(_outcomes(lh, "publish", ctx.get("branch", "ready"), None)) == 1


def _after_discard_abandoned(lh: Lakehouse, ctx: dict[str, Any], tmp_path: Path) -> None:
    assert raw_refs(lh) == {"main": ctx["main"], "junk": ctx["head"]}
    assert [b.branch for b in list_branches(lh)] == ["junk"]


def _after_rebase_abandoned(lh: Lakehouse, ctx: dict[str, Any], tmp_path: Path) -> None:
    assert raw_refs(lh) == {"main": ctx["main"], "b": ctx["head"]}  # reconciliation removed the temp branch
    assert [b.branch for b in list_branches(lh)] == ["b"]


def _after_rebase_abandoned_rerun(lh: Lakehouse, ctx: dict[str, Any], tmp_path: Path) -> None:
    _after_rebase_abandoned(lh, ctx, tmp_path)
    rb = rebase(lh, T, "b")
    assert rb.outcome == "rebased" and lineage(lh.table(T), "b").fork == ctx["main"]
    assert set(raw_refs(lh)) == {"main", "b"}


def _after_rebased(lh: Lakehouse, ctx: dict[str, Any], tmp_path: Path) -> None:
    [row] = list_branches(lh)
    assert (row.branch, row.status, row.fork_snapshot_id, row.main_moved) == (
        "b",
        "stale",
        ctx["main"],
        False,
    )
    assert {r.id for r in lh.spark.table(lh.spark_name(T, "b")).select("id").collect()} == {1, 2, 10, 20, 21}


HISTORY, BRANCHES = ("history", "--json"), ("branches", "--json")


def _argv(*args: str) -> Callable[[Path], list[str]]:
    return lambda p: list(args)


def _kills(
    args: Callable[[Path], list[str]],
    setup: Callable[[Lakehouse, Path], dict[str, Any]],
    *points: tuple[Any, ...],
    reason: str | None = None,
) -> list[Case]:
    """One command (``args``, on what ``setup`` made) killed at each of its commit points, a row each: (point,
    outcome, intent done, the check right after the kill, the check after reconciliation, the next command)."""
    return [Case(p[0], args, setup, *p[1:], reason=reason) for p in points]


CASES = [
    *_kills(
        _ingest_args,
        _setup_seed,
        ("after_ingest_intent", "abandoned", False, _no_branch("incoming"), _after_nothing, HISTORY),
        ("after_create_branch", "incomplete", False, _incoming_empty, _after_incomplete, BRANCHES),
        ("after_ingest_commit", "written", True, _incoming_written, _after_written, HISTORY),
    ),
    *_kills(
        _argv("publish", "demo.people", "ready"),
        _setup_branch("ready", [(3, "cy")]),
        # a branch is a publish's batch of one: the batch path's points (a batch's own: test_batch_publish.py)
        (
            "after_publish_batch_intents",
            "abandoned",
            False,
            _untouched("ready"),
            _after_publish_abandoned,
            BRANCHES,
        ),
        (
            "after_publish_batch_write",
            "abandoned",
            False,
            _untouched("ready"),
            _after_publish_abandoned,
            HISTORY,
        ),
        (
            "in_publish_batch_transaction",
            "abandoned",
            False,
            _untouched("ready"),
            _after_publish_abandoned,
            BRANCHES,
        ),
        ("after_publish_batch_commit", "published", True, _published, _after_published, HISTORY),
        ("before_publish_batch_outcome", "published", True, _published, _after_published, BRANCHES),
    ),
    *_kills(
        _argv("rebase", "demo.people", "b"),
        _setup_rebase,
        # a branch is a rebase's batch of one: the batch path's points (a batch's own: test_batch_moves.py)
        (
            "after_rebase_batch_intents",
            "abandoned",
            False,
            _untouched("b"),
            _after_rebase_abandoned,
            BRANCHES,
        ),
        (
            "after_rebase_batch_temp_branches",
            "abandoned",
            False,
            _rebasing(False),
            _after_rebase_abandoned,
            HISTORY,
        ),
        (
            "after_rebase_batch_write",
            "abandoned",
            False,
            _rebasing(True),
            _after_rebase_abandoned_rerun,
            BRANCHES,
        ),
        (
            "in_rebase_batch_transaction",
            "abandoned",
            False,
            _rebasing(True),
            _after_rebase_abandoned,
            HISTORY,
        ),
        ("after_rebase_batch_commit", "rebased", True, _rebased, _after_rebased, BRANCHES),
        ("before_rebase_batch_outcome", "rebased", True, _rebased, _after_rebased, HISTORY),
    ),
    *_kills(
        _argv("discard", "demo.people", "junk", "--reason", "duplicate ids"),
        _setup_branch("junk", [(1, "dup")]),
        # a branch is a discard's batch of one: the batch path's points (a batch's own: test_batch_moves.py)
        (
            "after_discard_batch_intents",
            "abandoned",
            False,
            _untouched("junk"),
            _after_discard_abandoned,
            HISTORY,
        ),
        (
            "after_discard_batch_write",
            "abandoned",
            False,
            _untouched("junk"),
            _after_discard_abandoned,
            BRANCHES,
        ),
        (
            "in_discard_batch_transaction",
            "abandoned",
            False,
            _untouched("junk"),
            _after_discard_abandoned,
            HISTORY,
        ),
        ("after_discard_batch_commit", "discarded", True, _no_branch("junk"), _after_nothing, BRANCHES),
        ("before_discard_batch_outcome", "discarded", True, _no_branch("junk"), _after_nothing, HISTORY),
        reason="duplicate ids",
    ),
]


def test_every_fault_point_has_a_kill_case() -> None:
    # the rollback and reopen points are killed in tests/test_workflow.py
    # (test_rollback_killed_at_its_fault_points_is_reconciled, test_reopen_killed_at_its_fault_points_is_reconciled),
    # a two-table publish also in tests/test_batch_publish.py (test_killed_batch_publish_is_all_or_none_after_reconcile),
    # quarantine in tests/test_quarantine.py (test_kill_at_each_point_then_reconcile), a two-table batch's discard,
    # rollback and rebase in tests/test_batch_moves.py (test_killed_batch_discard_is_all_or_none_after_reconcile,
    # test_killed_batch_rollback_is_all_or_none_after_reconcile, test_killed_batch_rebase_is_all_or_none_after_reconcile),
    # a replay's mark in tests/test_quarantine_replay.py (test_a_replay_killed_at_its_mark_is_reconciled),
    # a job's open in tests/test_workflow.py (test_branch_open_killed_at_its_fault_points_is_reconciled)
    elsewhere = (
        "rollback",
        "reopen",
        "_open_",
        "quarantine",
        "replay_mark",
    )
    assert sorted(c.point for c in CASES) == sorted(
        p for p in FAULT_POINTS if not any(w in p for w in elsewhere)
    )
    with pytest.raises(ValueError):
        fault_point("after_a_typo")


@pytest.fixture
def lh(make_lakehouse, monkeypatch):  # type: ignore[no-untyped-def]
    lh = make_lakehouse(SUITE)
    for k, v in cli_env(lh, "next-user").items():
        monkeypatch.setenv(k, v)
    return lh


def _cli(lh: Lakehouse, *args: str, json_out: bool = True) -> Any:
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = main(list(args))
    assert code == 0, (args, code)
    return json.loads(buf.getvalue()) if json_out else buf.getvalue()


def _outcomes(lh: Lakehouse, action: str, branch: str, outcome: str | None) -> list[dict[str, Any]]:
    q = "select * from wap_journal where action = :a and branch = :b" + (
        " and outcome = :o" if outcome else ""
    )
    return sql(lh, q, a=action, b=branch, o=outcome)


def _check_killed_then_reconciled(lh: Lakehouse, case: Case, tmp_path: Path, ctx: dict[str, Any]) -> None:
    run_killed(lh, case.point, *case.args(tmp_path))
    # right after the kill: refs are whole (untouched or fully moved), one pending intent, no outcome yet
    case.check_crash(raw_refs(lh), ctx)
    [intent] = sql(lh, "select * from wap_intents where status = 'pending'")
    assert (intent["user_name"], intent["reason"]) == (CRASH_USER, case.reason or intent["reason"])
    assert sql(lh, "select * from wap_journal where intent_id = :i", i=intent["id"]) == []
    # the next command (a new Lakehouse, like a new process) reconciles before it reads
    listing = _cli(lh, *case.next_command)
    if case.next_command[0] == "branches":
        assert all("__rebase_" not in r["branch"] for r in listing)
    [row] = sql(lh, "select * from wap_journal where intent_id = :i", i=intent["id"])
    [after] = sql(lh, "select * from wap_intents where id = :i", i=intent["id"])
    assert after["status"] == ("done" if case.done else "abandoned") and after["lock_key"] is None
    assert (row["action"], row["outcome"], row["user_name"], bool(row["reconciled"])) == (
        intent["action"],
        case.outcome,
        CRASH_USER,
        True,
    )
    assert (
        row["reason"] == intent["reason"] and row["at"] == intent["at"]
    )  # original reason and time of intent
    assert sql(lh, "select * from wap_intents where status = 'pending'") == []
    if case.next_command[0] == "history":
        assert any(
            h["intent_id"] == intent["id"] and h["reconciled"] and h["user"] == CRASH_USER for h in listing
        )
    case.check_after(lh, ctx, tmp_path)
    assert (
        _cli(lh, "history", "--json")
        and len(sql(lh, "select * from wap_journal where intent_id = :i", i=intent["id"])) == 1
    )


@pytest.mark.parametrize("case", CASES, ids=[c.point for c in CASES])
def test_killed_at_a_commit_point_nothing_is_half_done_and_the_journal_knows(
    lh, tmp_path: Path, case: Case
) -> None:  # type: ignore[no-untyped-def]
    ctx = case.setup(lh, tmp_path)
    _check_killed_then_reconciled(lh, case, tmp_path, ctx)


def test_a_forced_publish_killed_after_its_commit_is_journaled_as_forced_with_its_reason(
    lh, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    ctx = {**_setup_branch("bad", [(3, None)])(lh, tmp_path), "branch": "bad"}
    assert not ctx["passed"]
    reason = "owner accepts the null name"
    case = Case(
        "after_publish_batch_commit",
        lambda p: ["publish", "demo.people", "bad", "--force", "--reason", reason],
        lambda lh, p: ctx,
        "forced",
        True,
        _published,
        _after_published,
        ("publish", "demo.people", "bad", "--json"),
        reason=reason,
    )  # the re-run itself reconciles first
    _check_killed_then_reconciled(lh, case, tmp_path, ctx)
    [row] = _outcomes(lh, "publish", "bad", "forced")
    assert json.loads(row["details"])["refusal_overridden"] == "audit_failed"


# --------------------------------------------------------------------------- the rule, in-process (no subprocess)


def _as_foreign(lh: Lakehouse, intent_id: int, owner: str, beat_age_s: float = 0.0) -> None:
    """Make an intent look like another process's (the test cannot kill itself)."""
    with lh.catalog.engine.begin() as conn:
        conn.execute(
            text("update wap_intents set owner = :o, heartbeat_at = :h where id = :i"),
            {"o": owner, "h": utcnow() - timedelta(seconds=beat_age_s), "i": intent_id},
        )


def _foreign_intent(lh: Lakehouse, owner: str, beat_age_s: float = 0.0, **intent: Any) -> Any:
    """A pending intent of far-user on demo.people (``begin_intent(**intent)``), released by this process and
    made to look like ``owner``'s (``_as_foreign``)."""
    began = lh.journal.begin_intent(user="far-user", table="demo.people", **intent)
    lh.journal.release(began)
    _as_foreign(lh, began.id, owner, beat_age_s)
    return began


def test_pending_intents_of_live_processes_stay_pending_until_dead_or_stale(lh, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    ctx = _setup_branch("junk", [(3, "cy")])(lh, tmp_path)
    # another host, fresh heartbeat, precondition holds: in flight elsewhere, left alone
    intent = _foreign_intent(
        lh,
        "elsewhere|4242|0|abcd1234",
        action="discard",
        branch="junk",
        expected_before=ctx["head"],
        reason="r",
    )
    assert reconcile(lh, T) == [] and lh.journal.intent(intent.id).status == "pending"
    # this host, a live process (our parent) that is not us: still pending
    _as_foreign(lh, intent.id, f"{_machine()}|{os.getppid()}|0|abcd1234")
    assert reconcile(lh, T) == [] and lh.journal.intent(intent.id).status == "pending"
    # a busy branch refuses other actions, journaled
    with pytest.raises(Exception, match="busy: a discard by far-user"):
        discard(lh, T, "junk")
    # this host, a dead pid: abandoned at once
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    _as_foreign(lh, intent.id, f"{_machine()}|{dead.pid}|0|abcd1234")
    [entry] = reconcile(lh, T)
    assert (entry.outcome, entry.user, entry.reason, entry.reconciled) == ("abandoned", "far-user", "r", True)
    # another host whose heartbeat went stale: abandoned
    _foreign_intent(
        lh, "elsewhere|4242|0|abcd1234", 3600, action="discard", branch="junk", expected_before=ctx["head"]
    )
    assert [e.outcome for e in reconcile(lh, T)] == ["abandoned"]
    assert raw_refs(lh)["junk"] == ctx["head"]


def test_a_landed_move_is_recorded_at_once_even_while_its_process_lives_and_only_once(
    lh, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """Several reconcilers (separate engines, as separate processes would have) race: one outcome row."""
    ctx = _setup_branch("ready", [(3, "cy")])(lh, tmp_path)
    intent = _foreign_intent(
        lh,
        "elsewhere|4242|0|abcd1234",  # alive as far as anyone can tell
        action="publish",
        branch="ready",
        expected_before=ctx["main"],
        expected_after=ctx["head"],
        reason="go",
        details={"forced": False},
    )
    lh.catalog.load_table(T.tuple).manage_snapshots().create_branch(ctx["head"], "main").remove_branch(
        "ready"
    ).commit()
    readers = [Lakehouse(lh.settings) for _ in range(4)]
    barrier = threading.Barrier(len(readers))
    got: list[object] = []

    def go(reader: Lakehouse) -> None:
        barrier.wait()
        try:
            got.extend(reconcile(reader, T))
        except Exception as exc:
            got.append(exc)

    in_threads(go, [(r,) for r in readers])
    assert len(got) == 1 and getattr(got[0], "outcome", None) == "published", got
    rows = sql(lh, "select * from wap_journal where intent_id = :i", i=intent.id)
    assert len(rows) == 1 and rows[0]["user_name"] == "far-user" and rows[0]["reason"] == "go"
    # the owner's own late outcome is a no-op
    assert (
        lh.journal.resolve_intent(intent, outcome="published", done=True, snapshot_after=ctx["head"]) is None
    )


def test_the_next_rebase_removes_temp_branches_left_behind(lh, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    ctx = _setup_rebase(lh, tmp_path)
    tbl = lh.catalog.load_table(T.tuple)
    tbl.manage_snapshots().create_branch(
        ctx["main"], "b__rebase_deadbeef"
    ).commit()  # left by a crash long ago
    assert "b__rebase_deadbeef" in raw_refs(lh)
    assert [b.branch for b in list_branches(lh)] == ["b"]  # never listed as an open branch
    assert _cli(lh, "tables", "--json")[0]["open_branches"] == 1
    with pytest.raises(Exception, match="does not exist"):
        publish(lh, T, "b__rebase_deadbeef")
    with pytest.raises(Exception, match="reserved"):
        ingest(lh, T, [write_csv(tmp_path / "x.csv", HEADER, [(5, "eve")])], branch="x__rebase_0badc0de")
    assert rebase(lh, T, "b").outcome == "rebased"
    assert set(raw_refs(lh)) == {"main", "b"}


def test_publish_found_in_main_history_without_a_journaled_publish_is_recorded_once(
    lh, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    ctx = _setup_branch("quick", [(3, "cy")])(lh, tmp_path)
    lh.catalog.load_table(T.tuple).manage_snapshots().create_branch(ctx["head"], "main").remove_branch(
        "quick"
    ).commit()
    assert publish(lh, T, "quick").outcome == "already_published"
    assert publish(lh, T, "quick").outcome == "already_published"
    [row] = _outcomes(lh, "publish", "quick", None)
    assert (row["outcome"], row["user_name"], row["snapshot_after"]) == ("published", "unknown", ctx["head"])
    assert "who and why are unknown" in row["reason"]


def test_heartbeat_refreshes_running_intents_only_and_pid_reuse_is_not_life(tmp_path: Path) -> None:
    import socket

    from sqlalchemy import create_engine

    from wap_core.store import journal as jr

    j = jr.Journal(create_engine(f"sqlite:///{tmp_path / 'j.db'}"))
    running = j.begin_intent(user="u", action="discard", table="demo.people", branch="a")
    ended = j.begin_intent(user="u", action="discard", table="demo.people", branch="b")
    j.release(ended)
    old = utcnow() - timedelta(hours=1)
    with j.engine.begin() as conn:
        conn.execute(text("update wap_intents set heartbeat_at = :h"), {"h": old})
    jr._in_flight.beat_once()
    beats = {i.branch: i.heartbeat_at for i in j.pending_intents()}
    assert beats["a"] is not None and beats["a"] > old + timedelta(minutes=59) and beats["b"] == old
    assert j.in_flight_here(running) and not j.in_flight_here(ended)
    assert jr.owner_alive(jr.process_owner()) is True
    assert jr.owner_alive(f"{jr._machine()}|{os.getpid()}|0|00000000") is False  # our pid, earlier process
    assert (
        jr.owner_alive(f"{socket.gethostname()}/1|{os.getppid()}|0|00000000") is None
    )  # another pid namespace
    assert jr.owner_alive("elsewhere|1|0|00000000") is None  # another host: only the heartbeat can tell
    j.release(running)


# --------------------------------------------------------------------------- recovery is a step, reads are pure


def _store_rows(lh: Lakehouse) -> tuple[list[dict[str, Any]], ...]:
    return tuple(
        sql(lh, f"select * from {t} order by id") for t in ("wap_journal", "wap_intents", "wap_outbox")
    )


def test_reads_neither_write_nor_notify_and_reconcile_is_the_one_step_that_repairs(
    lh, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """A rebase killed after its temporary branch leaves a pending intent and a stray ref. Every read
    (table, journal, branches, overviews, readiness) leaves the store, the refs and the outbox as they
    were; the explicit step (``reconcile``, run by the CLI's start, the console's tick and every ref-moving
    action) records the outcome and removes the stray branch."""
    ctx = _setup_rebase(lh, tmp_path)
    (lh.settings.home / "notify.yml").write_text(
        "webhooks:\n  - url: http://127.0.0.1:9/hook\n    events: [refused, discarded, published]\n"
    )
    run_killed(lh, "after_rebase_batch_temp_branches", "rebase", "demo.people", "b")
    fresh = Lakehouse(lh.settings)  # a new process's view
    before, refs_before = _store_rows(fresh), raw_refs(fresh)
    assert [i["status"] for i in before[1]].count("pending") == 1
    assert any("__rebase_" in n for n in refs_before)
    fresh.table(T)
    fresh.journal.history()
    fresh.journal.history(str(T), branch="b")
    list_branches(fresh)
    list_branches(fresh, T)
    publish_readiness(fresh, T, "b")
    assert (_store_rows(fresh), raw_refs(fresh)) == (before, refs_before)  # nothing written, nothing notified
    [entry] = reconcile(fresh)
    assert (entry.action, entry.outcome, entry.reconciled) == ("rebase", "abandoned", True)
    assert not any("__rebase_" in n for n in raw_refs(fresh)) and raw_refs(fresh)["b"] == ctx["head"]
    assert reconcile(fresh) == []  # idempotent
