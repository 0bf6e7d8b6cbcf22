"""The Streamlit console under AppTest, against a real (small) lakehouse on the shared SparkSession.

One module-scoped lakehouse ``shop.orders`` with a published first batch and open branches:
``bad_batch`` (fails not_null + positive_amount), ``good_batch`` (passes), ``late_batch`` (passes;
main moves under it once good_batch is published). Tests run in file order and change that state.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import app_test, lake_env, lake_settings, use_env, write_csv
from streamlit.testing.v1 import AppTest

from wap_core import Lakehouse, TableId
from wap_core.analysis import explore
from wap_core.exceptions import ValidationError
from wap_core.values import to_jsonable
from wap_core.workflow.ingest import ingest
from wap_core.workflow.publish import publish

ORDERS = TableId("shop", "orders")
CHECKS = """\
shop.orders:
  checks:
    - not_null: [amount]
    - expression: {name: positive_amount, sql: "amount > 0"}
    - accepted_values: {column: city, values: [Paris, Lyon, Nice]}
"""
USER = "steward-anna"
_names = itertools.count(1)


def _csv(path: Path, rows: list[tuple[int, str, str, str]]) -> str:
    return write_csv(path, ["id", "customer", "amount", "city"], rows)


@pytest.fixture(scope="module")
def shop(tmp_path_factory: pytest.TempPathFactory, spark_session: None) -> Lakehouse:
    home = tmp_path_factory.mktemp("console")
    settings = lake_settings(home, f"console{next(_names)}", CHECKS, ingest_roots=(home / "src",))
    lh = Lakehouse(settings)
    src = home / "src"
    src.mkdir()
    cities = ["Paris", "Lyon", "Nice"]
    first = ingest(
        lh,
        ORDERS,
        [_csv(src / "first.csv", [(i, f"c{i}", f"{10 + i}.5", cities[i % 3]) for i in range(1, 41)])],
        create=True,
        branch="initial",
    )
    assert first.audit.status == "passed", to_jsonable(first.audit)
    publish(lh, ORDERS, "initial")
    bad_rows = [(100 + i, f"c{i}", f"{5 + i}.0", cities[i % 3]) for i in range(20)]
    bad_rows += [
        (200, "nobody", "", "Paris"),
        (201, "refund", "-3.0", "Lyon"),
        (202, "refund2", "-1.0", "Nice"),
    ]
    bad = ingest(lh, ORDERS, [_csv(src / "bad.csv", bad_rows)], branch="bad_batch")
    assert bad.audit.status == "failed"
    for branch, first_id, amount, n in (("good_batch", 300, 20, 25), ("late_batch", 400, 30, 5)):
        name = branch.removesuffix("_batch")
        rows = [(first_id + i, f"{name[0]}{i}", f"{amount + i}.0", cities[i % 3]) for i in range(n)]
        assert ingest(lh, ORDERS, [_csv(src / f"{name}.csv", rows)], branch=branch).audit.status == "passed"
    _csv(src / "more.csv", [(500 + i, f"m{i}", f"{40 + i}.0", "Lyon") for i in range(7)])
    return lh


@pytest.fixture
def env(shop: Lakehouse, monkeypatch: pytest.MonkeyPatch) -> Iterator[Lakehouse]:
    use_env(monkeypatch, lake_env(shop.settings, USER, roots=True))
    yield shop


def _review(table: str, branch: str) -> AppTest:
    return app_test("pages/review.py", table=table, branch=branch)


def _button(at: AppTest, label: str):  # type: ignore[no-untyped-def]
    found = [b for b in at.button if b.label == label]
    assert found, f"no button {label!r}; buttons: {[b.label for b in at.button]}"
    return found[0]


def _refs(lh: Lakehouse) -> dict[str, int]:
    return {name: ref.snapshot_id for name, ref in lh.table(ORDERS).metadata.refs.items()}


def _texts(elements) -> str:  # type: ignore[no-untyped-def]
    """The elements' Markdown bodies as read on screen: the console escapes user text (``steward\\-anna``)."""
    # (and puts an invisible word joiner in ``://``, ``www.`` and after ``@`` so no autolink forms)
    return re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", "\n".join(str(e.value) for e in elements)).replace(
        "\u2060", ""
    )


# ----------------------------------------------------------------------------- metadata pages, no Spark
def test_metadata_pages_render_without_spark(env: Lakehouse, monkeypatch: pytest.MonkeyPatch) -> None:
    import wap_core.lake.spark as spark_mod

    def no_spark(*_a: object, **_k: object) -> None:
        raise AssertionError("a metadata page tried to start Spark")

    monkeypatch.setattr(spark_mod, "get_spark", no_spark)
    at = app_test()  # Overview
    assert at.title[0].value == "Overview"
    assert "bad_batch" in at.dataframe[1].value.to_string()
    assert any(m.label.endswith("failed") and m.value == "1" for m in at.metric)
    assert len(at.get("vega_lite_chart")) >= 1  # audit outcomes over time (Altair)
    assert "Signed in as **steward-anna**" in _texts(at.sidebar.caption)
    for page, title in (("branches", "Branches"), ("history", "History"), ("checks", "Checks")):
        at.switch_page(f"pages/{page}.py").run()
        assert not at.exception, (page, [e.value for e in at.exception])
        assert at.title[0].value == title
    # Branches: every open branch with a review link, filterable by status.
    at.switch_page("pages/branches.py").run()
    df = at.dataframe[0].value.data if hasattr(at.dataframe[0].value, "data") else at.dataframe[0].value
    assert set(df["branch"]) == {"bad_batch", "good_batch", "late_batch"}
    assert "/review?table=shop.orders&branch=bad_batch" in set(df["review"])
    at.multiselect[1].select("failed").run()
    df = at.dataframe[0].value.data if hasattr(at.dataframe[0].value, "data") else at.dataframe[0].value
    assert list(df["branch"]) == ["bad_batch"]


def test_sidebar_reports_spark_status(env: Lakehouse) -> None:
    at = app_test()
    from wap_core.lake.spark import spark_running

    expected = "Spark: running" if spark_running() else "Spark: not started"
    assert expected in _texts(at.sidebar.caption)


# ----------------------------------------------------------------------------- review
def test_review_failing_branch_shows_why_and_disables_publish(env: Lakehouse) -> None:
    at = _review("shop.orders", "bad_batch")
    errors = _texts(at.error)
    assert "Audit failed" in errors and "not_null(amount)" in errors and "positive_amount" in errors
    pub = _button(at, "Publish")
    assert pub.disabled
    assert "Publish is disabled" in _texts(at.warning) and "audit failed" in _texts(at.warning)
    # Metadata diff first: rows added from snapshot summaries.
    assert next(m.value for m in at.metric if m.label == "Rows added") == "23"
    # Spark diff rendered (rows counted by Spark) and a preview of the new rows.
    assert [m.value for m in at.metric if m.label == "Rows added (counted)"] == ["23"]
    assert any(
        len(d.value) == 23
        for d in at.dataframe
        if hasattr(d.value, "__len__") and not hasattr(d.value, "data")
    )
    assert _button(at, "Re-run audit") and _button(at, "Discard")
    assert not [b for b in at.button if b.label == "Rebase"]  # main did not move
    # amount's distribution moved more than its null rate, but its not_null check failed: it is charted
    # (and scored) by its null rate, and the chart says which check (issue 28, 5).
    specs = [str(c.proto.spec) for c in at.get("vega_lite_chart")]
    assert any("amount: null rate, main vs batch" in s for s in specs), specs
    assert not any("amount: quantiles" in s for s in specs), specs
    charts = [t for t in _texts(at.caption).splitlines() if t.startswith("Chart ")]
    amount = next(t for t in charts if " · amount — " in t)
    assert "null rate" in amount and "failed: not_null(amount)" in amount, charts
    stated = [float(re.search(r"\(change (\d+\.\d+)\)", t).group(1)) for t in charts]  # type: ignore[union-attr]
    assert stated == sorted(stated, reverse=True), charts  # by the score each chart states


def test_review_rerun_audit_records_user(env: Lakehouse) -> None:
    before = len(env.journal.audit_record(str(ORDERS)))
    at = _review("shop.orders", "bad_batch")
    _button(at, "Re-run audit").click().run()
    assert not at.exception
    assert "Audit re-run by steward-anna: failed" in _texts(at.warning)
    record = env.journal.audit_record(str(ORDERS))
    assert len(record) == before + 1 and record[0].user == USER and record[0].status == "failed"


def test_review_force_publish_needs_a_reason(env: Lakehouse) -> None:
    refs = _refs(env)
    at = _review("shop.orders", "bad_batch")
    _button(at, "Force publish").click().run()
    assert _button(at, "Confirm")
    _button(at, "Confirm").click().run()  # no reason typed
    assert "A forced publish needs a reason." in _texts(at.error)
    assert _refs(env) == refs
    _button(at, "Cancel").click().run()
    assert not [b for b in at.button if b.label == "Confirm"]


def test_review_discard_with_confirm_and_reason(env: Lakehouse) -> None:
    refs = _refs(env)
    at = _review("shop.orders", "bad_batch")
    _button(at, "Discard").click().run()
    _button(at, "Confirm").click().run()  # a reason is required
    assert "needs a reason" in _texts(at.error)
    assert "bad_batch" in _refs(env)
    at.text_input(key="discard_reason").input("negative refunds and a blank amount")
    _button(at, "Confirm").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert "Discarded shop.orders · bad_batch" in _texts(at.success)
    now = _refs(env)
    assert "bad_batch" not in now
    assert now["main"] == refs["main"]
    entry = env.journal.history(str(ORDERS), branch="bad_batch", action="discard")[0]
    assert entry.user == USER and entry.reason == "negative refunds and a blank amount"


def test_review_publish_passing_branch_then_rebase_the_other(env: Lakehouse) -> None:
    refs = _refs(env)
    at = _review("shop.orders", "good_batch")
    pub = _button(at, "Publish")
    assert not pub.disabled
    pub.click().run()
    _button(at, "Confirm").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert "Published shop.orders · good_batch" in _texts(at.success)
    now = _refs(env)
    assert now["main"] == refs["good_batch"] and "good_batch" not in now
    assert env.journal.history(str(ORDERS), action="publish")[0].user == USER
    # late_batch forked before that publish: main moved, so Publish is disabled and Rebase is offered.
    at = _review("shop.orders", "late_batch")
    assert _button(at, "Publish").disabled
    assert "main moved" in _texts(at.warning)
    _button(at, "Rebase").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert "Rebased shop.orders late_batch" in _texts(at.success)
    from wap_core.lake.catalog import lineage

    assert not lineage(env.table(ORDERS), "late_batch").main_moved


def _interrupted_after_its_header() -> None:
    """A page whose run after a write is interrupted once after its header (``st.rerun()`` raises the same
    RerunException a newer rerun request raises at any Streamlit call), run by the console's ``run_page``."""
    import streamlit as st

    from pages import _common as ui

    class Nav:  # what st.navigation returns: run() runs the page
        @staticmethod
        def run() -> None:
            ui.show_flash()
            st.write(f"closed: {ui.take('closed')}")
            if st.session_state.pop("interrupt", False):
                st.rerun()
            if st.button("Confirm"):
                ui.flash("success", "Discarded t · b")
                st.session_state["closed"] = "b"
                st.session_state["interrupt"] = True
                st.rerun()

    ui.run_page(Nav())


def test_a_write_s_message_survives_a_run_interrupted_after_showing_it() -> None:
    """CI s34/s35: a discard was done and journaled, yet its success line never showed: the message was popped
    by a run that a newer rerun request interrupted. It is consumed only when a run of the page ends."""
    at = AppTest.from_function(_interrupted_after_its_header, default_timeout=60).run()
    at.button[0].click().run()  # the write's run, then one interrupted after its header, then a whole one
    assert not at.exception, [e.value for e in at.exception]
    assert _texts(at.success) == "Discarded t · b"
    assert "closed: b" in [m.value for m in at.markdown]
    at.run()  # the next run: shown once, consumed
    assert not at.success and "closed: None" in [m.value for m in at.markdown]


def test_review_of_missing_branch_and_bad_link(env: Lakehouse) -> None:
    at = _review("shop.orders", "bad_batch")  # discarded above
    assert "is not open" in _texts(at.warning)
    assert "it was discarded by " in _texts(at.warning)  # the journal says which (issue 40 item 13)
    at = _review("shop.orders", "never_here")
    assert "the journal has no record of it: it never existed here" in _texts(at.warning)
    at = _review("shop.orders", "no;drop")
    assert "invalid branch name" in _texts(at.error)


# ----------------------------------------------------------------------------- ingest, explore
def test_ingest_server_path_links_to_review(env: Lakehouse) -> None:
    at = app_test()
    at.switch_page("pages/ingest.py").run()
    assert not [t for t in at.text_input if t.key in ("ingest_path", "ingest_new_table")]  # upload, a table
    at.radio(key="ingest_source").set_value("Server-side path")
    at.selectbox(key="ingest_table").set_value("shop.orders")
    at.run()
    at.text_input(key="ingest_path").input(str(env.settings.home / "src" / "more.csv"))
    at.text_input(key="ingest_branch").input("more_batch")
    _button(at, "Ingest and audit").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert "Branch **more_batch** of **shop.orders**: 7 rows written" in _texts(at.success)
    assert "more_batch" in _refs(env)
    assert env.journal.history(str(ORDERS), branch="more_batch", action="ingest")[0].user == USER


def test_ingest_submitted_before_its_upload_arrived_says_to_click_again(env: Lakehouse) -> None:
    """The upload form submitted with no file (as the browser does when a file was dropped just before the click
    and its upload had not begun): one refusal line that names that case, nothing written."""
    at = app_test()
    at.switch_page("pages/ingest.py").run()
    at.selectbox(key="ingest_table").set_value("shop.orders")
    at.run()
    refs_before = _refs(env)
    _button(at, "Ingest and audit").click().run()
    assert not at.exception, [e.value for e in at.exception]
    errors = _texts(at.error)
    assert (
        "choose a file to upload" in errors
        and "upload had not finished: click Ingest and audit again" in errors
    )
    assert _refs(env) == refs_before


def test_explore_sql_is_read_only(env: Lakehouse) -> None:
    at = app_test()
    at.switch_page("pages/explore.py").run()
    assert not at.exception
    refs_before = _refs(env)
    at.text_area[0].input("DROP TABLE ref_view")
    at.button[-1].click().run()  # Run query
    assert "read-only" in _texts(at.error)
    at.text_area[0].input("SELECT city, count(*) AS n FROM ref_view GROUP BY city ORDER BY city")
    at.button[-1].click().run()
    assert not at.error and not at.exception, (_texts(at.error), [e.value for e in at.exception])
    result = at.dataframe[-1].value
    assert list(result["city"]) == ["Lyon", "Nice", "Paris"]
    assert _refs(env) == refs_before


def test_explore_module_refuses_writes(env: Lakehouse) -> None:
    spark = env.spark
    assert explore.check_read_only(spark, "WITH a AS (SELECT id FROM ref_view) SELECT * FROM a")
    for sql in (
        "INSERT INTO ref_view VALUES (1)",
        "SELECT 1; DROP TABLE x",
        f"SELECT * FROM {env.settings.catalog_name}.shop.orders",
        "WITH a AS (SELECT 1) INSERT INTO t SELECT * FROM a",
        "SELECT reflect('java.lang.System', 'exit', 0)",
        "SELECT * FROM parquet.`/etc`",
        "CACHE TABLE ref_view",
        "",
    ):
        with pytest.raises(ValidationError):
            explore.check_read_only(spark, sql)
    tbl = env.table(ORDERS)
    ref = explore.resolve_ref(tbl, ORDERS, "branch", "main")
    got = explore.rows(env, ORDERS, ref.snapshot_id, [("city", "=", "Lyon")], limit=1000)
    assert len(got) > 0 and set(got["city"]) == {"Lyon"}
    with pytest.raises(ValidationError):
        explore.rows(env, ORDERS, ref.snapshot_id, [("amount; drop", "=", "1")])


def _two_pages() -> None:
    """A page (``review``, or the one named in ``go``) whose buttons queue results, run by ``run_page``."""
    import streamlit as st

    from pages import _common as ui

    class Nav:
        url_path = st.session_state.get("go", "review")

        def run(self) -> None:
            ui.show_flash()
            if st.button("Two results"):
                ui.flash("info", "Nothing to re-run")
                ui.flash("success", "Published batch w2")
                st.rerun()
            if st.button("Queue"):
                ui.flash("success", "Rebased batch w2")

    ui.run_page(Nav())


def test_a_result_shows_once_on_its_own_page_and_replaces_the_one_before() -> None:
    """Issue 40 item 3: a result shows on the page where its action was taken, once, and replaces the one before;
    one the steward left unseen is dropped, never shown on the next page."""
    at = AppTest.from_function(_two_pages, default_timeout=60).run()
    at.button[0].click().run()
    assert _texts(at.success) == "Published batch w2" and not at.info  # replaced, not stacked
    at.run()
    assert not at.success  # once
    at.button[1].click().run()  # queued for the next run of the review page...
    at.session_state["go"] = "quarantine"
    at.run()  # ... but the steward went to another page
    assert not at.success
    at.session_state["go"] = "review"
    at.run()
    assert not at.success  # dropped, not kept for later
