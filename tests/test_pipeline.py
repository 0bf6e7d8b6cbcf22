"""wap_core.pipeline on real Spark + Iceberg: the steps a pipeline calls and the wait for a person.

The orchestrators' own tests (Airflow, Prefect, DBOS) run in their venvs: tests/test_pipelines.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from helpers import lake_env, write_csv

from wap_core import Lakehouse, TableId
from wap_core import pipeline as pl
from wap_core.exceptions import AuditFailedError, BatchRejectedError, RefusedError, ValidationError
from wap_core.values import to_jsonable
from wap_core.workflow.discard import discard
from wap_core.workflow.review import approve, request_changes

ACCESS = """\
roles:
  viewer: ["*"]
  steward: [sam@corp.test]
  approver: [etl-bot, ann@corp.test]
  admin: [root]
policies:
  "*": {approvals: 0}
  demo.reviewed: {approvals: 1, author_cannot_approve: true}
"""
CHECKS = (
    "demo.orders:\n  checks:\n    - not_null: [name]\ndemo.reviewed:\n  checks:\n    - not_null: [name]\n"
)

ORD, R = TableId("demo", "orders"), TableId("demo", "reviewed")


@pytest.fixture
def lake(make_lakehouse) -> Lakehouse:  # type: ignore[no-untyped-def]
    lh: Lakehouse = make_lakehouse(CHECKS, user="etl-bot")
    (lh.settings.home / "access.yml").write_text(ACCESS)
    return lh


def _as(lh: Lakehouse, user: str) -> Lakehouse:
    return Lakehouse(lh.settings.with_(user=user))


def _src(lh: Lakehouse, name: str, rows: list[tuple[int, str]]) -> str:
    return write_csv(lh.settings.home.parent / f"{name}.csv", ["id", "name"], rows)


def test_a_passing_batch_is_approved_at_once_and_published(lake: Lakehouse) -> None:
    b = pl.ingest("demo.orders", [_src(lake, "good", [(1, "a"), (2, "b")])], create=True, lh=lake)
    assert b.passed and b.rows_written == 2 and b.table == "demo.orders"
    assert pl.Branch.from_dict(json.loads(json.dumps(to_jsonable(b)))) == b  # what XComs carry
    assert pl.audit(b.table, b.branch, require_pass=True, lh=lake).passed
    assert pl.wait_for_decision(b.table, b.branch, timeout=5, poll=0.1, lh=lake) is pl.Decision.APPROVED
    r = pl.publish_if_passed(b.table, b.branch, lh=lake)
    assert r.outcome == "published" and r.main_after == b.snapshot_id
    assert pl.decision_now(b.table, b.branch, lh=lake) is pl.Decision.PUBLISHED
    assert pl.publish_if_passed(b.table, b.branch, lh=lake).outcome == "already_published"
    assert pl.review_url(b.table, b.branch, lh=lake).endswith(f"/review?table=demo.orders&branch={b.branch}")


def test_a_failing_batch_waits_times_out_then_a_person_discards(lake: Lakehouse) -> None:
    b = pl.ingest(ORD, [_src(lake, "bad", [(1, ""), (2, "b")])], create=True, lh=lake)
    assert not b.passed and b.failed_checks
    with pytest.raises(AuditFailedError) as e:
        pl.audit(ORD, b.branch, require_pass=True, lh=lake)
    assert e.value.exit_code == 1 and e.value.reason_code == "audit_failed"
    with pytest.raises(RefusedError) as r:
        pl.publish_if_passed(ORD, b.branch, lh=lake)
    assert r.value.exit_code == 1
    looks: list[float] = []
    assert (
        pl.wait_for_decision(
            ORD, b.branch, 0.5, 0.1, lh=lake, sleep=lambda s: (looks.append(s), time.sleep(s))
        )
        is pl.Decision.TIMED_OUT
    )
    assert 3 <= len(looks) <= 6  # one look per poll, no busy loop
    with pytest.raises(BatchRejectedError) as t:
        pl.require_go(pl.Decision.TIMED_OUT, ORD, b.branch)
    assert t.value.exit_code == 1
    threading.Timer(0.5, lambda: discard(_as(lake, "sam@corp.test"), ORD, b.branch, reason="no")).start()
    d = pl.wait_for_decision(ORD, b.branch, timeout=60, poll=0.2, lh=lake)
    assert d is pl.Decision.DISCARDED and not d.go
    with pytest.raises(BatchRejectedError) as j:
        pl.require_go(d, ORD, b.branch)
    assert j.value.exit_code == 1 and j.value.decision == "discarded"
    assert pl.discard(ORD, b.branch, lh=lake) is False  # gone already


def test_the_review_policy_holds_the_batch_until_an_approval(lake: Lakehouse) -> None:
    b = pl.ingest(R, [_src(lake, "rev", [(1, "a")])], create=True, lh=lake)
    assert b.passed
    assert pl.decision_now(R, b.branch, lh=lake) is None  # awaiting an approval
    request_changes(_as(lake, "ann@corp.test"), R, b.branch, comment="wrong day")
    assert pl.wait_for_decision(R, b.branch, 5, 0.1, lh=lake) is pl.Decision.CHANGES_REQUESTED
    approve(_as(lake, "ann@corp.test"), R, b.branch)
    assert pl.wait_for_decision(R, b.branch, 5, 0.1, lh=lake) is pl.Decision.APPROVED
    assert pl.publish_if_passed(R, b.branch, lh=lake).outcome == "published"


def test_bad_input_is_exit_code_2(lake: Lakehouse) -> None:
    with pytest.raises(ValidationError) as e:
        pl.ingest("not a table", ["x.csv"], lh=lake)
    assert e.value.exit_code == 2


def _env(lh: Lakehouse, **extra: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("WAP_")}
    return {**base, **lake_env(lh.settings), **extra}


def test_the_service_identity_is_the_token_else_wap_user(lake: Lakehouse) -> None:
    """A pipeline process acts as its service token's user (``WAP_TOKEN``), whatever ``WAP_USER`` says."""
    from wap_core.states import Action
    from wap_core.workflow.tokens import create_token

    b = pl.ingest(ORD, [_src(lake, "tok", [(1, "a")])], create=True, lh=lake)
    token, _ = create_token(_as(lake, "root"), "etl-svc", "steward")
    code = (
        "import sys; from wap_core import pipeline as pl; from wap_core.exceptions import WapError\n"
        "try:\n"
        f"    print(pl.discard('demo.orders', {b.branch!r}, reason='rollback'))\n"
        "except WapError as e:\n"
        "    print(type(e).__name__, e.exit_code); sys.exit(e.exit_code)\n"
    )
    bad = subprocess.run(
        [sys.executable, "-c", code],
        env=_env(lake, WAP_USER="mallory", WAP_TOKEN="not-a-token"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (bad.returncode, bad.stdout.split()) == (1, ["RefusedError", "1"]), bad.stderr
    ok = subprocess.run(
        [sys.executable, "-c", code],
        env=_env(lake, WAP_USER="mallory", WAP_TOKEN=token),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ok.returncode == 0 and ok.stdout.split() == ["True"], ok.stderr
    (entry,) = lake.journal.history(str(ORD), branch=b.branch, action=Action.DISCARD)
    assert (entry.user, entry.outcome.value) == ("etl-svc", "discarded")


def test_waiting_never_starts_spark(lake: Lakehouse) -> None:
    """The wait reads the journal and the catalog's metadata only: a process that only waits has no Spark."""
    b = pl.ingest(R, [_src(lake, "rev2", [(1, "a")])], create=True, lh=lake)
    s = lake.settings
    env = _env(lake, WAP_USER="etl-bot")
    code = (
        "import sys; from wap_core import pipeline as pl; from wap_core.lake.spark import current_spark\n"
        f"d = pl.wait_for_decision('demo.reviewed', {b.branch!r}, 1.0, 0.2)\n"
        "print(d.value, current_spark() is None, 'pyspark.sql.session' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["timed_out", "True", "False"]
    # the same wait for any other orchestrator: a shell step with the CLI's exit codes (1: no go, 2: error)
    cmd = [sys.executable, "-m", "wap_core.pipeline", "wait", "demo.reviewed"]
    wait = subprocess.run(
        [*cmd, b.branch, "--timeout", "1", "--poll", "0.2", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert wait.returncode == 1, wait.stderr
    assert json.loads(wait.stdout) == {"table": "demo.reviewed", "branch": b.branch, "decision": "timed_out"}
    approve(_as(lake, "ann@corp.test"), R, b.branch)
    wait = subprocess.run(
        [*cmd, b.branch, "--timeout", "5", "--poll", "0.2"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (wait.returncode, wait.stdout.strip()) == (0, "approved"), wait.stderr
    wait = subprocess.run(
        [*cmd, "no_such_branch", "--timeout", "1"], env=env, capture_output=True, text=True, timeout=120
    )
    assert wait.returncode == 2 and wait.stderr.startswith("error: ") and len(wait.stderr.splitlines()) == 1
    assert Path(s.home).exists()


def test_a_discard_between_its_commit_and_its_journal_entry_is_not_an_error(lake: Lakehouse) -> None:
    """The branch is gone, its discard's outcome not journaled yet (intent pending): no decision yet, no error."""
    from wap_core.lake.refs import remove_branch
    from wap_core.states import Action, Outcome

    b = pl.ingest(ORD, [_src(lake, "race", [(1, "")])], create=True, lh=lake)
    intent = lake.journal.begin_intent(
        user="sam@corp.test",
        action=Action.DISCARD,
        table=str(ORD),
        branch=b.branch,
        expected_before=b.snapshot_id,
    )
    assert remove_branch(lake.catalog, ORD, b.branch, head=b.snapshot_id)
    assert pl.decision_now(ORD, b.branch, lh=lake) is None  # the outcome is on its way
    lake.journal.resolve_intent(intent, outcome=Outcome.DISCARDED, done=True)
    assert pl.decision_now(ORD, b.branch, lh=lake) is pl.Decision.DISCARDED


def _wait_cli(env: dict[str, str], *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "wap_core.pipeline", "wait", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_a_publish_killed_after_its_commit_is_published_to_a_waiting_pipeline(lake: Lakehouse) -> None:
    """Issue 25 item 3: the publish dies between its commit and its outcome row (``WAP_FAULT``), no console
    runs: ``wait`` settles the branch's pending intent itself and sees ``published`` (exit 0), at once."""
    from wap_core.faults import FAULT_EXIT_CODE
    from wap_core.states import Action, Outcome

    b = pl.ingest(ORD, [_src(lake, "crash", [(1, "a"), (2, "b")])], create=True, lh=lake)
    assert b.passed
    env = _env(lake, WAP_USER="etl-bot")
    killed = subprocess.run(
        [sys.executable, "-m", "wap_core", "publish", str(ORD), b.branch],
        env={**env, "WAP_FAULT": "after_publish_batch_commit"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert killed.returncode == FAULT_EXIT_CODE, killed.stderr[-2000:]
    raw = lake.catalog.load_table(ORD.tuple).metadata  # main holds the batch, the outcome is not journaled
    assert raw.refs["main"].snapshot_id == b.snapshot_id and b.branch not in raw.refs
    assert lake.journal.pending_intent_on(str(ORD), b.branch) is not None
    started = time.monotonic()
    wait = _wait_cli(env, str(ORD), b.branch, "--timeout", "20", "--poll", "0.5", "--json")
    assert wait.returncode == 0, wait.stderr
    assert json.loads(wait.stdout)["decision"] == "published"
    assert time.monotonic() - started < 15  # decided at the first look, not at the timeout
    (entry,) = lake.journal.history(str(ORD), branch=b.branch, action=Action.PUBLISH)
    assert (entry.outcome, entry.user, entry.reconciled) == (Outcome.PUBLISHED, "etl-bot", True)
    assert lake.journal.pending_intent_on(str(ORD), b.branch) is None


def test_bad_wait_arguments_and_a_refused_identity_are_one_line_exit_2(lake: Lakehouse) -> None:
    """Issue 25 item 3: exit 1 of ``wait`` is only ever a decision ("rejected"); a wait that could never end
    (nan, inf), would busy-loop (poll 0) or cannot sleep (negative), and a refused token are errors."""
    b = pl.ingest(R, [_src(lake, "args", [(1, "a")])], create=True, lh=lake)
    assert pl.decision_now(R, b.branch, lh=lake) is None  # undecided: a wait would loop
    env = _env(lake, WAP_USER="etl-bot")
    cases = {
        ("--timeout", "nan"): "the timeout must be a finite number of seconds >= 0, got nan",
        ("--timeout", "inf"): "the timeout must be a finite number of seconds >= 0, got inf",
        ("--timeout", "-1"): "the timeout must be a finite number of seconds >= 0, got -1.0",
        ("--poll", "-1"): "the poll must be a finite number of seconds >= 0.1, got -1.0",
        ("--poll", "0"): "the poll must be a finite number of seconds >= 0.1, got 0.0",
        ("--poll", "0.01"): "the poll must be a finite number of seconds >= 0.1, got 0.01",
        ("--poll", "nan"): "the poll must be a finite number of seconds >= 0.1, got nan",
        ("--poll", "soon"): "argument --poll: invalid float value: 'soon'",
    }
    for args, message in cases.items():
        try:
            p = _wait_cli(env, str(R), b.branch, "--timeout", "2", *args, timeout=60)
        except subprocess.TimeoutExpired:
            pytest.fail(f"wait {' '.join(args)} did not end")
        assert (p.returncode, p.stdout, p.stderr) == (2, "", f"error: {message}\n"), args
    forged = _wait_cli({**env, "WAP_TOKEN": "wapt_" + "x" * 43}, str(R), b.branch, "--timeout", "2")
    assert (forged.returncode, forged.stdout) == (2, ""), forged.stderr
    assert forged.stderr == "error: WAP_TOKEN is not a valid service token\n"
    with pytest.raises(
        ValidationError
    ) as e:  # the API refuses the same (Prefect's default timeout 0: one look)
        pl.wait_for_decision(R, b.branch, float("nan"), 1.0, lh=lake)
    assert e.value.exit_code == 2
    with pytest.raises(ValidationError):
        pl.wait_for_decision(R, b.branch, 1.0, 0, lh=lake)
    assert pl.wait_for_decision(R, b.branch, 0, lh=lake) is pl.Decision.TIMED_OUT


def test_several_tables_are_one_batch(lake: Lakehouse) -> None:
    """Issue 27 item 1: several ``(table, sources)`` pairs are one batch: each table on a branch of the
    batch's name, audited, waited for and discarded as one; a single pair is the one-table steps, unchanged."""
    items = "demo.items"
    b = pl.ingest_batch(
        [(ORD, [_src(lake, "o", [(1, "a")])]), (items, [_src(lake, "i", [(1, "x"), (2, "y")])])],
        batch="day_1",
        create=True,
        lh=lake,
    )
    assert (b.batch, b.tables, b.passed) == ("day_1", ("demo.orders", items), True)
    assert [(x.branch, x.batch, x.rows_written) for x in b.branches] == [
        ("day_1", "day_1", 1),
        ("day_1", "day_1", 2),
    ]
    assert pl.BatchBranches.from_dict(json.loads(json.dumps(to_jsonable(b)))) == b  # what XComs carry
    assert pl.batch_tables("day_1", lh=lake) == (items, "demo.orders")  # the open batch, sorted
    a = pl.audit_batch("day_1", require_pass=True, lh=lake)
    assert (a.passed, [x.table for x in a.tables]) == (True, [items, "demo.orders"])
    assert pl.wait_for_batch_decision("day_1", 5, 0.1, lh=lake) is pl.Decision.APPROVED
    assert pl.batch_review_url("day_1", lh=lake).endswith("/review?batch=day_1")
    r = pl.publish_batch_if_passed("day_1", lh=lake)  # every table's main, in one commit
    assert (r.outcome, r.tag, [x.table for x in r.tables]) == (
        "published",
        "batch-day_1",
        [items, "demo.orders"],
    )
    for x in b.branches:
        refs = lake.table(TableId.parse(x.table)).metadata.refs
        assert refs["main"].snapshot_id == x.snapshot_id and refs["batch-day_1"].snapshot_id == x.snapshot_id
    assert pl.batch_decision_now("day_1", lh=lake) is pl.Decision.PUBLISHED
    assert pl.publish_batch_if_passed("day_1", lh=lake).outcome == "already_published"

    # a failing table holds the whole batch; a discard of the batch is the pipeline's rollback
    bad = pl.ingest_batch(
        [(ORD, [_src(lake, "o2", [(2, "")])]), (items, [_src(lake, "i2", [(3, "z")])])], lh=lake
    )
    assert bad.batch.startswith("batch_") and not bad.passed
    with pytest.raises(AuditFailedError) as e:
        pl.audit_batch(bad.batch, require_pass=True, lh=lake)
    assert e.value.exit_code == 1 and "demo.orders: not_null(name)" in str(e.value)
    assert pl.wait_for_batch_decision(bad.batch, 0, lh=lake) is pl.Decision.TIMED_OUT
    assert pl.discard_batch(bad.batch, reason="rollback", lh=lake) is True
    assert pl.batch_decision_now(bad.batch, lh=lake) is pl.Decision.DISCARDED
    assert pl.discard_batch(bad.batch, lh=lake) is False  # gone already
    env = _env(lake, WAP_USER="etl-bot")
    wait = _wait_cli(env, "--batch", bad.batch, "--timeout", "0", "--json")
    assert (wait.returncode, json.loads(wait.stdout)) == (1, {"batch": bad.batch, "decision": "discarded"})
    wait = _wait_cli(env, "demo.orders", "--batch", bad.batch)
    assert wait.returncode == 2 and wait.stderr.startswith("error: ") and len(wait.stderr.splitlines()) == 1

    for pairs in ([], [(ORD, ["a.csv"]), ("demo.orders", ["b.csv"])], [(ORD, [])]):
        with pytest.raises(ValidationError) as v:
            pl.ingest_batch(pairs, lh=lake)
        assert v.value.exit_code == 2
    one = pl.ingest(ORD, [_src(lake, "o3", [(4, "d")])], lh=lake)  # one pair: a plain branch, as before
    assert one.batch is None and one.branch.startswith("audit_")
