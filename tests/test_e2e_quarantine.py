"""The demo's failing week repaired end to end in a real browser (issue 29 items 1, 4 and 6).

One demo lakehouse seeded once for the module, one console. On the Review of ``audit_2013_02_w2`` the
Quarantine dialog lists the failing row-level checks ticked; the steward unticks the ``references`` check
(the missing airports are the fix, not the flights) and quarantines the NULL ``dep_time`` / non-positive
``air_time`` rows; Review then shows the batch's quarantine with its counts and a link. The island airports
are added to the batch from the Ingest page, the batch is re-audited and passes, it is published from
``/review?batch=audit_2013_02_w2``; the kept rows are on the Quarantine page (filterable) and download as CSV
and Parquet.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from pathlib import Path

import helpers
import pandas as pd
import pytest

from wap_core import Lakehouse, Settings, TableId
from wap_core.checks import CheckResult
from wap_core.states import CheckStatus
from wap_core.workflow.audit import latest_audit
from wap_core.workflow.demo import FAILING_BRANCH, ISLAND_AIRPORTS
from wap_core.workflow.quarantine import quarantine_table_id

FLIGHTS, AIRPORTS = TableId("demo", "flights"), TableId("demo", "airports")
QFLIGHTS = quarantine_table_id(FLIGHTS)
REVIEW = f"/review?table=demo.flights&branch={FAILING_BRANCH}"

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def demo_settings(tmp_path_factory: pytest.TempPathFactory, spark_session: None) -> Settings:
    from wap_core.workflow.demo import seed_demo

    if not Path(helpers.CHROMIUM).exists():
        pytest.skip("Chromium is not installed (make browser-deps)")
    home = tmp_path_factory.mktemp("quarantine_e2e")
    settings = helpers.lake_settings(home, "quarantinedemo", user="demo-seeder")
    seed_demo(Lakehouse(settings))
    return settings


@pytest.fixture(scope="module")
def server(demo_settings: Settings) -> Iterator[str]:
    env = helpers.console_env(
        **helpers.lake_env(
            demo_settings,
            "steward-e2e",
            WAP_SPARK_EAGER="0",
            WAP_INGEST_ROOTS=str(demo_settings.home / "demo_sources"),
            WAP_QUERY_TIMEOUT="600",
        )
    )
    with helpers.console(env, demo_settings.home / "streamlit.log") as base:
        yield base


@pytest.fixture(scope="module")
def failing(demo_settings: Settings) -> list[CheckResult]:
    audit = latest_audit(Lakehouse(demo_settings), FLIGHTS, FAILING_BRANCH)
    assert audit is not None
    # the dialog's checks: every one with failing rows (a warn-level check too); the core's default ticked
    return [c for c in audit.checks if c.status is CheckStatus.FAILED or (c.failing_rows or 0) > 0]


def _shown(name: str) -> str:
    return name.replace("->", "→")


def test_the_demo_week_is_repaired_in_the_console(
    server: str, demo_settings: Settings, failing: list[CheckResult], tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    refs = [c for c in failing if c.type == "references"]
    rows = [c for c in failing if c.type != "references"]
    assert refs and {c.type for c in rows} >= {"not_null", "expression"}, failing
    with helpers.browser_page(timeout_ms=300_000) as page:
        # 1. the dialog: every failing row-level check ticked; the references one unticked by the steward
        page.goto(server + REVIEW)
        expect(page.get_by_role("heading", name="Quarantine of demo.flights")).to_be_visible()
        dialog = helpers.open_dialog(
            page, page.get_by_role("button", name="Quarantine failing rows"), ready="Quarantine"
        )
        boxes = dialog.get_by_test_id("stCheckbox")
        expect(boxes).to_have_count(len(failing))
        for c in failing:  # (found by the label shown: the box's accessible name is its escaped Markdown)
            box = boxes.filter(has_text=_shown(c.name))
            expect(box).to_contain_text(f"{c.failing_rows:,} failing row")  # each check with its row count
            if c.status is CheckStatus.FAILED and c.level == "fail":
                expect(box.get_by_role("checkbox")).to_be_checked()
            else:  # a warn-level check (pattern(tailnum)), or one passed within its limit: only when ticked
                expect(box.get_by_role("checkbox")).not_to_be_checked()
        assert any(c.level == "warn" for c in failing), failing  # the demo week has one: shown unticked
        for c in refs:
            boxes.filter(has_text=_shown(c.name)).click()
            expect(boxes.filter(has_text=_shown(c.name)).get_by_role("checkbox")).not_to_be_checked()
        dialog.get_by_label("Reason").fill("cancelled or unmeasured flights")
        dialog.get_by_role("button", name="Quarantine", exact=True).click()
        expect(page.get_by_text(re.compile(r"^Quarantined [\d,]+ of [\d,]+ rows"))).to_be_visible(
            timeout=600_000
        )
        lh = Lakehouse(demo_settings)
        kept = int(lh.spark.sql(f"SELECT count(*) FROM {lh.sql_name(QFLIGHTS, FAILING_BRANCH)}").first()[0])
        assert kept > 0
        nulls = f"SELECT count(*) FROM {lh.sql_name(FLIGHTS, FAILING_BRANCH)} WHERE dep_time IS NULL"
        main_nulls = f"SELECT count(*) FROM {lh.sql_name(FLIGHTS)} WHERE dep_time IS NULL"
        assert lh.spark.sql(nulls).first()[0] == lh.spark.sql(main_nulls).first()[0]  # only main's own stay
        # Review shows the batch's quarantine: counts per check, a link to the Quarantine page
        expect(page.get_by_text(f"{kept:,} rows quarantined by steward-e2e")).to_be_visible()
        link = page.get_by_role("link", name=f"Quarantined rows of demo.flights in batch {FAILING_BRANCH}")
        expect(link).to_have_attribute("href", f"/quarantine?table=demo.flights&batch={FAILING_BRANCH}")

        # 2. the island airports join the batch from the Ingest page
        page.goto(f"{server}/ingest?table=demo.airports&batch={FAILING_BRANCH}")
        expect(page.get_by_text("Columns of demo.airports")).to_be_visible()
        helpers.upload(page, ISLAND_AIRPORTS)
        page.get_by_role("button", name="Ingest and audit").click()
        # the demo's open batch_2013_02_w3 holds the same file: the page flags it first
        expect(page.get_by_text("This file was already ingested into demo.airports")).to_be_visible()
        page.get_by_role("button", name="Ingest anyway").click()
        expect(page.get_by_text(f"Branch {FAILING_BRANCH} of demo.airports")).to_be_visible(timeout=600_000)

        # 3. the batch is re-audited, passes and is published from its Review
        page.goto(f"{server}/review?batch={FAILING_BRANCH}")
        expect(page.get_by_text(f"Batch {FAILING_BRANCH} · 3 tables")).to_be_visible()
        helpers.page_idle(page)
        page.get_by_role("button", name="Re-run audit").click()
        expect(page.get_by_text("Ready to publish every table together")).to_be_visible(timeout=600_000)
        # a dialog's submit reruns after the page's run: let the three Spark diffs finish first (as test_e2e_batch)
        expect(page.get_by_text("Diff computed on")).to_have_count(3, timeout=600_000)
        helpers.page_idle(page)
        dialog = helpers.open_dialog(page, page.get_by_role("button", name="Publish batch"))
        dialog.get_by_label("Note (optional)").fill("the week repaired")
        dialog.get_by_role("button", name="Confirm").click()
        expect(
            page.get_by_text(f"Published batch {FAILING_BRANCH}: every main moved together")
        ).to_be_visible()

        # 4. the kept rows are on the Quarantine page, filterable, and download
        page.goto(f"{server}/quarantine?table=demo.flights&batch={FAILING_BRANCH}")
        expect(page.get_by_text(f"Batches · {kept:,} rows kept")).to_be_visible()
        expect(page.get_by_text(f"{kept:,} rows", exact=True)).to_be_visible()
        with page.expect_download() as got:
            page.get_by_role("button", name="Download CSV").click()
        csv = pd.read_csv(io.StringIO(Path(got.value.path()).read_text()))
        assert len(csv) == kept and set(csv["_wap_batch"]) == {FAILING_BRANCH}
        assert set(csv["_wap_reason"]) == {"cancelled or unmeasured flights"}
        assert not csv["_wap_checks"].str.contains("references").any()
        with page.expect_download() as got:
            page.get_by_role("button", name="Download Parquet").click()
        parquet = pd.read_parquet(got.value.path())
        assert len(parquet) == kept and got.value.suggested_filename.endswith(".parquet")
    after = Lakehouse(demo_settings)
    for t in (FLIGHTS, AIRPORTS, QFLIGHTS):  # every table of the batch published: its branch gone
        assert FAILING_BRANCH not in after.table(t).metadata.refs, t
    assert (
        int(after.spark.sql(f"SELECT count(*) FROM {after.sql_name(QFLIGHTS)}").first()[0]) == kept
    )  # the kept rows published with the batch
