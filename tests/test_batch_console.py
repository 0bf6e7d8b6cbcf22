"""Batches that span tables in the console (issue 27 items 1 and 3): the Branches row, the batch's Review, Ingest.

One module-scoped lakehouse on the shared SparkSession: ``shop.orders`` (id, name) and ``shop.items``
(id, order_id: ``references`` shop.orders.id), both published. Open on it:

- batch ``wk1``: a new order, and items of which one names order 99, in no table at all: ``shop.items``
  fails its ``references`` check (wherever the check reads shop.orders: main or the batch's head);
- batch ``wk2``: a new order and an item of an order already on main: every check passes;
- ``solo``: a plain branch of ``shop.orders`` (a one-table batch: listed as today).

Tests run in file order and change that state (Ingest starts ``wk3``, which is then discarded; ``wk2`` is
published, which moves main under ``wk1``; then ``wk1`` is reviewed, gets a commit on ``shop.items`` and is
re-audited). The review tests run under an access file of their own (``review-access.yml``: a viewer, a
steward, two approvers of whom ann wrote a table of ``wk1``; one approval, no author may approve).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from helpers import ANN, BOB, SAM, app_test, lake_env, lake_settings, refs, use_env, write_csv
from streamlit.testing.v1 import AppTest

from wap_core import Lakehouse, TableId, api
from wap_core.states import BranchStatus, worst_branch_status
from wap_core.workflow.batch import load_batch
from wap_core.workflow.ingest import ingest
from wap_core.workflow.publish import publish
from wap_core.workflow.review import ReviewState
from wap_core.workflow.status import batch_rows

ORD, ITM = TableId("shop", "orders"), TableId("shop", "items")
CHECKS = """\
shop.orders:
  checks:
    - not_null: [name]
shop.items:
  checks:
    - not_null: [order_id]
    - references: {column: order_id, table: shop.orders, ref_column: id}
"""
REFS = "references(order_id -> shop.orders.id)"
USER = "steward-anna"
VIEWER = "vic"
REVIEW_ACCESS = f"""\
roles:
  viewer: ["*"]
  steward: [{USER}, {SAM}]
  approver: [{ANN}, {BOB}]
policies:
  "*": {{approvals: 1, author_cannot_approve: true}}
"""


def _orders(lh: Lakehouse, name: str, rows: list[tuple[object, ...]]) -> str:
    return write_csv(Path(lh.settings.home) / "src" / f"{name}.csv", ("id", "name"), rows)


def _items(lh: Lakehouse, name: str, rows: list[tuple[object, ...]]) -> str:
    return write_csv(Path(lh.settings.home) / "src" / f"{name}.csv", ("id", "order_id"), rows)


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory, spark_session: None) -> Lakehouse:
    home = tmp_path_factory.mktemp("batchconsole")
    lh = Lakehouse(lake_settings(home, "batchconsole", CHECKS, ingest_roots=(home,)))
    for t, path in ((ORD, _orders(lh, "o0", [(1, "ann"), (2, "bob")])), (ITM, _items(lh, "i0", [(10, 1)]))):
        assert ingest(lh, t, [path], create=True, branch="first").audit.passed
        publish(lh, t, "first")
    assert ingest(lh, ORD, [_orders(lh, "o1", [(3, "cid")])], batch="wk1", user=ANN).audit.passed
    bad = ingest(lh, ITM, [_items(lh, "i1", [(11, 1), (12, 99)])], batch="wk1", user=SAM)
    assert bad.audit.failed_checks == [REFS], bad.audit.failed_checks
    assert ingest(lh, ORD, [_orders(lh, "o2", [(4, "dee")])], batch="wk2", user=SAM).audit.passed
    assert ingest(lh, ITM, [_items(lh, "i2", [(13, 2)])], batch="wk2", user=SAM).audit.passed
    assert ingest(lh, ORD, [_orders(lh, "o3", [(5, "eve")])], branch="solo", user=SAM).audit.passed
    return lh


@pytest.fixture
def env(lake: Lakehouse, monkeypatch: pytest.MonkeyPatch) -> Iterator[Lakehouse]:
    import streamlit as st

    use_env(monkeypatch, lake_env(lake.settings, USER, roots=True))
    st.cache_data.clear()
    yield lake


def _texts(elements) -> str:  # type: ignore[no-untyped-def]
    """The elements' Markdown bodies as read on screen (the console escapes user text, ``steward\\-anna``)."""
    return re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", "\n".join(str(e.value) for e in elements)).replace(
        "\u2060", ""
    )


# ----------------------------------------------------------------------------- the read model (core)
def test_worst_branch_status_order() -> None:
    order = sorted(BranchStatus, key=lambda s: s.rank)
    assert order == [
        BranchStatus.INCOMPLETE,
        BranchStatus.FAILED,
        BranchStatus.NOT_AUDITED,
        BranchStatus.STALE,
        BranchStatus.WARNED,
        BranchStatus.PASSED,
    ]
    assert worst_branch_status(["passed", "stale", "warned"]) is BranchStatus.STALE
    assert worst_branch_status([BranchStatus.PASSED, BranchStatus.FAILED]) is BranchStatus.FAILED
    with pytest.raises(ValueError):
        worst_branch_status([])


def test_batch_rows_one_row_per_batch(lake: Lakehouse) -> None:
    rows = {r.batch: r for r in batch_rows(lake)}
    assert sorted(rows) == ["wk1", "wk2"]  # solo is a plain branch: no batch row
    wk1, wk2 = rows["wk1"], rows["wk2"]
    assert wk1.tables == (str(ITM), str(ORD))  # sorted, as the batch's tables
    assert (wk1.status, wk1.rows_added, wk1.main_moved) == (BranchStatus.FAILED, 3, False)
    assert wk1.failed_checks == (f"{ITM}: {REFS}",)
    assert set(wk1.authors) == {ANN, SAM}
    assert (wk1.review, wk1.approvals) == (ReviewState.NONE, 0)  # no policy asks for approvals here
    assert [(b.table, b.branch) for b in wk1.branches] == [(str(ITM), "wk1"), (str(ORD), "wk1")]
    assert wk1.member(str(ORD), "wk1") and not wk1.member(str(ORD), "solo")
    assert (wk2.status, wk2.rows_added, wk2.failed_checks, wk2.authors) == (
        BranchStatus.PASSED,
        2,
        (),
        (SAM,),
    )
    assert wk1.created is not None and wk1.last_audit_at is not None
    assert api.batch_rows(api.open_context(lake)) == batch_rows(lake)


# ----------------------------------------------------------------------------- the console
def test_branches_page_lists_a_batch_as_one_row(env: Lakehouse) -> None:
    at = app_test("pages/branches.py")
    df = at.dataframe[0].value.data if hasattr(at.dataframe[0].value, "data") else at.dataframe[0].value
    by_branch = {b: df[df["branch"] == b] for b in ("wk1", "wk2", "solo")}
    assert all(len(x) == 1 for x in by_branch.values()), df[["table", "branch"]]  # a batch: ONE row
    wk1 = by_branch["wk1"].iloc[0]
    assert wk1["review"] == "/review?batch=wk1"
    assert (wk1["table"], wk1["status"], wk1["rows_added"]) == ("shop.items, shop.orders", "✖ failed", 3)
    assert wk1["failed_checks"] == f"{ITM}: {REFS}" and bool(wk1["batch"])
    solo = by_branch["solo"].iloc[0]  # a plain branch's row as today
    assert (solo["review"], solo["table"], solo["status"]) == (
        "/review?table=shop.orders&branch=solo",
        "shop.orders",
        "✔ passed",
    )
    assert not bool(solo["batch"])
    assert "3 of 3 open branches and batches" in _texts(at.caption)
    links = {p.label: p for p in at.get("page_link")}
    assert any(label.startswith("Batch wk1") for label in map(_unescape, links))
    at.multiselect[0].select(str(ITM)).run()  # the table filter keeps the batches holding the table
    df = at.dataframe[0].value.data if hasattr(at.dataframe[0].value, "data") else at.dataframe[0].value
    assert sorted(df["branch"]) == ["wk1", "wk2"]


def _unescape(text: str) -> str:
    return re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", text).replace("\u2060", "")


def test_batch_review_shows_each_table_cross_table_checks_first(env: Lakehouse) -> None:
    at = app_test("pages/review.py", batch="wk1")
    heads = [_unescape(str(m.value)) for m in at.markdown if str(m.value).startswith("###")]
    cross = next(i for i, h in enumerate(heads) if h.startswith("#### Cross-table checks"))
    per_table = [i for i, h in enumerate(heads) if h.startswith("### ")]
    assert [heads[i] for i in per_table][:2] == ["### shop.items", "### shop.orders"], heads
    assert cross < per_table[0]
    shown = _texts([*at.error, *at.warning, *at.success, *at.info, *at.markdown, *at.caption])
    assert f"**{REFS}** (references on order_id) — **failed**" in shown  # the evidence, with its rows
    assert "Atomic on this catalog: **yes**: every table's main moves in one database transaction" in shown
    assert "only against failures" not in shown  # this catalog's guarantee only, not both legends as one
    assert any("failing-row sample" in e.label.lower() for e in at.expander)
    ready = api.batch_readiness(api.open_context(env), "wk1")
    assert not ready.allowed and ready.message in _texts(at.warning)
    assert len(at.get("vega_lite_chart")) + len(at.get("arrow_data_frame")) >= 1  # the diffs (Spark) ran


def test_batch_review_of_no_open_batch_is_one_line(env: Lakehouse) -> None:
    at = app_test("pages/review.py", batch="nope")
    assert "No open batch 'nope': the journal has no record of it: it never existed here" in _texts(
        at.warning
    )
    assert [p for p in at.get("page_link") if "branches" in p.label.lower()]
    at = app_test("pages/review.py", batch="<b>x")  # not a name at all: the validation's one line, escaped
    assert "invalid branch name" in _texts(at.error)


def test_ingest_adds_a_table_to_an_open_batch(env: Lakehouse) -> None:
    home = Path(env.settings.home)
    for table, path, pick in (
        (ORD, _orders(env, "o4", [(6, "fay")]), "New batch…"),
        (ITM, _items(env, "i4", [(14, 6)]), "wk3"),
    ):
        at = app_test("pages/ingest.py")
        at.radio(key="ingest_source").set_value("Server-side path").run()
        at.selectbox(key="ingest_table").set_value(str(table)).run()
        at.selectbox(key="ingest_batch").set_value(pick).run()
        if pick == "New batch…":
            at.text_input(key="ingest_batch_name").input("wk3")
        at.text_input(key="ingest_path").input(path)
        next(b for b in at.button if b.label == "Ingest and audit").click().run()
        assert not at.exception, [e.value for e in at.exception]
        assert not at.error, _texts(at.error)
        links = [p for p in at.get("page_link") if "batch wk3" in _unescape(p.label)]
        assert links, [p.label for p in at.get("page_link")]
        assert home.exists()
    assert load_batch(env, "wk3").table_ids == (ITM, ORD)


def _button(at: AppTest, label: str):  # type: ignore[no-untyped-def]
    found = [b for b in at.button if b.label == label]
    assert found, f"no button {label!r}; buttons: {[b.label for b in at.button]}"
    return found[0]


def test_batch_review_discard_needs_a_reason_and_drops_every_branch(env: Lakehouse) -> None:
    mains = {t: refs(env, t)["main"] for t in (ORD, ITM)}
    at = app_test("pages/review.py", batch="wk3")
    _button(at, "Discard batch").click().run()
    _button(at, "Confirm").click().run()  # a reason is required
    assert "needs a reason" in _texts(at.error)
    assert all("wk3" in refs(env, t) for t in (ORD, ITM))
    at.text_input(key="batch_discard_reason").input("the orders file was a test")
    _button(at, "Confirm").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert "Discarded batch wk3 (the orders file was a test)" in _texts(at.success)
    assert not at.warning  # no "no open batch" under this session's own discard
    assert all("wk3" not in refs(env, t) and refs(env, t)["main"] == mains[t] for t in (ORD, ITM))
    # a later visit: the journal says who discarded it, when and why (not "published, discarded or never existed")
    again = _texts(app_test("pages/review.py", batch="wk3").warning)
    assert "No open batch 'wk3': it was discarded by" in again and "the orders file was a test" in again, (
        again
    )


def test_batch_review_publish_moves_every_main(env: Lakehouse) -> None:
    heads = {t: refs(env, t)["wk2"] for t in (ORD, ITM)}
    at = app_test("pages/review.py", batch="wk1")  # failed: Publish disabled with the reason, Force offered
    assert _button(at, "Publish batch").disabled and _button(at, "Force publish batch")
    at = app_test("pages/review.py", batch="wk2")
    pub = _button(at, "Publish batch")
    assert not pub.disabled
    pub.click().run()
    _button(at, "Confirm").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert "Published batch wk2: every main moved together" in _texts(at.success)
    for t in (ORD, ITM):  # read back with PyIceberg: both mains at their audited heads, the batch tag
        now = refs(env, t)
        assert now["main"] == heads[t] and "wk2" not in now and now.get("batch-wk2") == heads[t]
    assert env.journal.history(str(ORD), action="publish")[0].user == USER
    wk1 = next(r for r in batch_rows(env) if r.batch == "wk1")  # main moved under both of wk1's tables
    assert wk1.main_moved and all(b.main_moved for b in wk1.branches)


# ----------------------------------------------------------------------------- the batch's review actions
def _as(lake: Lakehouse, monkeypatch: pytest.MonkeyPatch, user: str) -> None:
    """The console as ``user`` under the review tests' access file (the other tests run without one)."""
    import streamlit as st

    access = Path(lake.settings.home) / "review-access.yml"
    if not access.exists():
        access.write_text(REVIEW_ACCESS)
    use_env(monkeypatch, lake_env(lake.settings, user, roots=True, WAP_ACCESS=str(access)))
    st.cache_data.clear()


def test_batch_review_actions_are_role_gated(env: Lakehouse, monkeypatch: pytest.MonkeyPatch) -> None:
    _as(env, monkeypatch, VIEWER)  # a viewer: no re-run, no rebase, no approval, no request for changes
    at = app_test("pages/review.py", batch="wk1")
    assert all(
        _button(at, b).disabled for b in ("Re-run audit", "Rebase batch", "Approve batch", "Request changes")
    )
    _as(
        env, monkeypatch, USER
    )  # a steward may re-run the audit and rebase (wk2 moved both mains), not review
    at = app_test("pages/review.py", batch="wk1")
    assert not _button(at, "Re-run audit").disabled and not _button(at, "Rebase batch").disabled
    pub = app_test("pages/review.py", batch="wk2")  # published: its Roll back batch is an admin's
    assert _button(pub, "Roll back batch").disabled and "may not roll back" in _texts(pub.caption)
    assert _button(at, "Approve batch").disabled and _button(at, "Request changes").disabled
    _as(
        env, monkeypatch, ANN
    )  # an approver who wrote shop.orders may not approve the batch (its every table)
    at = app_test("pages/review.py", batch="wk1")
    assert _button(at, "Approve batch").disabled and not _button(at, "Request changes").disabled
    assert "the author of a branch cannot approve it" in _texts(at.caption)
    assert "**Awaiting approval**" in _texts(at.warning)


def test_batch_review_approve_and_request_changes(env: Lakehouse, monkeypatch: pytest.MonkeyPatch) -> None:
    _as(env, monkeypatch, BOB)
    at = app_test("pages/review.py", batch="wk1")
    _button(at, "Request changes").click().run()
    _button(at, "Confirm").click().run()  # a request for changes needs a comment
    assert "Say what must change." in _texts(at.error)
    ctx = api.open_context(env)
    assert all(not api.review_state(ctx, t, "wk1").changes_requested for t in (ORD, ITM))
    at.text_input(key="batch_changes_comment").input("order 99 is <b>unknown</b>")
    _button(at, "Confirm").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert "Changes requested on batch wk1 (shop.items, shop.orders): order 99 is <b>unknown</b>" in _texts(
        at.success
    )
    assert all(api.review_state(ctx, t, "wk1").state is ReviewState.CHANGES_REQUESTED for t in (ORD, ITM))
    assert "**Changes requested**" in _texts(at.error)

    _button(at, "Approve batch").click().run()
    _button(at, "Confirm").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert "Approved batch wk1 on every table's head (shop.items, shop.orders)" in _texts(at.success)
    heads = load_batch(env, "wk1").heads
    for t in (ORD, ITM):  # each table's review: bob's approval, bound to the batch's set of heads
        rs = api.review_state(ctx, t, "wk1")
        assert rs.approved_by == [BOB] and not rs.changes_requested, rs
        assert rs.approvals[0].bound_to == heads
    shown = _texts([*at.success, *at.markdown])
    assert "**Approved**" in shown and f"approved by {BOB}" in shown


def test_batch_review_rerun_audit_reaudits_the_table_that_moved(
    env: Lakehouse, monkeypatch: pytest.MonkeyPatch
) -> None:
    items = env.table(ITM)  # a new commit on shop.items' branch (PyIceberg), not audited
    items.append(
        pa.Table.from_pylist([{"id": 15, "order_id": 3}], schema=items.schema().as_arrow()), branch="wk1"
    )
    ctx = api.open_context(env)
    rs = api.review_state(ctx, ORD, "wk1")  # bob's approval is dismissed on every table, also shop.orders
    assert not rs.approvals and [r.user for r in rs.dismissed] == [BOB]
    _as(env, monkeypatch, USER)
    at = app_test("pages/review.py", batch="wk1")
    assert f"Dismissed: {BOB}'s review (approved)" in _texts(at.caption)
    before = env.journal.latest_audit(str(ORD), "wk1")
    _button(at, "Re-run audit").click().run()
    assert not at.exception, [e.value for e in at.exception]
    msg = _texts([*at.success, *at.warning])
    assert f"Batch wk1 re-audited by {USER}: shop.items (failed)" in msg, msg
    assert "shop.orders" not in msg.split("re-audited")[1].split(";")[0]
    after = env.journal.latest_audit(str(ITM), "wk1")
    assert after is not None and after.snapshot_id == refs(env, ITM)["wk1"]  # audited at its new head
    assert env.journal.latest_audit(str(ORD), "wk1") == before  # shop.orders' audit stands
    _button(at, "Re-run audit").click().run()  # nothing stale now: one line says so
    assert "Nothing to re-run in batch wk1" in _texts(at.info)


def test_a_passed_audit_that_read_an_older_head_of_another_table_is_not_green(env: Lakehouse) -> None:
    """Issue 40 item 12: shop.items' audit passed, reading shop.orders at the batch's head of then; shop.orders'
    branch moved since (audited alone). The verdict says which audit to run again, never a green "every
    table's audit passed" beside "Publish is disabled: ... audit the batch again"."""
    assert ingest(env, ORD, [_orders(env, "o9", [(9, "ivy")])], batch="wk9", user=SAM).audit.passed
    assert ingest(env, ITM, [_items(env, "i9", [(19, 9)])], batch="wk9", user=SAM).audit.passed
    orders = env.table(ORD)
    orders.append(
        pa.Table.from_pylist([{"id": 90, "name": "jo"}], schema=orders.schema().as_arrow()), branch="wk9"
    )
    ctx = api.open_context(env)
    assert api.run_audit(ctx, ORD, "wk9").passed  # shop.orders alone: shop.items read its older head
    ready = api.batch_readiness(ctx, "wk9")
    assert not ready.allowed and ready.code == "stale", ready
    at = app_test("pages/review.py", batch="wk9")
    assert not at.exception, [e.value for e in at.exception]
    assert not [s for s in _texts(at.success).split("\n") if "Every table's audit passed" in s]
    assert "Audits to run again — 1 of 2 tables:** **shop.items**" in _texts(at.warning)
    api.discard_batch(ctx, "wk9", reason="a test batch")


def test_a_table_s_review_inside_a_batch_leads_to_the_batch_s_review(env: Lakehouse) -> None:
    """Issue 40 item 12: the one-table Review of a batch's table says Publish is the batch's, with a link to
    the batch's Review, not a CLI line (``wap publish --batch``)."""
    at = app_test("pages/review.py", table=str(ORD), branch="wk1")
    assert not at.exception, [e.value for e in at.exception]
    warn = _texts(at.warning)
    assert "shop.orders · wk1 is published with the other tables of batch wk1, all or none" in warn, warn
    assert "wap publish --batch" not in warn
    assert [p for p in at.get("page_link") if "Publish batch wk1 from its Review" in p.label]


def test_branches_says_a_passed_branch_whose_main_moved_needs_a_rebase(env: Lakehouse) -> None:
    """Issue 40 item 12: ``solo`` passed, then batch wk2 moved shop.orders' main: Branches does not show it
    green ("passed") with "main moved" off-screen; the status says to rebase first, main moved beside it."""
    at = app_test("pages/branches.py")
    df = at.dataframe[0].value.data if hasattr(at.dataframe[0].value, "data") else at.dataframe[0].value
    solo = df[df["branch"] == "solo"].iloc[0]
    assert (solo["status"], bool(solo["main_moved"])) == ("✔ passed · rebase first", True)
    assert list(df.columns).index("main_moved") == list(df.columns).index("status") + 1
