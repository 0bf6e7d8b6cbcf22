"""The review workflow on real Spark + Iceberg: approvals bound to the head, policies, comments, rollback, reopen.

One module-scoped lakehouse: ``demo.people`` (policy: 1 approval, author cannot approve, a forced
publish needs a second admin) and ``demo.free`` (the ``"*"`` default: no approval needed). The CLI
runs in-process (same Spark session) as the user given by WAP_USER; refusals cost no Spark.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from typing import Any

import helpers
import pytest
from helpers import app_test, cli_as, cli_process, guarded_lake, lake_env, refs, use_env, write_csv

from wap_core import Lakehouse, TableId
from wap_core.exceptions import AccessFileError, ConflictError
from wap_core.faults import FAULT_EXIT_CODE
from wap_core.identifiers import MAIN
from wap_core.lake import catalog as cat
from wap_core.security.access import parse_access
from wap_core.workflow.publish import publish
from wap_core.workflow.readiness import publish_readiness
from wap_core.workflow.reconcile import reconcile
from wap_core.workflow.review import policy_for, review_state
from wap_core.workflow.rollback import rollback

cli = cli_as  # the CLI in-process as a user, with the lakehouse's access file and ingest roots
P, HEADER, ACCESS = helpers.PEOPLE, helpers.PEOPLE_HEADER, helpers.TWO_PERSON_ACCESS
SAM, ANN, BOB, ROOT_, OPS = helpers.SAM, helpers.ANN, helpers.BOB, helpers.ROOT_, helpers.OPS
F = TableId("demo", "free")
SUITE = helpers.PEOPLE_SUITE + "demo.free:\n  checks:\n    - not_null: [name]\n"
_names = itertools.count(1)


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory, spark_session: None) -> Lakehouse:
    home = tmp_path_factory.mktemp("workflow")
    return guarded_lake(home, f"wf{next(_names)}", SUITE, ACCESS, [P, F])


def src(lh: Lakehouse, name: str, rows: list[tuple[object, ...]]) -> str:
    return write_csv(lh.settings.home / "src" / f"{name}.csv", HEADER, rows)


def branch_row(lh: Lakehouse, table: TableId, branch: str) -> dict[str, Any]:
    code, out, err = cli(lh, SAM, "branches", str(table), "--json")
    assert code == 0, err
    return next(r for r in json.loads(out) if r["branch"] == branch)


def add_commit(lh: Lakehouse, table: TableId, branch: str, rows: list[tuple[int, str]]) -> None:
    """A later commit on the branch (plain Spark append), as a fix-up by its steward would be."""
    df = lh.spark.createDataFrame(rows, "id bigint, name string")
    df.writeTo(lh.spark_name(table, branch)).append()


# ============================================================================= policies in the access file


def test_policies_parse_with_default_and_errors_name_the_line() -> None:
    pol = parse_access(ACCESS, "a.yml")
    assert (
        policy_for(pol, "demo.people").approvals,
        policy_for(pol, "demo.people").author_cannot_approve,
    ) == (1, True)
    assert policy_for(pol, "demo.people").force_needs_second_admin is True
    assert (policy_for(pol, "demo.other").approvals, policy_for(pol, "demo.other").source) == (0, "*")
    bad = ACCESS.replace("approvals: 1,", "approvals: one,")
    with pytest.raises(AccessFileError, match=r"^a.yml:8: 'approvals' must be a whole number"):
        policy_for(parse_access(bad, "a.yml"), "demo.people")
    with pytest.raises(AccessFileError, match=r"^a.yml:8: unknown policy key 'aprovals'"):
        policy_for(parse_access(ACCESS.replace("{approvals: 1,", "{aprovals: 1,"), "a.yml"), "demo.people")


# ============================================================================= the policy matrix


def test_policy_matrix_on_a_table_needing_one_approval(lake: Lakehouse) -> None:
    lh = lake
    assert (
        cli(lh, SAM, "ingest", "demo.people", src(lh, "b1", [(10, "cy")]), "--branch", "b1")[0] == 0
    )  # sam is the author
    row = branch_row(lh, P, "b1")
    assert (row["status"], row["review"], row["approvals"]) == ("passed", "awaiting", 0)
    main0 = refs(lh, P)["main"]

    # an approver cannot publish without the approval; the refusal names what is missing
    code, _, err = cli(lh, ANN, "publish", "demo.people", "b1")
    assert (code, err) == (
        1,
        "error: publish of demo.people b1 refused: 1 approval of 1 required is missing\n",
    )
    # the steward author may not approve (role), an approver may
    code, _, err = cli(lh, SAM, "approve", "demo.people", "b1")
    assert (code, err) == (1, "error: sam@corp.test (steward) may not approve: approver role needed\n")
    code, _, err = cli(lh, SAM, "request-changes", "demo.people", "b1", "--comment", "x")
    assert code == 1 and "may not request changes: approver role needed" in err

    # changes requested blocks publish whatever the other approvals
    assert cli(lh, ANN, "request-changes", "demo.people", "b1", "--comment", "ids look off")[0] == 0
    code, out, _ = cli(lh, BOB, "approve", "demo.people", "b1", "--json")
    assert (
        code == 0 and json.loads(out)["review"] == "changes_requested" and json.loads(out)["approvals"] == 1
    )
    assert (branch_row(lh, P, "b1")["review"], branch_row(lh, P, "b1")["approvals"]) == (
        "changes_requested",
        1,
    )
    code, _, err = cli(lh, ROOT_, "publish", "demo.people", "b1")
    assert (code, err) == (
        1,
        "error: publish of demo.people b1 refused: changes requested by ann@corp.test\n",
    )
    # ann's approval replaces her own request for changes: her latest review counts
    assert cli(lh, ANN, "approve", "demo.people", "b1", "--comment", "fixed upstream")[0] == 0
    row = branch_row(lh, P, "b1")
    assert (row["review"], row["approvals"]) == ("approved", 2)

    # a later commit dismisses every approval on the old head
    old_head = row["head_snapshot_id"]
    add_commit(lh, P, "b1", [(11, "dee")])
    st = review_state(lh, P, "b1")
    assert (st.state.value, len(st.approvals), {r.user for r in st.dismissed}) == ("awaiting", 0, {ANN, BOB})
    assert all(r.snapshot_id == old_head for r in st.dismissed)
    assert publish_readiness(lh, P, "b1").code == "stale"  # the audit is stale first
    assert cli(lh, SAM, "audit", "demo.people", "b1")[0] == 0
    code, _, err = cli(lh, ANN, "publish", "demo.people", "b1")
    assert (code, err) == (
        1,
        "error: publish of demo.people b1 refused: 1 approval of 1 required is missing\n",
    )
    assert refs(lh, P)["main"] == main0
    assert cli(lh, BOB, "approve", "demo.people", "b1")[0] == 0
    code, out, err = cli(lh, ANN, "publish", "demo.people", "b1", "--json")
    assert code == 0, err
    assert refs(lh, P)["main"] == json.loads(out)["main_after"] != main0
    # the decision's record stays in the journal
    acts = [(e.user, e.action, e.outcome) for e in lh.journal.history(str(P), branch="b1", limit=20)]
    assert (ANN, "request_changes", "changes_requested") in acts and (BOB, "approve", "approved") in acts


def test_self_approval_refused_for_approver_and_admin_authors_and_a_rebase_adds_the_rebaser_to_the_authors(
    lake: Lakehouse,
) -> None:
    lh = lake
    assert cli(lh, ANN, "ingest", "demo.people", src(lh, "own", [(20, "eve")]), "--branch", "own")[0] == 0
    code, _, err = cli(lh, ANN, "approve", "demo.people", "own")
    assert code == 1 and err == (
        "error: ann@corp.test may not approve demo.people own: the author of a branch cannot approve it "
        "(policy demo.people)\n"
    )
    assert lh.journal.history(str(P), limit=1)[0].details == {"code": "self_approval"}
    assert review_state(lh, P, "own").approvals == ()
    # bob approves own's head; then main moves (another branch published) and root rebases: root joins the
    # authors (ann stays one: a rebase never launders her batch), bob's approval is dismissed with the old head
    assert cli(lh, BOB, "approve", "demo.people", "own")[0] == 0
    assert cli(lh, SAM, "ingest", "demo.people", src(lh, "mover", [(21, "fay")]), "--branch", "mover")[0] == 0
    assert cli(lh, ANN, "approve", "demo.people", "mover")[0] == 0
    assert cli(lh, ANN, "publish", "demo.people", "mover")[0] == 0
    assert cli(lh, ROOT_, "rebase", "demo.people", "own")[0] == 0
    st = review_state(lh, P, "own")
    assert (st.author, st.authors, st.state.value, [r.user for r in st.dismissed]) == (
        ROOT_,
        (ANN, ROOT_),
        "awaiting",
        [BOB],
    )
    assert cli(lh, ROOT_, "audit", "demo.people", "own")[0] == 0
    code, _, err = cli(lh, ROOT_, "approve", "demo.people", "own")
    assert (
        code == 1 and "root may not approve demo.people own: the author of a branch cannot approve it" in err
    )
    code, _, err = cli(lh, ANN, "approve", "demo.people", "own")  # ann is still an author after the rebase
    assert code == 1 and "ann@corp.test may not approve demo.people own: the author of a branch" in err
    assert cli(lh, BOB, "approve", "demo.people", "own")[0] == 0
    assert review_state(lh, P, "own").state.value == "approved"
    assert cli(lh, ROOT_, "publish", "demo.people", "own")[0] == 0


def test_forced_publish_needs_a_second_admin(lake: Lakehouse) -> None:
    lh = lake
    assert (
        cli(lh, SAM, "ingest", "demo.people", src(lh, "bad", [(30, None)]), "--branch", "bad")[0] == 1
    )  # audit failed
    main0 = refs(lh, P)["main"]
    code, _, err = cli(lh, ROOT_, "publish", "demo.people", "bad", "--force", "--reason", "known nulls")
    assert code == 1 and err == (
        "error: forced publish of demo.people bad refused: the policy (demo.people) needs an approval "
        "of the head from an admin other than root\n"
    )
    assert (
        cli(lh, ROOT_, "approve", "demo.people", "bad")[0] == 0
    )  # root's own approval does not count for root
    assert cli(lh, ROOT_, "publish", "demo.people", "bad", "--force", "--reason", "known nulls")[0] == 1
    assert cli(lh, ANN, "approve", "demo.people", "bad")[0] == 0  # an approver is not an admin
    assert cli(lh, ROOT_, "publish", "demo.people", "bad", "--force", "--reason", "known nulls")[0] == 1
    assert refs(lh, P)["main"] == main0
    assert (
        cli(lh, ANN, "publish", "demo.people", "bad", "--force", "--reason", "r")[0] == 1
    )  # approvers never force
    assert cli(lh, OPS, "approve", "demo.people", "bad")[0] == 0
    code, out, err = cli(
        lh, ROOT_, "publish", "demo.people", "bad", "--force", "--reason", "known nulls", "--json"
    )
    assert code == 0 and json.loads(out)["forced"] is True, err


def test_no_approval_needed_by_default_but_changes_requested_still_blocks(lake: Lakehouse) -> None:
    lh = lake
    assert cli(lh, SAM, "ingest", "demo.free", src(lh, "f1", [(40, "gus")]), "--branch", "f1")[0] == 0
    assert (branch_row(lh, F, "f1")["review"], branch_row(lh, F, "f1")["approvals"]) == ("none", 0)
    assert publish_readiness(lh, F, "f1").allowed
    assert cli(lh, BOB, "request-changes", "demo.free", "f1", "--comment", "wait for the vendor")[0] == 0
    code, _, err = cli(lh, ANN, "publish", "demo.free", "f1")
    assert (code, err) == (1, "error: publish of demo.free f1 refused: changes requested by bob@corp.test\n")
    code, _, err = cli(lh, BOB, "request-changes", "demo.free", "f1")
    assert code == 2  # --comment is required
    assert cli(lh, SAM, "approve", "demo.free", "f1")[0] == 1  # role, whatever the policy
    assert cli(lh, BOB, "approve", "demo.free", "f1")[0] == 0
    assert branch_row(lh, F, "f1")["review"] == "approved"


# ============================================================================= comments


def test_comments_thread_survives_publish_and_discard(lake: Lakehouse) -> None:
    lh = lake
    code, out, err = cli(
        lh, SAM, "comment", "demo.free", "f1", "nulls come from the *vendor* <b>", "--check", "not_null(name)"
    )
    assert code == 0, err
    code, _, err = cli(lh, "vic@corp.test", "comment", "demo.free", "f1", "me too")
    assert (code, err) == (1, "error: vic@corp.test (viewer) may not comment: steward role needed\n")
    assert cli(lh, SAM, "comment", "demo.free", "f1", "   ")[0] == 2
    assert cli(lh, ANN, "publish", "demo.free", "f1")[0] == 0
    code, out, _ = cli(lh, "vic@corp.test", "comments", "demo.free", "f1", "--json")
    thread = json.loads(out)
    assert code == 0
    assert [(c["user"], c["kind"], c["check"], c["text"]) for c in thread] == [
        (BOB, "changes_requested", None, "wait for the vendor"),
        (BOB, "approved", None, ""),
        (SAM, "comment", "not_null(name)", "nulls come from the *vendor* <b>"),
    ]
    assert all(
        {"id", "at", "user", "table", "branch", "snapshot_id", "check", "kind", "text"} == set(c)
        for c in thread
    )
    # discard keeps the thread too
    assert cli(lh, SAM, "ingest", "demo.free", src(lh, "junk", [(41, None)]), "--branch", "junk")[0] == 1
    assert cli(lh, SAM, "comment", "demo.free", "junk", "wrong file")[0] == 0
    assert cli(lh, SAM, "discard", "demo.free", "junk", "--reason", "wrong file")[0] == 0
    code, out, _ = cli(lh, SAM, "comments", "demo.free", "junk")
    assert code == 0 and "wrong file" in out and "sam@corp.test" in out


# ============================================================================= rollback and reopen


def _intent_and_outcome(lh: Lakehouse, action: str) -> tuple[Any, Any]:
    intent = next(i for i in lh.journal.intents(str(F), limit=10) if i.action == action)
    outcome = next(e for e in lh.journal.history(str(F), action=action, limit=5) if e.intent_id == intent.id)
    return intent, outcome


def test_rollback_loses_a_race_with_a_publish_cleanly(
    lake: Lakehouse, monkeypatch: pytest.MonkeyPatch
) -> None:
    lh = lake
    assert cli(lh, SAM, "ingest", "demo.free", src(lh, "racer", [(50, "hal")]), "--branch", "racer")[0] == 0
    racer_head = refs(lh, F)["racer"]
    main0 = refs(lh, F)["main"]
    target = lh.table(F).metadata.snapshot_by_id(main0).parent_snapshot_id  # type: ignore[union-attr]
    import wap_core.workflow.refmove as rb  # the ref-move path holds every action's fault points

    real = rb.fault_point

    def publish_in_between(name: str) -> None:  # a publish lands after rollback read main, before its commit
        real(name)
        if name == "after_rollback_batch_intents":
            publish(lh, F, "racer", user=ANN)

    monkeypatch.setattr(rb, "fault_point", publish_in_between)
    with pytest.raises(ConflictError, match=r"rollback of demo\.free lost a race"):
        rollback(lh, F, target, reason="too late", user=ROOT_)
    assert refs(lh, F)["main"] == racer_head  # the publish stands, nothing rolled back
    intent, outcome = _intent_and_outcome(lh, "rollback")
    assert (intent.status, outcome.outcome, outcome.details["code"]) == ("abandoned", "refused", "conflict")
    # and the other way round: the console's rollback with the main it saw is refused once main moved
    with pytest.raises(ConflictError, match="main moved since it was read"):
        rollback(lh, F, main0, reason="stale page", user=ROOT_, expected_main=main0)


def test_rollback_refusals_then_success_journaled_with_intent_and_outcome(lake: Lakehouse) -> None:
    lh = lake
    tbl = lh.table(F)
    history = [s.snapshot_id for s in cat.ancestors(tbl, cat.ref_snapshot_id(tbl, MAIN))]
    head, target = history[0], history[1]  # racer's batch is the newest (published during the race)
    code, _, err = cli(lh, ANN, "rollback", "demo.free", "--to", str(target), "--reason", "bad vendor file")
    assert (code, err) == (1, "error: ann@corp.test (approver) may not rollback: admin role needed\n")
    assert cli(lh, ROOT_, "rollback", "demo.free", "--to", str(target))[0] == 2  # --reason required
    # a snapshot outside main's history (the discarded junk branch's head) is refused
    junk = next(s.snapshot_id for s in tbl.metadata.snapshots if cat.summary_get(s, "wap.branch") == "junk")
    code, _, err = cli(lh, ROOT_, "rollback", "demo.free", "--to", str(junk), "--reason", "r")
    assert code == 1 and f"snapshot {junk} is not an ancestor of main" in err
    assert refs(lh, F)["main"] == head
    code, out, err = cli(
        lh, ROOT_, "rollback", "demo.free", "--to", str(target), "--reason", "bad vendor file", "--json"
    )
    assert code == 0, err
    res = json.loads(out)
    assert (res["main_before"], res["main_after"], [b["branch"] for b in res["rolled_back"]]) == (
        head,
        target,
        ["racer"],
    )
    assert refs(lh, F)["main"] == target
    intent, outcome = _intent_and_outcome(lh, "rollback")
    assert (intent.action, intent.status, intent.expected_before, intent.expected_after, intent.user) == (
        "rollback",
        "done",
        head,
        target,
        ROOT_,
    )
    assert (outcome.outcome, outcome.snapshot_after, outcome.reason, outcome.reconciled) == (
        "rolled_back",
        target,
        "bad vendor file",
        False,
    )
    # data read through Spark: racer's row is gone from main
    assert 50 not in {r.id for r in lh.read_main(F).select("id").collect()}  # type: ignore[union-attr]


def test_reopen_rebase_audit_republish(lake: Lakehouse) -> None:
    lh = lake
    # racer's batch was rolled back; publish another batch so main moves; reopen racer; rebase, audit, publish again
    from wap_core.workflow.rollback import rolled_back_snapshots

    gone = rolled_back_snapshots(lh, F)
    assert [(g.branch, g.rolled_back_by, g.reason) for g in gone] == [("racer", ROOT_, "bad vendor file")]
    main0, target = gone[0].snapshot_id, refs(lh, F)["main"]
    assert cli(lh, SAM, "ingest", "demo.free", src(lh, "next", [(60, "ivy")]), "--branch", "next")[0] == 0
    assert cli(lh, ANN, "publish", "demo.free", "next")[0] == 0
    code, _, err = cli(lh, "vic@corp.test", "reopen", "demo.free", "--snapshot", str(main0))
    assert code == 1 and "may not reopen: steward role needed" in err
    code, _, err = cli(lh, SAM, "reopen", "demo.free", "--snapshot", str(target))
    assert code == 1 and "still in main's history" in err
    code, out, err = cli(lh, SAM, "reopen", "demo.free", "--snapshot", str(main0))
    assert (code, out.strip()) == (0, "racer_reopened"), err
    assert refs(lh, F)["racer_reopened"] == main0
    row = branch_row(lh, F, "racer_reopened")
    assert (row["main_moved"], row["fork_snapshot_id"], row["status"]) == (True, target, "not_audited")
    assert cli(lh, SAM, "rebase", "demo.free", "racer_reopened")[0] == 0
    assert cli(lh, SAM, "audit", "demo.free", "racer_reopened")[0] == 0
    assert cli(lh, ANN, "publish", "demo.free", "racer_reopened")[0] == 0
    ids = sorted(r.id for r in lh.read_main(F).select("id").collect())  # type: ignore[union-attr]
    assert ids == [1, 2, 40, 50, 60]  # racer is back, replayed on top of next
    e = lh.journal.history(str(F), action="reopen", limit=1)[0]
    assert (e.user, e.outcome, e.snapshot_after, e.intent_id is not None) == (SAM, "reopened", main0, True)


def _run_killed(lh: Lakehouse, point: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **lake_env(lh.settings, ROOT_, access=True, WAP_FAULT=point)}
    return cli_process({**env, "PYSPARK_PYTHON": sys.executable}, *args)


def test_rollback_killed_at_its_fault_points_is_reconciled(lake: Lakehouse) -> None:
    lh = lake
    main0 = refs(lh, F)["main"]
    target = lh.table(F).metadata.snapshot_by_id(main0).parent_snapshot_id  # type: ignore[union-attr]

    def killed_and_reconciled(point: str, reason: str, main_after: int | None) -> tuple[Any, Any]:
        """The rollback to ``target`` killed at ``point``: main is then ``main_after``, and reconciled."""
        p = _run_killed(lh, point, "rollback", "demo.free", "--to", str(target), "--reason", reason)
        assert p.returncode == FAULT_EXIT_CODE, p.stderr
        assert refs(lh, F)["main"] == main_after
        reconcile(lh)  # the next entry point (a CLI start, the console's tick, the next action) reconciles
        return _intent_and_outcome(lh, "rollback")

    i, e = killed_and_reconciled("after_rollback_batch_intents", "killed early", main0)  # nothing moved
    assert (i.status, e.intent_id, e.outcome, e.reconciled, e.user, e.reason) == (
        "abandoned",
        i.id,
        "abandoned",
        True,
        ROOT_,
        "killed early",
    )
    for point in (
        "after_rollback_batch_write",
        "in_rollback_batch_transaction",
    ):  # the one path's other points
        i, e = killed_and_reconciled(point, f"killed at {point}", main0)  # nothing moved
        assert (i.status, e.outcome, e.reconciled) == ("abandoned", "abandoned", True), (point, e)
    i, e = killed_and_reconciled("after_rollback_batch_commit", "killed late", target)
    assert (i.status, e.intent_id, e.outcome, e.reconciled, e.snapshot_after, e.reason) == (
        "done",
        i.id,
        "rolled_back",
        True,
        target,
        "killed late",
    )


# ============================================================================= the console (AppTest, metadata pages only)


def _page(lh: Lakehouse, user: str, page: str, mp: pytest.MonkeyPatch) -> Any:
    """The console's ``page`` as ``user``; the environment stays set (``mp``) for further runs of the AppTest."""
    import streamlit as st

    use_env(mp, lake_env(lh.settings, user, access=True))
    st.cache_data.clear()
    return app_test(page)


def test_console_history_rollback_is_admin_only_and_offers_reopen(
    lake: Lakehouse, monkeypatch: pytest.MonkeyPatch
) -> None:
    at = _page(lake, ANN, "pages/history.py", monkeypatch)
    at.selectbox[-1].select("demo.free")
    at.run()
    rb = [b for b in at.button if b.label == "Roll back"]
    assert rb and all(b.disabled for b in rb), (
        [e.value for e in at.exception],
        [e.value for e in at.error],
        [b.label for b in at.button],
        [s.value for s in at.selectbox],
    )
    assert "ann@corp.test (approver) may not roll back: admin role needed" in "\n".join(
        str(c.value) for c in at.caption
    ).replace("\\", "").replace("\u2060", "")
    assert [b for b in at.button if b.label == "Reopen as branch"]  # the rolled-back batch of the kill test
    at = _page(lake, ROOT_, "pages/history.py", monkeypatch)
    at.selectbox[-1].select("demo.free")
    at.run()
    assert [b for b in at.button if b.label == "Roll back" and not b.disabled]


def test_console_branches_show_review_and_approvals(lake: Lakehouse, monkeypatch: pytest.MonkeyPatch) -> None:
    assert cli(lake, SAM, "ingest", "demo.people", src(lake, "ui", [(70, "jo")]), "--branch", "ui")[0] == 0
    at = _page(lake, ANN, "pages/branches.py", monkeypatch)
    df = at.dataframe[0].value
    row = df[df["branch"] == "ui"].iloc[0]
    assert (row["review state"], row["approvals"]) == ("awaiting", 0)


def test_reopen_killed_at_its_fault_points_is_reconciled(lake: Lakehouse) -> None:
    lh = lake
    assert cli(lh, SAM, "ingest", "demo.free", src(lh, "kr", [(80, "kim")]), "--branch", "kr")[0] == 0
    assert cli(lh, ANN, "publish", "demo.free", "kr")[0] == 0
    batch = refs(lh, F)["main"]
    parent = lh.table(F).metadata.snapshot_by_id(batch).parent_snapshot_id  # type: ignore[union-attr]
    assert parent is not None
    rollback(lh, F, parent, reason="bad batch", user=ROOT_)

    def killed_and_reconciled(point: str, branch: str) -> tuple[Any, Any]:
        """The reopen of ``batch`` as ``branch`` killed at ``point``, then reconciled."""
        p = _run_killed(lh, point, "reopen", "demo.free", "--snapshot", str(batch), "--branch", branch)
        assert p.returncode == FAULT_EXIT_CODE, p.stderr
        reconcile(lh)  # the next entry point reconciles
        return _intent_and_outcome(lh, "reopen")

    i, e = killed_and_reconciled("after_reopen_intent", "kr_early")  # nothing created
    assert "kr_early" not in refs(lh, F)
    assert (i.status, e.intent_id, e.outcome, e.reconciled, e.user) == (
        "abandoned",
        i.id,
        "abandoned",
        True,
        ROOT_,
    )
    i, e = killed_and_reconciled("after_reopen_commit", "kr_late")  # the branch was created
    assert refs(lh, F)["kr_late"] == batch
    assert (i.status, e.intent_id, e.outcome, e.reconciled, e.snapshot_after) == (
        "done",
        i.id,
        "reopened",
        True,
        batch,
    )


# ============================================================================= a job's own branch: wap branch open (issue 37)


def test_a_job_opens_its_branch_writes_it_with_spark_and_is_its_author(lake: Lakehouse) -> None:
    lh = lake
    code, out, err = cli(lh, SAM, "branch", "open", "demo.people", "--branch", "job1", "--json")
    assert code == 0, err
    ob = json.loads(out)
    main0 = refs(lh, P)["main"]
    assert (ob["outcome"], ob["table"], ob["branch"], ob["user"], ob["head"]) == (
        "opened",
        "demo.people",
        "job1",
        SAM,
        main0,
    )
    assert refs(lh, P)["job1"] == main0
    assert ob["spark_conf"] == {"spark.wap.branch": "job1"}
    assert ob["table_properties"] == {"write.wap.enabled": "true"}  # what Iceberg needs for spark.wap.branch
    assert ob["identifier"] == lh.sql_name(P, "job1")
    # the user's own job, as the result says: Iceberg's WAP setting with the property, and plain SQL on the table
    lh.spark.sql(f"ALTER TABLE {lh.sql_name(P)} SET TBLPROPERTIES ('write.wap.enabled'='true')")
    lh.spark.conf.set("spark.wap.branch", "job1")
    try:
        lh.spark.sql(
            f"MERGE INTO {lh.sql_name(P)} t USING (SELECT CAST(700 AS bigint) AS id, 'new' AS name) s "
            "ON t.id = s.id WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
        )
        lh.spark.sql(f"UPDATE {lh.sql_name(P)} SET name = 'renamed' WHERE id = 700")
    finally:
        lh.spark.conf.unset("spark.wap.branch")
    assert refs(lh, P)["main"] == main0 and refs(lh, P)["job1"] != main0  # the writes went to the branch
    assert review_state(lh, P, "job1").authors == (SAM,)  # the pipeline's identity is the batch's author
    code, out, err = cli(lh, SAM, "audit", "demo.people", "job1", "--json")
    assert code == 0, err
    assert json.loads(out)["changes"]["inserted"] == 1
    # four eyes: the author may not approve, another approver may
    code, _, err = cli(lh, SAM, "approve", "demo.people", "job1")
    assert code == 1
    assert cli(lh, ANN, "approve", "demo.people", "job1")[0] == 0
    assert cli(lh, ANN, "publish", "demo.people", "job1")[0] == 0
    assert refs(lh, P)["main"] != main0


def test_a_branch_written_by_a_job_that_never_opened_it_is_taken_over_before_a_four_eyes_publish(
    lake: Lakehouse,
) -> None:
    lh = lake
    lh.spark.sql(f"ALTER TABLE {lh.sql_name(P)} CREATE BRANCH `raw1`")
    lh.spark.sql(f"INSERT INTO {lh.sql_name(P, 'raw1')} VALUES (901, 'xi')")
    assert cli(lh, SAM, "audit", "demo.people", "raw1")[0] == 0
    assert review_state(lh, P, "raw1").authors == ()  # unknown
    ready = publish_readiness(lh, P, "raw1")
    assert ready.code == "author_unknown" and "wap branch open demo.people --branch raw1" in ready.message
    code, _, err = cli(lh, ANN, "publish", "demo.people", "raw1")
    assert code == 1 and "no author is journaled" in err
    code, out, err = cli(lh, SAM, "branch", "open", "demo.people", "--branch", "raw1", "--json")
    assert code == 0, err
    ob = json.loads(out)
    assert (ob["outcome"], ob["user"]) == ("taken_over", SAM) and "author was unknown" in ob["note"]
    assert refs(lh, P)["raw1"] == ob["head"]  # no ref moved
    entry = lh.journal.history(str(P), branch="raw1", action="open")[0]
    assert (entry.user, entry.outcome) == (SAM, "taken_over")
    assert review_state(lh, P, "raw1").authors == (SAM,)
    assert publish_readiness(lh, P, "raw1").code == "approvals_missing"
    # opening it again is no new takeover
    assert json.loads(cli(lh, SAM, "branch", "open", "demo.people", "--branch", "raw1", "--json")[1])[
        "outcome"
    ] == ("opened")
    assert len(lh.journal.history(str(P), branch="raw1", action="open")) == 1


def test_branch_open_refusals(lake: Lakehouse) -> None:
    from wap_core.exceptions import RefusedError
    from wap_core.workflow.open_branch import open_branch

    lh = lake
    code, _, err = cli(lh, "vic@corp.test", "branch", "open", "demo.free", "--branch", "nope")
    assert code == 1 and "may not open: steward role needed" in err
    lh.spark.sql(f"ALTER TABLE {lh.sql_name(F)} CREATE TAG `release1`")
    with pytest.raises(RefusedError, match="has a tag named 'release1'"):
        open_branch(lh, F, branch="release1", user=SAM)
    code, _, err = cli(lh, SAM, "branch", "open", "demo.free", "--branch", "a", "--batch", "b")
    assert code == 2 and "give --branch or --batch, not both" in err


def test_branch_open_killed_at_its_fault_points_is_reconciled(lake: Lakehouse) -> None:
    lh = lake

    def killed_and_reconciled(point: str, branch: str) -> tuple[Any, Any]:
        p = _run_killed(lh, point, "branch", "open", "demo.free", "--branch", branch)
        assert p.returncode == FAULT_EXIT_CODE, p.stderr
        reconcile(lh)
        return _intent_and_outcome(lh, "open")

    i, e = killed_and_reconciled("after_open_intent", "ko_early")  # nothing created
    assert "ko_early" not in refs(lh, F)
    assert (i.status, e.intent_id, e.outcome, e.reconciled) == ("abandoned", i.id, "abandoned", True)
    i, e = killed_and_reconciled("after_open_commit", "ko_late")  # the branch was created
    assert refs(lh, F)["ko_late"] == refs(lh, F)["main"]
    assert (i.status, e.intent_id, e.outcome, e.reconciled, e.user) == ("done", i.id, "opened", True, ROOT_)
    assert review_state(lh, F, "ko_late").authors == (ROOT_,)
