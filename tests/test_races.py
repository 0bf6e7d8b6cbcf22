"""Two people act on the same branch at once: the journal records only the decision that happened.

Publish and discard of the same branch race, many times, in both orders (each side delayed by a
varying few milliseconds, so every interleaving of their steps comes up), in threads with their
own Lakehouse (their own catalog engine, as separate processes would have) and as two real CLI
processes. After each trial the journal is checked against Iceberg's refs (read raw, no
reconciliation): exactly one success outcome, the one the refs show (main at the branch head:
``published``; main untouched: ``discarded``); the loser, when it got as far as acting, is
journaled ``refused`` with the reason it lost, never with the winner's outcome; History never
shows a published batch as discarded (or a discarded one as published).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from helpers import in_threads, lake_env, write_csv
from sqlalchemy import text

from wap_core import Lakehouse, TableId
from wap_core.exceptions import NotFoundError, RefusedError
from wap_core.faults import PAUSE_ENV
from wap_core.states import Action, Outcome
from wap_core.store.journal import utcnow
from wap_core.values import to_jsonable
from wap_core.workflow.discard import discard
from wap_core.workflow.ingest import ingest
from wap_core.workflow.publish import publish
from wap_core.workflow.reconcile import reconcile

ROOT = Path(__file__).resolve().parent.parent
T = TableId("demo", "people")
HEADER = ["id", "name"]
SUITE = "demo.people:\n  checks:\n    - not_null: [name]\n    - unique: [id]\n"
THREAD_TRIALS = 16
CLI_TRIALS = 4


@pytest.fixture
def lh(make_lakehouse):  # type: ignore[no-untyped-def]
    lh = make_lakehouse(SUITE)
    r = ingest(
        lh, T, [write_csv(lh.settings.home / "seed.csv", HEADER, [(0, "seed")])], create=True, branch="seed"
    )
    assert r.audit.passed
    publish(lh, T, "seed")
    return lh


def _raw_refs(lh: Lakehouse) -> dict[str, int]:
    return {n: r.snapshot_id for n, r in lh.catalog.load_table(T.tuple).metadata.refs.items()}


def _rows(lh: Lakehouse, branch: str) -> list[dict[str, Any]]:
    with lh.catalog.engine.connect() as conn:
        q = text(
            "select action, outcome, reason, user_name, intent_id from wap_journal "
            "where table_name = :t and branch = :b and action in ('publish', 'discard') order by id"
        )
        return [dict(r) for r in conn.execute(q, {"t": str(T), "b": branch}).mappings().all()]


def _staged(lh: Lakehouse, n: int) -> tuple[str, int, int]:
    """A fresh audited branch ``race<n>``: (branch, its head, main's head)."""
    branch = f"race{n}"
    path = write_csv(lh.settings.home / f"{branch}.csv", HEADER, [(n + 1, f"row{n}")])
    r = ingest(lh, T, [path], branch=branch)
    assert r.audit.passed
    refs = _raw_refs(lh)
    return branch, refs[branch], refs["main"]


def _judge(lh: Lakehouse, branch: str, head: int, main_before: int, lost: dict[str, BaseException]) -> str:
    """Check one trial's journal against the refs; returns the winner (``publish`` or ``discard``)."""
    refs = _raw_refs(lh)
    assert branch not in refs, f"the branch survived both: {refs}"
    if refs["main"] == head:
        winner, win_outcome, loser = "publish", Outcome.PUBLISHED, "discard"
    else:
        assert refs["main"] == main_before, (
            f"main moved elsewhere: {refs['main']} (head {head}, before {main_before})"
        )
        winner, win_outcome, loser = "discard", Outcome.DISCARDED, "publish"
    rows = _rows(lh, branch)
    assert [r for r in rows if r["action"] == winner and r["outcome"] == win_outcome] and len(
        [r for r in rows if r["action"] == winner]
    ) == 1, f"{winner} won (refs {refs}) but the journal says {rows}"
    for r in rows:
        if r["action"] == loser:
            assert r["outcome"] == Outcome.REFUSED, (
                f"{loser} lost (main {refs['main']}, head {head}) yet: {rows}"
            )
            assert r["reason"], f"a refusal without its reason: {rows}"
    # the loser's error and its journal row agree: a refusal is journaled, a missing branch is not an action
    exc = lost.get(loser)
    assert exc is not None, f"{loser} lost but did not raise: {rows}"
    loser_rows = [r for r in rows if r["action"] == loser]
    if isinstance(exc, RefusedError):
        assert len(loser_rows) == 1, f"{loser} refused ({exc}) but the journal says {rows}"
    else:
        assert isinstance(exc, NotFoundError), f"{loser} failed with {exc!r}"
        assert loser_rows == [], rows
    assert winner not in lost, f"{winner} won but raised {lost[winner]!r}"
    # History (what the console shows) agrees with the refs
    hist = [
        e
        for e in lh.journal.history(str(T), branch=branch, limit=50)
        if e.action in (Action.PUBLISH, Action.DISCARD)
    ]
    outcomes = {e.outcome for e in hist}
    bad = Outcome.DISCARDED if winner == "publish" else Outcome.PUBLISHED
    assert bad not in outcomes and win_outcome in outcomes, [to_jsonable(e) for e in hist]
    return winner


def test_publish_and_discard_of_one_branch_race_in_threads_and_the_journal_matches_the_refs(lh) -> None:  # type: ignore[no-untyped-def]
    winners: list[str] = []
    refusals = 0
    actors = {"publish": Lakehouse(lh.settings), "discard": Lakehouse(lh.settings)}
    for n in range(THREAD_TRIALS):
        branch, head, main_before = _staged(lh, n)
        # both orders, and every gap between them: who starts first alternates, the other waits 0-45 ms
        first = "publish" if n % 2 == 0 else "discard"
        delay = {first: 0.0, ("discard" if first == "publish" else "publish"): (n // 2) * 0.006}
        barrier = threading.Barrier(2)
        lost: dict[str, BaseException] = {}

        def go(
            name: str,
            branch: str = branch,
            delay: dict[str, float] = delay,
            barrier: threading.Barrier = barrier,
            lost: dict[str, BaseException] = lost,
        ) -> None:
            actor = actors[name]
            barrier.wait()
            time.sleep(delay[name])
            try:
                if name == "publish":
                    publish(actor, T, branch, user="pat")
                else:
                    discard(actor, T, branch, reason="race", user="dan")
            except (RefusedError, NotFoundError) as exc:
                lost[name] = exc

        in_threads(go, [("publish",), ("discard",)], timeout=120)
        winners.append(_judge(lh, branch, head, main_before, lost))
        refusals += sum(isinstance(e, RefusedError) for e in lost.values())
    # the trials really raced: each side won some, and some losers got as far as acting
    assert {"publish", "discard"} <= set(winners), winners
    assert refusals > 0, winners


def _cli(lh: Lakehouse, user: str, *args: str) -> subprocess.Popen[str]:
    env = {
        **os.environ,
        **lake_env(lh.settings, user, WAP_SPARK_DRIVER_MEMORY="1g"),
        "PYSPARK_PYTHON": sys.executable,
    }
    return subprocess.Popen(
        [sys.executable, "-m", "wap_core", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_publish_and_discard_of_one_branch_race_as_two_cli_processes(lh) -> None:  # type: ignore[no-untyped-def]
    for n in range(CLI_TRIALS):
        branch, head, main_before = _staged(lh, 100 + n)
        order = ["publish", "discard"] if n % 2 == 0 else ["discard", "publish"]
        procs = {}
        for name in order:
            args = (
                ["publish", str(T), branch]
                if name == "publish"
                else ["discard", str(T), branch, "--reason", "race"]
            )
            procs[name] = _cli(lh, "pat" if name == "publish" else "dan", *args)
        codes = {}
        for name, p in procs.items():
            out, err = p.communicate(timeout=300)
            codes[name] = (p.returncode, out, err)
        refs = _raw_refs(lh)
        winner = "publish" if refs["main"] == head else "discard"
        loser = "discard" if winner == "publish" else "publish"
        assert codes[winner][0] == 0, codes[winner]
        assert codes[loser][0] in (1, 2), codes[loser]
        # exit 1: refused (journaled); exit 2: the branch was already gone (nothing attempted, nothing journaled)
        lost: dict[str, BaseException] = {
            loser: RefusedError(codes[loser][2]) if codes[loser][0] == 1 else NotFoundError(codes[loser][2])
        }
        assert _judge(lh, branch, head, main_before, lost) == winner


# ------------------------------------------------------------------ the losing window, made certain
# The loser has read the branch (its precondition held) and not announced its intent yet when the
# winner runs to its end: ``WAP_PAUSE`` holds it there (wap_core.faults.pause_point).


def _held(
    monkeypatch: pytest.MonkeyPatch, point: str, seconds: float, act: Any
) -> tuple[threading.Thread, dict[str, BaseException]]:
    monkeypatch.setenv(PAUSE_ENV, f"{point}={seconds}")
    lost: dict[str, BaseException] = {}

    def go() -> None:
        try:
            act()
        except (RefusedError, NotFoundError) as exc:
            lost["it"] = exc

    t = threading.Thread(target=go)
    t.start()
    time.sleep(1.0)  # it has read the branch and sits at the pause point
    monkeypatch.delenv(PAUSE_ENV)  # the winner is not held
    return t, lost


@pytest.mark.parametrize("winner", ["publish", "discard"])
def test_the_loser_held_between_its_read_and_its_intent_is_journaled_refused(
    lh, monkeypatch, winner: str
) -> None:  # type: ignore[no-untyped-def]
    branch, head, main_before = _staged(lh, 200)
    loser_lh = Lakehouse(lh.settings)
    if winner == "publish":
        t, lost = _held(
            monkeypatch,
            "before_discard_batch_intents",
            4.0,
            lambda: discard(loser_lh, T, branch, reason="race", user="dan"),
        )
        publish(lh, T, branch, user="pat")
    else:
        t, lost = _held(
            monkeypatch, "before_publish_batch_intents", 4.0, lambda: publish(loser_lh, T, branch, user="pat")
        )
        discard(lh, T, branch, reason="race", user="dan")
    t.join(timeout=60)
    exc = lost.get("it")
    assert isinstance(exc, RefusedError) and exc.reason_code == "conflict", exc
    loser = "discard" if winner == "publish" else "publish"
    assert _judge(lh, branch, head, main_before, {loser: exc}) == winner
    (row,) = [r for r in _rows(lh, branch) if r["action"] == loser]
    assert "lost a race" in row["reason"], row


def test_a_loser_killed_after_its_intent_is_reconciled_abandoned_not_as_the_winners_outcome(lh) -> None:  # type: ignore[no-untyped-def]
    """A discard read the branch, the publish won, then the discard announced its intent and died."""
    branch, head, _ = _staged(lh, 300)
    publish(lh, T, branch, user="pat")
    intent = lh.journal.begin_intent(
        user="dan", action=Action.DISCARD, table=str(T), branch=branch, expected_before=head, reason="race"
    )
    lh.journal.release(intent)
    with lh.catalog.engine.begin() as conn:  # its process is gone (another host, heartbeat long stale)
        conn.execute(
            text("update wap_intents set owner = :o, heartbeat_at = :h where id = :i"),
            {"o": "elsewhere|4242|0|abcd1234", "h": utcnow() - timedelta(hours=1), "i": intent.id},
        )
    (entry,) = reconcile(lh, T)
    assert (
        entry.outcome == Outcome.ABANDONED and "already published" in entry.details["reconciled_because"]
    ), entry
    rows = _rows(lh, branch)
    assert [(r["action"], r["outcome"]) for r in rows] == [
        ("publish", "published"),
        ("discard", "abandoned"),
    ], rows


def test_two_discards_of_one_branch_record_one_discard_and_one_refusal(lh, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    branch, _, main_before = _staged(lh, 400)
    loser_lh = Lakehouse(lh.settings)
    t, lost = _held(
        monkeypatch,
        "before_discard_batch_intents",
        4.0,
        lambda: discard(loser_lh, T, branch, reason="late", user="dan"),
    )
    discard(lh, T, branch, reason="first", user="pat")
    t.join(timeout=60)
    exc = lost.get("it")
    assert isinstance(exc, RefusedError) and exc.reason_code == "conflict", exc
    assert _raw_refs(lh)["main"] == main_before and branch not in _raw_refs(lh)
    rows = [(r["user_name"], r["outcome"]) for r in _rows(lh, branch)]
    assert rows == [("pat", "discarded"), ("dan", "refused")], rows
