"""Evidence first, in a real browser (issue 28, items 3 and 4), on a demo lakehouse seeded once.

Review of the failing demo branch at 1440 x 1000 opens on the verdict and the failing checks with
their rows, above the actions, the approvals and the discussion; each failing check links ALL its
failing rows in Explore (a shareable URL: table, branch, check) where they are read and downloaded as
CSV; the references failure names the table that fixes it and links Ingest with it chosen, which shows
its columns and a template before any upload; an upload refused for its schema ends its status box on
the refusal.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs, quote, urlparse

import helpers
import pytest

from wap_core import Lakehouse, Settings, TableId
from wap_core.checks import CheckResult
from wap_core.workflow.audit import latest_audit
from wap_core.workflow.demo import FAILING_BRANCH

FLIGHTS = TableId("demo", "flights")
AIRLINES = TableId("demo", "airlines")
REVIEW = f"/review?table=demo.flights&branch={FAILING_BRANCH}"

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def demo_settings(tmp_path_factory: pytest.TempPathFactory, spark_session: None) -> Settings:
    from wap_core.workflow.demo import seed_demo

    if not Path(helpers.CHROMIUM).exists():
        pytest.skip("Chromium is not installed (make browser-deps)")
    home = tmp_path_factory.mktemp("evidence")
    settings = helpers.lake_settings(home, "evidencedemo", user="demo-seeder")
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
            # the failing-rows reads are user-started Spark work under WAP_QUERY_TIMEOUT: a loaded test
            # machine (load 20 on 2 cores) needs more than the default minute
            WAP_QUERY_TIMEOUT="600",
        )
    )
    with helpers.console(env, demo_settings.home / "streamlit.log") as base:
        yield base


@pytest.fixture(scope="module")
def failed(demo_settings: Settings) -> list[CheckResult]:
    """The failing branch's failed checks, as the audit stored them (failing first, by name: Review's order)."""
    audit = latest_audit(Lakehouse(demo_settings), FLIGHTS, FAILING_BRANCH)
    assert audit is not None
    return sorted((c for c in audit.checks if c.status.blocks_publish), key=lambda c: (c.status.rank, c.name))


def _shown(name: str) -> str:
    """A check's name as the page shows it (Streamlit's Markdown draws ``->`` as an arrow)."""
    return name.replace("->", "→")


def _top(locator) -> float:  # type: ignore[no-untyped-def]
    locator.wait_for()
    box = locator.bounding_box()
    assert box is not None
    return float(box["y"])


def test_review_opens_on_the_failing_checks_and_their_rows(server: str, failed: list[CheckResult]) -> None:
    from playwright.sync_api import expect

    first = failed[0]
    with helpers.browser_page() as page:
        page.set_viewport_size({"width": 1440, "height": 1000})
        page.goto(server + REVIEW)
        heading = page.get_by_role("heading", name="Failing checks")
        expect(heading).to_be_visible()
        sample = page.get_by_test_id("stExpander").filter(has_text=f"Failing-row sample of {first.name}")
        rows = sample.get_by_test_id("stDataFrame").first
        expect(rows).to_be_visible()

        def section(title: str):  # type: ignore[no-untyped-def]
            return page.locator("h4").filter(has_text=re.compile(f"^{re.escape(title)}$"))

        actions, review, discussion = section("Actions"), section("Review"), section("Discussion")
        metadata = section("What the branch changes (metadata)")
        y = {
            "heading": _top(heading),
            "rows": _top(rows),
            "actions": _top(actions),
            "review": _top(review),
            "discussion": _top(discussion),
            "metadata": _top(metadata),
        }
        # the evidence first: the first failing check's rows come before every other section
        assert y["heading"] < y["rows"] < y["actions"] < y["review"] < y["discussion"] < y["metadata"], y
        assert y["rows"] < 1000, y  # the first failing row is on the first screen
        # every failed check that judges rows links all of them in Explore, by the check's exact name
        for c in failed:
            link = page.get_by_role(
                "link", name=f"Open all {c.failing_rows:,} failing rows of {_shown(c.name)} in Explore"
            )
            expect(link).to_be_visible()
            href = urlparse(link.get_attribute("href") or "")
            assert href.path.rstrip("/").split("/")[-1] == "explore", href
            assert parse_qs(href.query) == {
                "table": ["demo.flights"],
                "branch": [FAILING_BRANCH],
                "check": [c.name],
            }
        # the references failure names the table whose rows fix it and links Ingest with it chosen
        (ref,) = [c for c in failed if c.type == "references"]
        expect(page.get_by_text("the missing values belong in demo.airports")).to_be_visible()
        # ... in the failing branch's batch (issue 40 item 5: "No batch" put the airports on a branch of their own)
        fix = page.get_by_role("link", name=f"Ingest into demo.airports in batch {FAILING_BRANCH}")
        expect(fix).to_have_attribute(
            "href", re.compile(rf"ingest\?table=demo\.airports&batch={FAILING_BRANCH}$")
        )
        assert ref.failing_rows


def _read(page, n: int):  # type: ignore[no-untyped-def]
    """Explore's caption of a failing-rows read of ``n`` rows."""
    return page.get_by_text(re.compile(f"^{n:,} failing rows of the batch of {FAILING_BRANCH}"))


def test_explore_reads_all_failing_rows_of_a_check_and_downloads_them(
    server: str, failed: list[CheckResult], tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    (ref,) = [c for c in failed if c.type == "references"]
    (nulls,) = [c for c in failed if c.type == "not_null"]
    assert ref.failing_rows and nulls.failing_rows and nulls.failing_rows > 20  # more than a sample holds
    with helpers.browser_page() as page:
        # From Review's link: all the references failure's rows (not the 20 of the sample), as CSV too.
        page.goto(server + REVIEW)
        page.get_by_role(
            "link", name=f"Open all {ref.failing_rows:,} failing rows of {_shown(ref.name)} in Explore"
        ).click()
        expect(page).to_have_url(re.compile(r"/explore\?.*check="))
        expect(_read(page, ref.failing_rows)).to_be_visible(timeout=300_000)
        with page.expect_download() as got:
            page.get_by_role("button", name="Download CSV").click()
        path = tmp_path / "references.csv"
        got.value.save_as(path)
        lines = path.read_text().splitlines()
        assert len(lines) == 1 + ref.failing_rows, len(lines)
        dest = lines[0].split(",").index("dest")
        assert {ln.split(",")[dest] for ln in lines[1:]} >= {"SJU", "BQN", "STT", "PSE"}

        # The shareable URL itself, pasted into a fresh page: the NOT NULL check's rows, every one.
        url = (
            f"{server}/explore?table=demo.flights&branch={FAILING_BRANCH}&check={quote(nulls.name, safe='')}"
        )
        page.goto(url)
        expect(_read(page, nulls.failing_rows)).to_be_visible(timeout=300_000)
        expect(page.get_by_role("combobox", name="Changed rows, or failing rows of a check")).to_have_value(
            nulls.name
        )
        with page.expect_download() as got:
            page.get_by_role("button", name="Download CSV").click()
        got.value.save_as(tmp_path / "nulls.csv")
        assert len((tmp_path / "nulls.csv").read_text().splitlines()) == 1 + nulls.failing_rows

        # A check name that is not exactly one of the suite's is refused, never read as a filter.
        page.goto(
            f"{server}/explore?table=demo.flights&branch={FAILING_BRANCH}&check={quote(nulls.name + ' OR 1=1', safe='')}"
        )
        expect(page.get_by_text("has no check named")).to_be_visible()
        expect(page.get_by_role("combobox", name="Changed rows, or failing rows of a check")).to_have_value(
            "(none)"
        )
        expect(page.get_by_text(re.compile("failing rows of the batch"))).to_have_count(0)


def test_ingest_shows_the_referenced_tables_columns_and_a_schema_refusal_ends_its_status(
    server: str, demo_settings: Settings, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    airlines_refs = set(Lakehouse(demo_settings).table(AIRLINES).metadata.refs)
    with helpers.browser_page() as page:
        page.goto(server + REVIEW)
        page.get_by_role("link", name=f"Ingest into demo.airports in batch {FAILING_BRANCH}").click()
        expect(page).to_have_url(re.compile(rf"/ingest\?table=demo\.airports&batch={FAILING_BRANCH}$"))
        expect(page.get_by_role("combobox", name="Table")).to_have_value("demo.airports")
        expect(page.get_by_role("textbox", name="New batch name")).to_have_value(
            FAILING_BRANCH
        )  # the failing batch chosen
        expect(page.get_by_text("Columns of demo.airports")).to_be_visible()
        grid = page.get_by_test_id("stDataFrame").first
        grid.locator("table").first.wait_for(state="attached")
        cells = grid.evaluate(
            "el => Array.from(el.querySelectorAll('table tr')).map(tr => Array.from(tr.querySelectorAll('th,td')).map(c => c.textContent.trim()))"
        )
        assert cells[0][:3] == ["column", "type", "nullable"], cells
        names = [r[0] for r in cells[1:]]
        assert names[:4] == ["faa", "name", "lat", "lon"], cells
        with page.expect_download() as got:
            page.get_by_role("button", name="Template CSV (header row)").click()
        got.value.save_as(tmp_path / "template.csv")
        assert (tmp_path / "template.csv").read_text().splitlines() == [",".join(names)]

        # The airports file into demo.airlines: refused for its schema; the status box ends on the refusal.
        page.goto(f"{server}/ingest?table=demo.airlines")
        expect(page.get_by_text("Columns of demo.airlines")).to_be_visible()
        helpers.upload(page, demo_settings.home / "demo_sources" / "airports.csv")
        page.get_by_role("button", name="Ingest and audit").click()
        status = page.get_by_test_id("stExpander").filter(has_text="refused: source does not fit the schema")
        expect(status).to_be_visible(timeout=300_000)
        expect(status.get_by_test_id("stExpanderIconError")).to_be_visible()
        label = status.locator("summary").inner_text()
        assert re.search(
            r"demo\.airlines: refused: source does not fit the schema of demo\.airlines \(\d+ problem", label
        ), label
        assert "Reading the source" not in label, label  # the label moved on from the first step
        # the refusal names every problem on one line (the status, its last step and the error box show it)
        expect(
            page.get_by_test_id("stAlertContentError").get_by_text("unexpected column faa")
        ).to_be_visible()
        # the upload is named as the steward named it, never by where the console saved it (issue 40 item 13)
        expect(status).to_contain_text("Source: airports.csv")
        assert "/uploads/" not in page.inner_text("body")
    assert set(Lakehouse(demo_settings).table(AIRLINES).metadata.refs) == airlines_refs  # nothing written
