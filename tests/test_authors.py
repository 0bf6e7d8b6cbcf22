"""Issue 19 item 3: the two-person rule cannot be laundered through a rebase, a rollback or a reopen.

The authors of a batch are everyone who wrote it (the ingesting user, whoever re-ingested into it,
rebased/replayed it or reopened it), kept across rebases and reopens; ``author_cannot_approve``
applies to every one of them. Real Spark + Iceberg; the CLI runs in-process as WAP_USER.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import helpers
import pytest
from helpers import app_test, cli_as, guarded_lake, lake_env, refs, use_env, write_csv

from wap_core import Lakehouse
from wap_core.workflow.review import authors, evaluate, policy_for, review_state

cli = cli_as  # the CLI in-process as a user, with the lakehouse's access file and ingest roots
P, SUITE, HEADER, ACCESS = (
    helpers.PEOPLE,
    helpers.PEOPLE_SUITE,
    helpers.PEOPLE_HEADER,
    helpers.TWO_PERSON_ACCESS,
)
SAM, ANN, BOB, ROOT_ = helpers.SAM, helpers.ANN, helpers.BOB, helpers.ROOT_
_names = itertools.count(1)


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory, spark_session: None) -> Lakehouse:
    home = tmp_path_factory.mktemp("authors")
    return guarded_lake(home, f"au{next(_names)}", SUITE, ACCESS, [P])


def src(lh: Lakehouse, name: str, rows: list[tuple[object, ...]]) -> str:
    return write_csv(lh.settings.home / "src" / f"{name}.csv", HEADER, rows)


def self_approval_refused(lh: Lakehouse, user: str, branch: str) -> None:
    """``user`` approving ``branch`` is refused (exit 1, one line) and journaled as a refused approval."""
    code, out, err = cli(lh, user, "approve", "demo.people", branch)
    assert (code, out, err) == (
        1,
        "",
        f"error: {user} may not approve demo.people {branch}: the author of a branch cannot approve it "
        "(policy demo.people)\n",
    )
    e = lh.journal.history(str(P), limit=1)[0]
    assert (e.user, e.action, e.branch, e.outcome, e.details) == (
        user,
        "approve",
        branch,
        "refused",
        {"code": "self_approval"},
    )


def test_ann_ingests_sam_rebases_ann_may_not_approve_nor_after_rollback_and_reopen(
    lake: Lakehouse, monkeypatch: pytest.MonkeyPatch
) -> None:
    lh = lake
    assert cli(lh, ANN, "ingest", "demo.people", src(lh, "mine", [(70, "ada")]), "--branch", "mine")[0] == 0
    assert cli(lh, SAM, "ingest", "demo.people", src(lh, "push", [(71, "bea")]), "--branch", "push")[0] == 0
    assert cli(lh, BOB, "approve", "demo.people", "push")[0] == 0
    assert cli(lh, BOB, "publish", "demo.people", "push")[0] == 0  # main moves under "mine"
    assert cli(lh, SAM, "rebase", "demo.people", "mine")[0] == 0  # sam (steward) replays ann's batch
    assert cli(lh, SAM, "audit", "demo.people", "mine")[0] == 0
    st = review_state(lh, P, "mine")
    assert (st.author, st.authors) == (SAM, (ANN, SAM))  # ann wrote it, sam replayed it: both are authors
    code, out, err = cli(lh, SAM, "branches", "demo.people", "--json")
    assert code == 0 and next(r for r in json.loads(out) if r["branch"] == "mine")["authors"] == [ANN, SAM], (
        err
    )
    main0 = refs(lh, P)["main"]

    # the laundering attempt: ann approves her own batch after sam's rebase -> refused, journaled
    self_approval_refused(lh, ANN, "mine")
    assert review_state(lh, P, "mine").approvals == ()
    code, _, err = cli(lh, ANN, "publish", "demo.people", "mine")
    assert code == 1 and "1 approval of 1 required is missing" in err and refs(lh, P)["main"] == main0
    # the CLI shows every author (approve --json of an independent approver)
    code, out, err = cli(lh, BOB, "approve", "demo.people", "mine", "--json")
    assert code == 0, err
    shown = json.loads(out)
    assert (shown["authors"], shown["author"], shown["approved_by"], shown["review"]) == (
        [ANN, SAM],
        SAM,
        [BOB],
        "approved",
    )
    code, out, err = cli(lh, ANN, "publish", "demo.people", "mine", "--json")
    assert code == 0, err
    head = json.loads(out)["main_after"]
    assert ("demo.people", "mine") not in authors(lh, str(P))  # published: the name starts afresh

    # root rolls the batch back, sam reopens it: the batch is still ann's (and sam's)
    code, _, err = cli(lh, ROOT_, "rollback", "demo.people", "--to", str(main0), "--reason", "wrong file")
    assert code == 0, err
    code, out, err = cli(lh, SAM, "reopen", "demo.people", "--snapshot", str(head), "--branch", "again")
    assert (code, out.strip()) == (0, "again"), err
    assert review_state(lh, P, "again").authors == (ANN, SAM)
    e = lh.journal.history(str(P), action="reopen", limit=1)[0]
    assert e.details["authors"] == [ANN, SAM]  # recorded with the reopen (kept by reconciliation too)
    self_approval_refused(lh, ANN, "again")
    # the Review page reflects it: every author listed, Approve disabled for ann with the reason
    at = review_page(lh, ANN, "again", monkeypatch)
    captions = plain(at.caption)
    assert f"Authors: {ANN}, {SAM}." in captions and "no author of the batch may approve" in captions
    approve = next(b for b in at.button if b.label == "Approve")
    assert approve.disabled and "the author of a branch cannot approve it" in plain([approve.help])
    at.switch_page("pages/branches.py")
    at.run()
    df = at.dataframe[0].value
    assert df[df["branch"] == "again"].iloc[0]["authors"] == f"{ANN}, {SAM}"
    assert cli(lh, BOB, "approve", "demo.people", "again")[0] == 0
    assert review_state(lh, P, "again").state.value == "approved"
    assert cli(lh, SAM, "discard", "demo.people", "again")[0] == 0


def plain(elements: Any) -> str:
    """Text as read on screen: the console escapes user text (backslashes, word joiners)."""
    return "\n".join(str(getattr(e, "value", e)) for e in elements).replace("\\", "").replace("\u2060", "")


def review_page(lh: Lakehouse, user: str, branch: str, mp: pytest.MonkeyPatch) -> Any:
    """The console's Review page of ``demo.people`` ``branch`` as ``user`` (AppTest, sign-in off)."""
    import streamlit as st

    use_env(mp, lake_env(lh.settings, user, access=True, roots=True))
    st.cache_data.clear()
    return app_test("pages/review.py", table="demo.people", branch=branch)


def test_a_reused_branch_name_is_a_new_batch_with_new_authors(lake: Lakehouse) -> None:
    lh = lake
    assert cli(lh, ANN, "ingest", "demo.people", src(lh, "r1", [(80, "cy")]), "--branch", "re")[0] == 0
    assert review_state(lh, P, "re").authors == (ANN,)
    self_approval_refused(lh, ANN, "re")
    assert cli(lh, ANN, "discard", "demo.people", "re")[0] == 0
    assert cli(lh, BOB, "ingest", "demo.people", src(lh, "r2", [(81, "di")]), "--branch", "re")[0] == 0
    assert review_state(lh, P, "re").authors == (BOB,)  # ann's discarded batch under the same name is gone
    assert cli(lh, ANN, "approve", "demo.people", "re")[0] == 0
    self_approval_refused(lh, BOB, "re")
    assert cli(lh, BOB, "discard", "demo.people", "re")[0] == 0


def test_evaluate_ignores_the_approval_of_every_author(lake: Lakehouse) -> None:
    from datetime import UTC, datetime

    from wap_core.workflow.review import Review

    pol = policy_for(lake, P)
    at = datetime.now(UTC)
    rv = [
        Review(n, at, u, "demo.people", "b", 7, "approved", "approver", None)
        for n, u in enumerate([ANN, BOB])
    ]
    st = evaluate(
        "demo.people", "b", 7, pol, (ANN.upper(), SAM), rv
    )  # e-mail addresses match case-insensitively
    assert ([r.user for r in st.approvals], [r.user for r in st.ignored], st.authors) == (
        [BOB],
        [ANN],
        (ANN.upper(), SAM),
    )
    assert evaluate("demo.people", "b", 7, pol, SAM, rv).authors == (SAM,)  # one author as a string
