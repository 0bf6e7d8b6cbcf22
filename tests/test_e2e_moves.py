"""Issue 28 items 1, 2 and 7 in real Chromium: every move of main on the record, a batch reopened once,
one message per outcome.

One lakehouse for the module, seeded once: ``demo.trips`` (a first batch, then ``b1``, both
published) and ``jobs.wide`` (200,000 ids, for a query that runs until cancelled). The console runs
without an access file (everyone is admin) and runs SQL-box queries in its own Spark (driver).
The walk: History → Roll back → Overview lists the rollback with its time (and "last updated" is
it) → History → Reopen as branch (its success links the review; the batch then says where it is open,
no second Reopen) → the review → audit → Publish: one success with its links, no "not open"
warning → Overview lists the publish. Then the SQL box: a new query clears the last one's
"cancelled" box as soon as it starts.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import helpers
import pytest

from pages._common import local_time
from wap_core import Lakehouse, Settings, TableId
from wap_core.workflow.ingest import ingest
from wap_core.workflow.publish import publish
from wap_core.workflow.status import snapshot_timeline, table_infos

T = TableId("demo", "trips")
WIDE = TableId("jobs", "wide")
SUITE = "demo.trips:\n  checks:\n    - not_null: [name]\n"
RUNAWAY_SQL = (
    "SELECT count(*) AS n, sum(a.id + b.id) AS s FROM ref_view a JOIN ref_view b ON a.id % 2 = b.id % 2"
)

pytestmark = pytest.mark.e2e


@dataclass
class Console:
    base: str
    settings: Settings


@pytest.fixture(scope="module")
def console(tmp_path_factory: pytest.TempPathFactory, spark_session: None) -> Iterator[Console]:
    if not Path(helpers.CHROMIUM).exists():
        pytest.skip("Chromium is not installed (make browser-deps)")
    home = tmp_path_factory.mktemp("e2e-moves")
    settings = helpers.lake_settings(home, "e2emoves", SUITE, ingest_roots=(home,))
    lh = Lakehouse(settings)
    for branch, rows in (("first", [(1, "ann"), (2, "bob")]), ("b1", [(10, "ivy"), (11, "max")])):
        src = helpers.write_csv(home / "src" / f"{branch}.csv", ["id", "name"], rows)
        assert ingest(lh, T, [src], create=branch == "first", branch=branch).audit.passed
        publish(lh, T, branch)
    helpers.publish_ids(lh, WIDE, home / "landing" / "wide.parquet", 200_000)
    env = helpers.console_env(
        **helpers.lake_env(settings, "steward-e2e", WAP_QUERY_TIMEOUT="600", WAP_QUERY_ISOLATION="driver")
    )
    with helpers.console(env, home / "streamlit.log") as base:
        yield Console(base, settings)


def _grid(page: Any, n: int) -> list[list[str]]:
    """The cells of the ``n``-th st.dataframe as rendered (its accessible table): header row first."""
    frame = page.get_by_test_id("stDataFrame").nth(n)
    frame.locator("table").first.wait_for(state="attached")
    cells: list[list[str]] = frame.evaluate(
        "el => Array.from(el.querySelectorAll('table tr')).map(tr => Array.from(tr.querySelectorAll('th,td'))"
        ".map(c => c.textContent.replaceAll('\\u2060', '').trim()))"
    )
    return cells


def _column(grid: list[list[str]], name: str, where: tuple[str, str] | None = None) -> list[str]:
    """The cells of column ``name`` (rows whose column ``where[0]`` reads ``where[1]``, if given)."""
    header = grid[0]
    rows = [r for r in grid[1:] if where is None or r[header.index(where[0])] == where[1]]
    return [r[header.index(name)] for r in rows]


def _recent_moves(page: Any) -> list[dict[str, str]]:
    """Overview's "Recent publishes and rollbacks" (a static table): one dict per row."""
    from playwright.sync_api import expect

    expect(page.get_by_text("Recent publishes and rollbacks")).to_be_visible()
    table = page.get_by_test_id("stTable").first
    cells: list[list[str]] = table.evaluate(
        "t => Array.from(t.querySelectorAll('tr')).map(tr => Array.from(tr.querySelectorAll('th,td'))"
        ".map(c => c.innerText.replaceAll('\\u2060', '').replaceAll('\\u00a0', ' ').trim()))"
    )
    return [dict(zip(cells[0], r, strict=False)) for r in cells[1:]]


def test_rollback_on_overview_reopen_once_publish_one_message(console: Console) -> None:
    from playwright.sync_api import expect

    base, lh = console.base, Lakehouse(console.settings)
    b1 = lh.table(T).metadata.refs["main"].snapshot_id
    seed = lh.table(T).metadata.snapshot_by_id(b1).parent_snapshot_id  # type: ignore[union-attr]
    with helpers.browser_page() as page:
        # History: roll main back to the first batch
        page.goto(f"{base}/history?table={T}")
        expect(page.get_by_text("Main's snapshot timeline")).to_be_visible()
        dialog = helpers.open_dialog(
            page, page.locator(f".st-key-wf_rb_{seed}").get_by_role("button"), ready="Roll back"
        )
        dialog.get_by_label("Reason").fill("bad vendor file")
        dialog.get_by_role("button", name="Roll back", exact=True).click()
        expect(page.get_by_text(f"Rolled back {T}: main {b1} → {seed}")).to_be_visible()
        rolled = lh.journal.history(str(T), action="rollback", limit=1)[0]
        assert rolled.outcome == "rolled_back"
        when = local_time(rolled.at)

        # Overview: the rollback is among the recent moves of main, with its time; "last updated" is it
        page.goto(f"{base}/")
        moves = _recent_moves(page)
        assert {
            "outcome": "rolled_back",
            "reason": "bad vendor file",
            "at": when,
            "table": str(T),
            "branch": "main",
        }.items() <= moves[0].items(), moves
        info = next(i for i in table_infos(lh) if i.table == str(T))
        assert local_time(info.last_updated) == when
        helpers.page_idle(page)
        assert _column(_grid(page, 0), "last updated", ("table", str(T))) == [when]

        # History: main's timeline says when main moved to its head (the rollback), apart from when it was written
        page.goto(f"{base}/history?table={T}")
        expect(page.get_by_text("Rolled-back batches")).to_be_visible()
        head = snapshot_timeline(lh, T)[0]
        assert head.snapshot_id == seed and head.main_at is not None
        timeline = _grid(page, 1)
        moved_here, written = _column(timeline, "main moved here"), _column(timeline, "written")
        assert (moved_here[0], written[0]) == (local_time(head.main_at), local_time(head.at)), timeline
        assert moved_here[0] != written[0]

        # Reopen as branch: the success links the review; then the batch says where it is open, no second Reopen
        reopen = page.locator(f".st-key-wf_ro_{b1}").get_by_role("button")
        helpers.page_idle(page)
        reopen.click()
        success = page.get_by_test_id("stAlert").filter(
            has_text=f"Reopened snapshot {b1} as branch b1_reopened"
        )
        expect(success).to_be_visible()
        review = f"/review?table={T}&branch=b1_reopened"
        expect(success.get_by_role("link", name="review it")).to_have_attribute("href", review)
        expect(page.get_by_text("Already open again as branch b1_reopened")).to_be_visible()
        caption = page.get_by_test_id("stCaptionContainer").filter(has_text="Already open again as branch")
        expect(caption.get_by_role("link", name="review it")).to_have_attribute("href", review)
        expect(reopen).to_be_disabled()
        assert sorted(n for n in lh.table(T).metadata.refs if n.startswith("b1_reopened")) == ["b1_reopened"]

        # the review: audit, publish; one message (the success with its links), no "not open" warning
        page.goto(f"{base}{review}")
        helpers.page_idle(page)
        page.get_by_role("button", name="Re-run audit").click()
        expect(page.get_by_text("Audit re-run by steward-e2e: passed")).to_be_visible()
        dialog = helpers.open_dialog(page, page.get_by_role("button", name="Publish", exact=True))
        dialog.get_by_role("button", name="Confirm").click()
        published = page.get_by_test_id("stAlert").filter(has_text=f"Published {T} · b1_reopened")
        expect(published).to_be_visible()
        helpers.page_idle(page)
        expect(published.get_by_role("link", name=f"History of {T}")).to_have_attribute(
            "href", f"/history?table={T}"
        )
        expect(published.get_by_role("link", name="Overview")).to_have_attribute("href", "/")
        expect(page.get_by_text("is not open on")).to_have_count(0)
        expect(page.get_by_test_id("stAlert")).to_have_count(1)

        # Overview: the reopened batch's publish is the newest move of main
        page.goto(f"{base}/")
        moves = _recent_moves(page)
        assert (moves[0]["outcome"], moves[0]["branch"]) == ("published", "b1_reopened"), moves
        assert moves[1]["outcome"] == "rolled_back", moves


def test_a_new_query_clears_the_cancelled_box(console: Console) -> None:
    from playwright.sync_api import expect

    cancelled = "was cancelled and its Spark jobs were stopped"
    with helpers.browser_page() as page:
        page.goto(f"{console.base}/explore?table={WIDE}")
        expect(page.get_by_text(f"Reading {WIDE} at branch main")).to_be_visible()
        page.get_by_role("tab", name="SQL").click()
        page.get_by_role("textbox", name="SQL").fill(RUNAWAY_SQL)
        page.get_by_role("button", name="Run query").click()
        expect(page.get_by_text("Running with Spark…")).to_be_visible()
        page.get_by_role("button", name="Cancel").click()
        expect(page.get_by_text(cancelled)).to_be_visible()
        helpers.page_idle(page)
        page.get_by_role("button", name="Run query").click()  # the same query again
        expect(page.get_by_text("Running with Spark…")).to_be_visible()
        expect(page.get_by_text(cancelled)).to_have_count(0, timeout=60_000)  # while the new one runs
        expect(page.get_by_text("Running with Spark…")).to_be_visible()
        page.get_by_role("button", name="Cancel").click()
        expect(page.get_by_text(cancelled)).to_have_count(1)
