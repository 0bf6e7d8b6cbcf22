"""Real Chromium on a batch that spans tables (issue 27 item 3): Branches lists it as one row, its Review shows
every table and publishes them together.

A small lakehouse of its own: ``shop.orders`` and ``shop.items`` (``references`` shop.orders.id), both
published, and the batch ``wk``: a new order and an item of an order already on main (every check passes); orders'
main moves on meanwhile, so the batch is rebased from its Review, then published, then rolled back.
Then the README's tour on the demo, in its order (issue 40 item 2): a demo lakehouse of this module's own (seeded
once; the test publishes every week): the passing week, the two-table batch ``batch_2013_02_w3`` (rebased,
then published from its batch Review), the failing week (rebased, quarantined, published). The console runs with no access file
(everyone is admin).
"""

from __future__ import annotations

from pathlib import Path

import helpers
import pyarrow as pa
import pytest

from wap_core import Lakehouse, Settings, TableId
from wap_core.states import Outcome
from wap_core.workflow.demo import FAILING_BRANCH, PASSING_BRANCH, TWO_TABLE_BATCH, seed_demo
from wap_core.workflow.ingest import ingest
from wap_core.workflow.publish import publish

ORD, ITM = TableId("shop", "orders"), TableId("shop", "items")
CHECKS = """\
shop.orders:
  checks:
    - not_null: [name]
shop.items:
  checks:
    - references: {column: order_id, table: shop.orders, ref_column: id}
"""

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def demo_settings(tmp_path_factory: pytest.TempPathFactory, spark_session: None) -> Settings:
    """A demo lakehouse of this module's own (its test publishes the demo's batch), seeded once."""
    if not Path(helpers.CHROMIUM).exists():
        pytest.skip("Chromium is not installed (make browser-deps)")
    home = tmp_path_factory.mktemp("e2e-demo-batch")
    settings = helpers.lake_settings(home, "e2edemobatch", user="demo-seeder")
    seed_demo(Lakehouse(settings))
    return settings


def test_batch_review_in_the_browser_publishes_every_table(tmp_path: Path, spark_session: None) -> None:
    from playwright.sync_api import expect

    if not Path(helpers.CHROMIUM).exists():
        pytest.skip("Chromium is not installed (make browser-deps)")
    home = tmp_path / "lh"
    settings = helpers.lake_settings(home, "e2ebatch", CHECKS, ingest_roots=(tmp_path,))
    lh = Lakehouse(settings)
    csv = helpers.write_csv
    for t, header, rows in ((ORD, ("id", "name"), [(1, "ann")]), (ITM, ("id", "order_id"), [(10, 1)])):
        assert ingest(
            lh, t, [csv(tmp_path / f"{t.name}0.csv", header, rows)], create=True, branch="first"
        ).audit.passed
        publish(lh, t, "first")
    assert ingest(lh, ORD, [csv(tmp_path / "o1.csv", ("id", "name"), [(2, "bob")])], batch="wk").audit.passed
    assert ingest(lh, ITM, [csv(tmp_path / "i1.csv", ("id", "order_id"), [(11, 1)])], batch="wk").audit.passed
    orders = lh.catalog.load_table(ORD.tuple)  # another writer moves orders' main: the batch must be rebased
    orders.append(pa.table({"id": [3], "name": ["cy"]}).cast(orders.schema().as_arrow()))
    before = {t: lh.catalog.load_table(t.tuple).metadata.refs["main"].snapshot_id for t in (ORD, ITM)}

    env = helpers.console_env(**helpers.lake_env(settings, "steward-e2e", WAP_SPARK_EAGER="0"))
    with helpers.console(env, home / "streamlit.log") as base, helpers.browser_page() as page:
        page.goto(f"{base}/branches")
        expect(page.get_by_text("Batch wk · shop.items, shop.orders").first).to_be_visible()
        expect(page.get_by_text("1 of 1 open branches and batches")).to_be_visible()  # ONE row for the batch
        page.goto(f"{base}/review?batch=wk")
        expect(page.get_by_text("Batch wk · 2 tables: shop.items, shop.orders")).to_be_visible()
        expect(page.get_by_text("Cross-table checks")).to_be_visible()
        # the cross-table check, passed (Streamlit's Markdown draws "->" as an arrow)
        expect(page.get_by_text("references(order_id → shop.orders.id)").first).to_be_visible()
        expect(page.get_by_text("Atomic on this catalog: yes")).to_be_visible()
        # orders' main moved: Publish waits for a rebase; Rebase batch replays and audits the batch again
        expect(page.get_by_text("Publish is disabled")).to_be_visible()
        helpers.page_idle(page)
        page.get_by_role("button", name="Rebase batch").click()
        expect(
            page.get_by_text("Rebased batch wk: shop.items (up to date), shop.orders (1 row replayed)")
        ).to_be_visible(timeout=300_000)
        expect(page.get_by_text("Ready to publish every table together")).to_be_visible()
        heads = {t: Lakehouse(settings).table(t).metadata.refs["wk"].snapshot_id for t in (ORD, ITM)}
        assert Lakehouse(settings).table(ORD).snapshot_by_id(heads[ORD]).parent_snapshot_id == before[ORD]
        # issue 40 item 1: a person clicks Publish batch and Confirm while the page still computes the diffs; the
        # click is never lost (the test does not wait for the diffs, nor for the page to be idle)
        page.get_by_role("button", name="Publish batch").click()
        dialog = page.get_by_role("dialog")
        dialog.get_by_label("Note (optional)").fill("orders with their items")
        assert page.get_by_text("Diff computed on").count() < 2, (
            "the diffs were done: the test proves nothing"
        )
        dialog.get_by_role("button", name="Confirm").click()
        expect(page.get_by_text("Published batch wk: every main moved together")).to_be_visible(
            timeout=300_000
        )
        after = Lakehouse(settings)
        for t in (
            ORD,
            ITM,
        ):  # read back with PyIceberg: both mains moved to their audited heads, the batch tag
            refs = {name: ref.snapshot_id for name, ref in after.table(t).metadata.refs.items()}
            assert refs["main"] == heads[t] and "wk" not in refs and refs["batch-wk"] == heads[t], refs
        published = after.journal.history(str(ORD), branch="wk", action="publish")
        assert [(e.user, e.reason) for e in published] == [("steward-e2e", "orders with their items")]
        # the published batch stays on its Review: Roll back batch moves every main back, with a reason
        dialog = helpers.open_dialog(
            page, page.get_by_role("button", name="Roll back batch"), ready="Roll back"
        )
        dialog.get_by_label("Reason").fill("wrong week")
        dialog.get_by_role("button", name="Roll back", exact=True).click()
        expect(page.get_by_text("Rolled back batch wk: every main moved back together")).to_be_visible()
        expect(page.get_by_text("Rolled back: every main is where it was")).to_be_visible()
    after = Lakehouse(settings)
    assert {t: after.table(t).metadata.refs["main"].snapshot_id for t in (ORD, ITM)} == before
    rolled = [e for e in after.journal.history(branch="main", action="rollback") if e.intent_id is not None]
    assert {(e.table, e.user, e.reason, e.outcome, e.details.get("batch")) for e in rolled} == {
        (str(t), "steward-e2e", "wrong week", Outcome.ROLLED_BACK, "wk") for t in (ORD, ITM)
    }


def test_the_readme_tour_publishes_all_three_demo_weeks_in_its_order(demo_settings: Settings) -> None:
    """The README's tour, in its order, on the demo (issue 40 item 2): (1) ``audit_2013_02_w1`` published;
    (2) ``batch_2013_02_w3`` (a week of flights with the four island airports they fly to) rebased, since
    main moved with (1), and published from its batch Review: both mains move, the batch tag on each;
    (3) ``audit_2013_02_w2`` rebased (``references`` now passes against the airports on main), its failing
    rows quarantined, and published as a batch with its quarantine table. Every week reaches main, no
    workaround."""
    import re

    from playwright.sync_api import expect

    name, tables = TWO_TABLE_BATCH, (TableId("demo", "airports"), TableId("demo", "flights"))
    flights = TableId("demo", "flights")
    lh = Lakehouse(demo_settings)
    mains = {t: lh.table(t).metadata.refs["main"].snapshot_id for t in tables}
    env = helpers.console_env(**helpers.lake_env(demo_settings, "steward-e2e", WAP_SPARK_EAGER="0"))
    with (
        helpers.console(env, demo_settings.home / "streamlit.log") as base,
        helpers.browser_page(timeout_ms=300_000) as page,
    ):
        # (1) the passing week
        page.goto(f"{base}/review?table=demo.flights&branch={PASSING_BRANCH}")
        expect(page.get_by_text("Ready to publish:")).to_be_visible()
        dialog = helpers.open_dialog(page, page.get_by_role("button", name="Publish", exact=True))
        dialog.get_by_role("button", name="Confirm").click()
        expect(page.get_by_text(f"Published demo.flights · {PASSING_BRANCH}")).to_be_visible()

        # (2) the two-table batch: main of demo.flights moved with (1): rebased, then published together
        page.goto(f"{base}/review?batch={name}")
        expect(page.get_by_text(f"Batch {name} · 2 tables: demo.airports, demo.flights")).to_be_visible()
        page.get_by_role("button", name="Rebase batch").click()
        expect(
            page.get_by_text(re.compile(f"Rebased batch {name}: .*audited again: batch (passed|warned)"))
        ).to_be_visible()
        expect(page.get_by_text("Ready to publish every table together")).to_be_visible()
        dialog = helpers.open_dialog(page, page.get_by_role("button", name="Publish batch"))
        dialog.get_by_role("button", name="Confirm").click()
        expect(page.get_by_text(f"Published batch {name}: every main moved together")).to_be_visible()
        after = Lakehouse(demo_settings)
        for t in tables:  # PyIceberg: both mains moved to the rebased heads, the branch gone, the batch tag
            refs = {n: ref.snapshot_id for n, ref in after.table(t).metadata.refs.items()}
            assert refs["main"] != mains[t] and name not in refs and refs[f"batch-{name}"] == refs["main"], (
                refs
            )

        # (3) the failing week: rebased, references passes against the airports now on main; the failing rows
        # quarantined; the batch (the week and its quarantine table) published
        page.goto(f"{base}/review?table=demo.flights&branch={FAILING_BRANCH}")
        expect(page.get_by_role("button", name="Rebase", exact=True)).to_be_visible()
        page.get_by_role("button", name="Rebase", exact=True).click()
        rebased = page.get_by_text(re.compile(f"Rebased demo.flights {FAILING_BRANCH} onto main"))
        expect(rebased).to_be_visible()
        expect(rebased).not_to_contain_text("references")  # the airports are on main now
        dialog = helpers.open_dialog(
            page, page.get_by_role("button", name="Quarantine failing rows"), ready="Quarantine"
        )
        dialog.get_by_label("Reason").fill("cancelled or unmeasured flights")
        dialog.get_by_role("button", name="Quarantine", exact=True).click()
        expect(
            page.get_by_text(re.compile(r"^Quarantined [\d,]+ of [\d,]+ rows.*audit (passed|warned)"))
        ).to_be_visible(timeout=600_000)
        page.goto(f"{base}/review?batch={FAILING_BRANCH}")
        expect(page.get_by_text("Ready to publish every table together")).to_be_visible()
        dialog = helpers.open_dialog(page, page.get_by_role("button", name="Publish batch"))
        dialog.get_by_role("button", name="Confirm").click()
        expect(
            page.get_by_text(f"Published batch {FAILING_BRANCH}: every main moved together")
        ).to_be_visible()
    end = Lakehouse(demo_settings)
    for week in (PASSING_BRANCH, name, FAILING_BRANCH):  # every week published, none left open
        assert week not in end.table(flights).metadata.refs, week
        published = end.journal.history(str(flights), branch=week, action="publish")
        landed = [(e.outcome, e.user) for e in published if e.intent_id is not None]
        assert landed == [(Outcome.PUBLISHED, "steward-e2e")], (week, landed)
