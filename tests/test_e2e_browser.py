"""End to end in a real browser: the console server on a seeded demo lakehouse, driven by Chromium.

Opens the review deep link of the failing demo branch in a fresh browser, screenshots it (to
docs/review.png with WAP_UPDATE_SCREENSHOT=1), discards the branch through the confirmation dialog, then checks with PyIceberg
that the branch is gone and main did not move.
"""

from __future__ import annotations

import itertools
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path

import helpers
import pytest

from wap_core import Lakehouse, Settings, TableId

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = helpers.CHROMIUM
ARGS = helpers.CHROMIUM_ARGS
FLIGHTS = TableId("demo", "flights")
BRANCH = "audit_2013_02_w2"

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def demo_settings(tmp_path_factory: pytest.TempPathFactory, spark_session: None) -> Settings:
    """A demo lakehouse of its own (this test discards a branch), seeded with the shared Spark session."""
    from wap_core.workflow.demo import seed_demo

    if not Path(CHROMIUM).exists():
        pytest.skip("Chromium is not installed (make browser-deps)")
    home = tmp_path_factory.mktemp("e2e")
    settings = helpers.lake_settings(home, "e2edemo", user="demo-seeder")
    seed_demo(Lakehouse(settings))
    return settings


@pytest.fixture(scope="module")
def server(demo_settings: Settings) -> Iterator[str]:
    """The console on the demo lakehouse: its base URL."""
    env = helpers.console_env(
        **helpers.lake_env(
            demo_settings,
            "steward-e2e",
            WAP_SPARK_EAGER="0",
            WAP_INGEST_ROOTS=str(demo_settings.home / "demo_sources"),
            WAP_QUERY_ISOLATION="driver",  # the SQL box in the console's driver: no second JVM on 2 cores
        )
    )
    with helpers.console(env, demo_settings.home / "streamlit.log") as base:
        yield base


def _shoot(page, name: str, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A full-page screenshot: docs/<name>.png with WAP_UPDATE_SCREENSHOT=1 (the README gallery), else a temp file."""
    page.wait_for_timeout(1500)
    size = page.viewport_size
    height = page.evaluate("() => document.querySelector('[data-testid=\"stMain\"]').scrollHeight")
    page.set_viewport_size(
        {"width": size["width"], "height": min(int(height) + 40, 4000)}
    )  # the page scrolls inside stMain
    page.wait_for_timeout(1000)
    shot = (
        ROOT / "docs" / f"{name}.png" if os.environ.get("WAP_UPDATE_SCREENSHOT") else tmp_path / f"{name}.png"
    )
    shot.parent.mkdir(exist_ok=True)
    page.screenshot(path=str(shot), full_page=True)
    page.set_viewport_size(size)


def _grid_of(frame) -> list[list[str]]:  # type: ignore[no-untyped-def]
    """The cells of one st.dataframe as rendered (its accessible table): header row first."""
    frame.locator("table").first.wait_for(state="attached")
    return frame.evaluate(
        "el => Array.from(el.querySelectorAll('table tr')).map(tr => Array.from(tr.querySelectorAll('th,td')).map(c => c.textContent.trim()))"
    )


def _grid(page, n: int) -> list[list[str]]:  # type: ignore[no-untyped-def]
    frame = page.get_by_test_id("stDataFrame").nth(n)
    frame.wait_for()
    return _grid_of(frame)


def _metrics(page) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return page.evaluate(
        "() => Object.fromEntries(Array.from(document.querySelectorAll('[data-testid=stMetric]')).map(m => ["
        "m.querySelector('[data-testid=stMetricLabel]').textContent.trim(), m.querySelector('[data-testid=stMetricValue]').textContent.trim()]))"
    )


def _refused_without_reason(dialog) -> None:  # type: ignore[no-untyped-def]
    """Confirm with an empty required reason: the browser does not submit, marks the box, keeps the dialog."""
    from playwright.sync_api import expect

    box = dialog.get_by_label("Reason", exact=True)
    expect(box).to_have_attribute("aria-required", "true")
    dialog.get_by_role("button", name="Confirm").click()
    expect(box).to_have_attribute("aria-invalid", "true")
    expect(dialog).to_be_visible()


def _upload_week1_again(page, base: str, settings: Settings, branch: str) -> None:  # type: ignore[no-untyped-def]
    """Upload week 1's file, already ingested, into ``branch`` of demo.flights: the page flags it first."""
    from playwright.sync_api import expect

    page.goto(f"{base}/ingest")
    helpers.upload(page, settings.home / "demo_sources" / "flights_2013_02_w1.csv")
    page.get_by_test_id("stSelectbox").first.click()
    page.get_by_role("option", name="demo.flights").click()
    page.get_by_label("Branch name (optional)").fill(branch)
    page.get_by_role("button", name="Ingest and audit").click()
    expect(page.get_by_text("This file was already ingested into demo.flights")).to_be_visible()


def _all_snapshot_ids(settings: Settings) -> set[str]:
    lh = Lakehouse(settings)
    return {str(s.snapshot_id) for t in lh.tables() for s in lh.table(t).metadata.snapshots}


def _cli_keyed(settings: Settings, branch: str, key: str) -> dict[str, int]:
    """``python -m wap_core diff --key KEY --json`` in this process (its Spark session), parsed as JSON."""
    code, out, err = helpers.run_cli(
        helpers.lake_env(settings, "steward-e2e"), "diff", "demo.flights", branch, "--key", key, "--json"
    )
    assert code == 0, err
    return json.loads(out)["keyed"]["summary"]


def test_review_deep_link_discard_in_browser(server: str, demo_settings: Settings, tmp_path: Path) -> None:
    from playwright.sync_api import expect

    base = server
    lh = Lakehouse(demo_settings)
    main_before = lh.table(FLIGHTS).metadata.refs["main"].snapshot_id
    assert BRANCH in lh.table(FLIGHTS).metadata.refs

    with helpers.browser_page() as page:  # Spark starts (~5 s) and diffs (~10 s) on 2 cores
        # Metadata pages do not start Spark in the fresh server.
        page.goto(f"{base}/branches")
        expect(page.get_by_role("link", name=f"demo.flights · {BRANCH}")).to_be_visible()
        expect(page.get_by_text("Spark: not started")).to_be_visible()
        _shoot(page, "branches", tmp_path)

        # Every metadata page, with the 64-bit ids read off the rendered grids and compared with PyIceberg's.
        known = _all_snapshot_ids(demo_settings)
        page.goto(f"{base}/")
        expect(page.get_by_text("Audit outcomes over time")).to_be_visible()
        _shoot(page, "overview", tmp_path)
        page.goto(f"{base}/history")
        expect(page.get_by_text("Main's snapshot timeline")).to_be_visible()
        journal = _grid(page, 0)
        ids = {c for row in journal[1:] for c in row if c.isdigit() and len(c) >= 15}
        assert ids and ids <= known, ids - known  # exact, never 4887153865992561000 for 4887153865992560141
        tl = _grid(page, 1)
        parent = tl[0].index("parent")
        parents = {row[parent] for row in tl[1:]} - {""}
        assert parents and parents <= known, parents - known
        _shoot(page, "history", tmp_path)
        page.goto(f"{base}/explore?table=demo.flights")
        page.get_by_role("tab", name="Snapshots").click()
        expect(page.get_by_text("Ancestry of main")).to_be_visible()
        snaps = _grid(page, 1)
        parent = snaps[0].index("parent")
        flights = Lakehouse(demo_settings).table(FLIGHTS)
        real = {str(s.snapshot_id): str(s.parent_snapshot_id or "") for s in flights.metadata.snapshots}
        assert all(
            real[row[0 if snaps[0][0] == "snapshot" else snaps[0].index("snapshot")]] == row[parent]
            for row in snaps[1:]
        )
        assert "table=demo.flights" in page.url and "kind=branch" in page.url and "ref=main" in page.url
        _shoot(page, "explore", tmp_path)
        page.goto(f"{base}/checks")
        expect(page.get_by_text("Checks file").first).to_be_visible()
        _shoot(page, "checks", tmp_path)

        # The deep link, pasted into a fresh browser context.
        ctx = page.context.browser.new_context(viewport={"width": 1400, "height": 1000})
        review = ctx.new_page()
        review.set_default_timeout(120_000)
        review.goto(f"{base}/review?table=demo.flights&branch={BRANCH}")
        expect(review.get_by_text("Audit failed").first).to_be_visible()
        expect(review.get_by_text("not_null(dep_time)").first).to_be_visible()
        expect(review.get_by_text("positive_air_time").first).to_be_visible()
        expect(review.get_by_role("button", name="Publish")).to_be_disabled()
        # the Spark diff finished (the console's Spark starts first: minutes on 2 busy cores)
        expect(review.get_by_text("Diff computed on").first).to_be_visible(timeout=300_000)
        expect(review.get_by_text("Distributions, main vs batch")).to_be_visible()
        review.wait_for_timeout(1500)  # let charts draw

        height = review.evaluate("() => document.querySelector('[data-testid=\"stMain\"]').scrollHeight")
        review.set_viewport_size({"width": 1400, "height": min(int(height) + 40, 6000)})
        review.wait_for_timeout(1500)
        (ROOT / "docs").mkdir(exist_ok=True)
        # README's screenshot is refreshed on demand (WAP_UPDATE_SCREENSHOT=1), so a test run leaves the tree clean
        shot = (
            ROOT / "docs" / "review.png"
            if os.environ.get("WAP_UPDATE_SCREENSHOT")
            else tmp_path / "review.png"
        )
        review.screenshot(path=str(shot), full_page=True)
        assert shot.stat().st_size > 50_000
        review.set_viewport_size({"width": 1400, "height": 1000})

        # What changed most leads: the first chart states the largest score; dep_time's failed not_null
        # is charted by its null rate, with the columns NULL on the same (cancelled) rows.
        first = _chart_captions(review)[0]
        assert first["t"].startswith("Chart 1 · ") and first["score"] == max(
            c["score"] for c in _chart_captions(review)
        )
        cancelled = review.get_by_text(re.compile(r"^Chart \d · .*dep_time")).first
        expect(cancelled).to_contain_text("null rate")
        expect(cancelled).to_contain_text("failed: not_null(dep_time)")
        # The failing column leads the failing-row sample of positive_air_time.
        sample = review.get_by_test_id("stExpander").filter(
            has_text="Failing-row sample of positive_air_time"
        )
        headers = _grid_of(sample.get_by_test_id("stDataFrame").first)[0]
        assert "air_time" in headers[:2], headers
        # The keyed diff on the page equals the CLI's (diff --key ... --json).
        review.get_by_role("button", name="Compare by key").click()
        expect(review.get_by_text("By key year, month, day, carrier, flight, origin")).to_be_visible()
        shown = _metrics(review)
        cli = _cli_keyed(demo_settings, BRANCH, "year,month,day,carrier,flight,origin")
        assert {k: shown[k.capitalize()] for k in ("added", "removed", "changed")} == {
            k: f"{cli[k]:,}" for k in ("added", "removed", "changed")
        }

        # Force publish needs a reason: with none, the browser refuses to submit and marks the box.
        review.get_by_text("Force publish (admins only").click()
        dialog = helpers.open_dialog(review, review.get_by_role("button", name="Force publish"))
        _refused_without_reason(dialog)
        dialog.get_by_role("button", name="Cancel").click()
        expect(dialog).to_be_hidden()
        assert Lakehouse(demo_settings).table(FLIGHTS).metadata.refs["main"].snapshot_id == main_before

        # Discard: refused without a reason; then the reason and Enter alone (one submit, no click).
        dialog = helpers.open_dialog(review, review.get_by_role("button", name="Discard"))
        _refused_without_reason(dialog)
        assert BRANCH in Lakehouse(demo_settings).table(FLIGHTS).metadata.refs
        box = dialog.get_by_label("Reason", exact=True)
        box.fill("raw week: cancelled flights and unknown destinations")
        box.press("Enter")
        expect(review.get_by_text(f"Discarded demo.flights · {BRANCH}")).to_be_visible()
        expect(dialog).to_be_hidden()
        # One message per outcome (issue 28 item 7): the success, not also a "not open" warning under it.
        expect(review.get_by_text("is not open on demo.flights")).to_have_count(0)
        ctx.close()

    refs = Lakehouse(demo_settings).table(FLIGHTS).metadata.refs
    assert BRANCH not in refs
    assert refs["main"].snapshot_id == main_before
    entries = Lakehouse(demo_settings).journal.history(str(FLIGHTS), branch=BRANCH, action="discard")
    assert len(entries) == 1  # exactly once
    assert entries[0].user == "steward-e2e"
    assert entries[0].reason == "raw week: cancelled flights and unknown destinations"
    assert not Lakehouse(demo_settings).journal.history(str(FLIGHTS), branch=BRANCH, action="publish")


def test_publish_with_tab_and_enter_duplicate_upload_discard_with_tab(
    server: str, demo_settings: Settings, tmp_path: Path
) -> None:
    """Keyboard in the dialogs, each submit journaled exactly once, and a duplicate upload flagged.

    Publish: Tab reaches Confirm, and Enter in the note box submits; a forced publish: the reason, Tab
    and a click on Confirm; Discard: the reason, Tab and a click on Confirm.
    """
    from playwright.sync_api import expect

    from wap_core.workflow.demo import PASSING_BRANCH

    base = server
    head = Lakehouse(demo_settings).table(FLIGHTS).metadata.refs[PASSING_BRANCH].snapshot_id
    with helpers.browser_page() as page:
        page.goto(f"{base}/review?table=demo.flights&branch={PASSING_BRANCH}")
        expect(page.get_by_text("Ready to publish")).to_be_visible()
        # a dialog's submit reruns after the page's run: let the Spark diff finish first (2 busy cores)
        expect(page.get_by_text("Diff computed on").first).to_be_visible(timeout=300_000)
        dialog = helpers.open_dialog(page, page.get_by_role("button", name="Publish"))
        note = dialog.get_by_label("Note (optional)")
        note.fill("week 1 checked")
        note.press("Tab")  # focus leaves the box: the text is kept, nothing reruns
        expect(dialog.get_by_role("button", name="Confirm")).to_be_focused()
        page.keyboard.press("Shift+Tab")
        expect(note).to_be_focused()
        note.press("Enter")  # Enter alone in the box submits the form with the note
        expect(page.get_by_text(f"Published demo.flights · {PASSING_BRANCH}")).to_be_visible()
        refs = Lakehouse(demo_settings).table(FLIGHTS).metadata.refs
        assert refs["main"].snapshot_id == head and PASSING_BRANCH not in refs
        published = Lakehouse(demo_settings).journal.history(
            str(FLIGHTS), branch=PASSING_BRANCH, action="publish"
        )
        assert [e.reason for e in published] == ["week 1 checked"]  # exactly once

        # The same file again: flagged with the earlier branch before anything is written.
        _upload_week1_again(page, base, demo_settings, "w1_again")
        expect(page.get_by_text(f"branch {PASSING_BRANCH}").first).to_be_visible()
        assert "w1_again" not in Lakehouse(demo_settings).table(FLIGHTS).metadata.refs
        _shoot(page, "ingest", tmp_path)
        page.get_by_role("button", name="Ingest anyway").click()
        expect(page.get_by_text("Branch w1_again of demo.flights")).to_be_visible()
        # the warning and its button are gone once it ran: no second click can ingest the rows again (issue 40)
        expect(page.get_by_text("This file was already ingested")).to_have_count(0)
        expect(page.get_by_role("button", name="Ingest anyway")).to_have_count(0)

        # Its keys are on main already (unique fails): force-publish it with a reason, Tab, a click on Confirm.
        page.goto(f"{base}/review?table=demo.flights&branch=w1_again")
        expect(page.get_by_text("Diff computed on").first).to_be_visible(timeout=300_000)
        page.get_by_text("Force publish (admins only").click()
        dialog = helpers.open_dialog(page, page.get_by_role("button", name="Force publish"))
        dialog.get_by_label("Reason", exact=True).fill("replayed on purpose")
        dialog.get_by_label("Reason", exact=True).press("Tab")
        expect(dialog.get_by_role("button", name="Confirm")).to_be_focused()
        dialog.get_by_role("button", name="Confirm").click()
        expect(page.get_by_text("Force-published demo.flights · w1_again")).to_be_visible()

        # Once more, then discard it: type the reason, Tab away, click Confirm (the click carries the text).
        _upload_week1_again(page, base, demo_settings, "w1_third")
        page.get_by_role("button", name="Ingest anyway").click()
        expect(page.get_by_text("Branch w1_third of demo.flights")).to_be_visible()
        page.goto(f"{base}/review?table=demo.flights&branch=w1_third")
        expect(page.get_by_text("Diff computed on").first).to_be_visible(timeout=300_000)
        dialog = helpers.open_dialog(page, page.get_by_role("button", name="Discard"))
        dialog.get_by_label("Reason", exact=True).fill("duplicate of week 1")
        dialog.get_by_label("Reason", exact=True).press("Tab")
        dialog.get_by_role("button", name="Confirm").click()
        expect(page.get_by_text("Discarded demo.flights · w1_third")).to_be_visible()
    journal = Lakehouse(demo_settings).journal
    forced = journal.history(str(FLIGHTS), branch="w1_again", action="publish")
    assert [(e.reason, e.outcome) for e in forced] == [("replayed on purpose", "forced")], forced
    assert "w1_third" not in Lakehouse(demo_settings).table(FLIGHTS).metadata.refs
    discarded = journal.history(str(FLIGHTS), branch="w1_third", action="discard")
    assert [e.reason for e in discarded] == ["duplicate of week 1"]  # exactly once


def test_explore_selection_lives_in_the_url_and_back_restores_it(server: str) -> None:
    """Two selections on Explore, then the browser's back button: the previous selection is restored."""
    from playwright.sync_api import expect

    base = server
    with helpers.browser_page() as page:
        page.goto(f"{base}/explore?table=demo.flights")
        expect(page.get_by_text("Reading demo.flights at branch main")).to_be_visible()

        def pick(label: str, option: str) -> None:
            page.get_by_test_id("stSelectbox").filter(has_text=label).first.click()
            page.get_by_role("option", name=option, exact=True).click()

        pick("Table", "demo.planes")
        expect(page.get_by_text("Reading demo.planes at branch main")).to_be_visible()
        expect(page).to_have_url(re.compile(r"table=demo\.planes"))
        pick("Table", "demo.airports")
        expect(page.get_by_text("Reading demo.airports at branch main")).to_be_visible()
        expect(page).to_have_url(re.compile(r"table=demo\.airports"))

        page.go_back()
        expect(page).to_have_url(re.compile(r"table=demo\.planes"))
        expect(page.get_by_text("Reading demo.planes at branch main")).to_be_visible()
        table_box = page.get_by_role("combobox", name="Table")
        expect(table_box).to_have_value("demo.planes")
        page.go_back()
        expect(page.get_by_text("Reading demo.flights at branch main")).to_be_visible()
        expect(table_box).to_have_value("demo.flights")
        page.go_forward()
        expect(page.get_by_text("Reading demo.planes at branch main")).to_be_visible()


# ----------------------------------------------------------------------------- what a steward sees (issue 19, 8)
# Every text the page draws on a canvas (the data grids draw their cells there), with where it is drawn:
# the grid's cells as the steward sees them (formatted numbers, the NULL placeholder, what is cut off).
DRAWN_TEXT_HOOK = """
(() => {
  const fill = CanvasRenderingContext2D.prototype.fillText;
  CanvasRenderingContext2D.prototype.fillText = function (text, x, y, ...rest) {
    const grid = this.canvas.isConnected && this.canvas.closest('[data-testid=stDataFrame]');
    if (grid) {
      const m = this.getTransform();
      (grid.__drawn = grid.__drawn || []).push({
        t: String(text), x: m.a * x + m.e, y: m.d * y + m.f,
        w: this.measureText(String(text)).width * m.a,
      });
    }
    return fill.call(this, text, x, y, ...rest);
  };
})();
"""
GROUPED = re.compile(r"^\d{1,3}(,\d{3})+$")  # 1,100,000


def _drawn(frame) -> list[dict]:
    """What one st.dataframe drew on its canvas so far (text, position and width in device pixels)."""
    frame.wait_for()
    frame.page.wait_for_timeout(800)  # let the grid draw
    return frame.evaluate("el => el.__drawn || []")


def _drawn_texts(page) -> set[str]:
    return set(
        page.evaluate(
            "() => Array.from(document.querySelectorAll('[data-testid=stDataFrame]')).flatMap(g => (g.__drawn || []).map(d => d.t))"
        )
    )


def _chart_svg(page, title: str):
    """The axis labels and the bars of the Vega chart titled ``title`` (or an axis so titled), read off its SVG."""
    return page.evaluate(
        """title => {
          const svg = Array.from(document.querySelectorAll('svg')).find(s =>
            Array.from(s.querySelectorAll('.role-title-text, .role-axis-title text')).some(t => t.textContent === title));
          if (!svg) return null;
          const box = el => { const b = el.getBoundingClientRect(); return {x: b.x, y: b.y, w: b.width, h: b.height}; };
          const axis = dir => Array.from(svg.querySelectorAll('.role-axis')).filter(a =>
              (a.getAttribute('aria-label') || '').startsWith(dir))
            .flatMap(a => Array.from(a.querySelectorAll('.role-axis-label text')))
            .map(t => ({t: t.textContent, ...box(t)}));
          return {x: axis('X-axis'), y: axis('Y-axis'),
                  bars: Array.from(svg.querySelectorAll('.mark-rect path')).map(box)};
        }""",
        title,
    )


def _chart_captions(page) -> list[dict]:  # type: ignore[no-untyped-def]
    """Review's chart captions in page order: text, stated score and where each sits."""
    return [
        {**c, "score": float(re.search(r"\(change (\d+\.\d+)\)", c["t"]).group(1))}  # type: ignore[union-attr]
        for c in page.evaluate(
            """() => Array.from(document.querySelectorAll('[data-testid=stCaptionContainer]'))
                 .filter(c => c.textContent.startsWith('Chart '))
                 .map(c => { const b = c.getBoundingClientRect(); return {t: c.textContent, x: b.x, y: b.y}; })"""
        )
    ]


def _svg_by_axis(page, prefix: str, y_label: str | None = None):  # type: ignore[no-untyped-def]
    """The axis labels and bars (as _chart_svg) of the Vega chart with an axis title starting ``prefix``
    (and, given ``y_label``, that label on its y axis)."""
    return page.evaluate(
        """([prefix, yLabel]) => {
          const box = el => { const b = el.getBoundingClientRect(); return {x: b.x, y: b.y, w: b.width, h: b.height}; };
          const axis = (svg, dir) => Array.from(svg.querySelectorAll('.role-axis')).filter(a =>
              (a.getAttribute('aria-label') || '').startsWith(dir))
            .flatMap(a => Array.from(a.querySelectorAll('.role-axis-label text')))
            .map(t => ({t: t.textContent, ...box(t)}));
          const svg = Array.from(document.querySelectorAll('svg')).find(s =>
            Array.from(s.querySelectorAll('.role-axis-title text')).some(t => t.textContent.startsWith(prefix))
            && (!yLabel || axis(s, 'Y-axis').some(l => l.t === yLabel)));
          if (!svg) return null;
          return {x: axis(svg, 'X-axis'), y: axis(svg, 'Y-axis'),
                  title: Array.from(svg.querySelectorAll('.role-axis-title text')).map(t => t.textContent),
                  bars: Array.from(svg.querySelectorAll('.mark-rect path')).map(box)};
        }""",
        [prefix, y_label],
    )


def _tall(page) -> None:  # type: ignore[no-untyped-def]
    """The viewport as tall as the page (at most 6000 px): every chart and grid in view, so each is drawn."""
    height = page.evaluate("() => document.querySelector('[data-testid=\"stMain\"]').scrollHeight")
    page.set_viewport_size({"width": 1400, "height": min(int(height) + 40, 6000)})
    page.wait_for_timeout(2000)


def _grid_drawing(page, header: str) -> list[str]:  # type: ignore[no-untyped-def]
    """What the grid that drew the column header ``header`` drew (its cells as the steward sees them)."""
    page.wait_for_timeout(800)
    return page.evaluate(
        """h => (Array.from(document.querySelectorAll('[data-testid=stDataFrame]'))
                  .map(g => (g.__drawn || []).map(d => d.t)).find(ts => ts.includes(h))) || []""",
        header,
    )


def test_what_a_steward_sees(server: str, demo_settings: Settings) -> None:
    """Counts with separators, NULL blank, a readable null-rate chart, History's timeline on the table
    that changed last with distinct ticks, Explore's times with their zone, Overview's recent publishes whole."""
    from playwright.sync_api import expect

    from wap_core.workflow.ingest import SourcePolicy, ingest

    base = server
    lh = Lakehouse(demo_settings)
    # week 2 again (the demo's failing branch may be discarded by now): NULL dep_time, a null-rate jump
    week2 = demo_settings.home / "demo_sources" / "flights_2013_02_w2.csv"
    looked = ingest(lh, FLIGHTS, [str(week2)], branch="w2_look", source_policy=SourcePolicy.ANY)
    assert looked.audit.status == "failed" and looked.rows_written >= 1000
    mains = {str(t): max(s.timestamp_ms for s in lh.table(t).metadata.snapshots) for t in lh.tables()}
    latest = max(mains, key=lambda t: mains[t])
    reason = "January backfill: cancellations and island destinations accepted by the data owner"

    with helpers.browser_page() as page:
        page.add_init_script(DRAWN_TEXT_HOOK)

        # Branches: counts with thousands separators, as Review's metrics (6,139), never 6139.
        page.goto(f"{base}/branches")
        cells = [str(d["t"]) for d in _drawn(page.get_by_test_id("stDataFrame").first)]
        assert f"{looked.rows_written:,}" in cells, cells
        assert not [c for c in cells if re.fullmatch(r"\d{4,}", c)], cells

        # Review: a null-rate chart with one band per side, NULL cells blank in samples and the profile.
        page.goto(f"{base}/review?table=demo.flights&branch=w2_look")
        expect(page.get_by_text("Diff computed on").first).to_be_visible(timeout=300_000)
        expect(page.get_by_text("Distributions, main vs batch")).to_be_visible()
        helpers.page_idle(page)
        _tall(page)  # charts are drawn once in view
        # One chart for one cause: the columns NULL on the same cancelled flights, a band per column
        # with a bar for main and one for the batch in it (never five charts of one cause).
        helpers.wait_for(
            lambda: _svg_by_axis(page, "null rows (%)", "dep_time"), 60, "dep_time's null-rate chart"
        )
        chart = _svg_by_axis(page, "null rows (%)", "dep_time")
        together = [d["t"] for d in chart["y"]]
        assert {"dep_time", "dep_delay", "arr_time", "air_time", "arr_delay"} <= set(together), together
        ys = sorted(float(d["y"]) for d in chart["y"])
        assert all(b - a >= 20 for a, b in itertools.pairwise(ys)), chart["y"]
        bars = chart["bars"]
        assert len(bars) == 2 * len(together) and all(float(b["h"]) >= 10 for b in bars), bars
        captions = _chart_captions(page)
        assert [c["t"].split(" · ")[0] for c in captions] == [
            f"Chart {n}" for n in range(1, len(captions) + 1)
        ]
        scores = [c["score"] for c in captions]
        assert len(captions) >= 3 and scores == sorted(scores, reverse=True), captions  # by the stated score
        reading = sorted(captions, key=lambda c: (round(float(c["y"]) / 20), float(c["x"])))
        assert reading == captions, captions  # 1 2 on a row, 3 4 below: numbered in reading order
        assert sum("dep_time" in c["t"] for c in captions) == 1, captions
        dep = next(c["t"] for c in captions if "dep_time" in c["t"])
        assert "null rate" in dep and "one cause: NULL on the same batch rows" in dep, dep
        assert "failed: not_null(dep_time)" in dep, dep  # charted by the measure its check failed on
        # Values as values: 1, not 1.0; 1348.331, not 1348.331000; counts in messages with separators.
        profile = _grid_drawing(page, "mean main")
        assert profile and "dep_time" in profile, profile
        assert not [t for t in profile if re.fullmatch(r"-?\d+\.0|-?[\d,]+\.\d{4,}", t)], profile
        expect(
            page.get_by_text(re.compile(r"\d{1,3}(,\d{3})* of \d{1,3}(,\d{3})+ rows fail")).first
        ).to_be_visible()
        sample = page.get_by_test_id("stExpander").filter(has_text="Failing-row sample of not_null(dep_time)")
        sample_cells = [str(d["t"]) for d in _drawn(sample.get_by_test_id("stDataFrame").first)]
        assert "dep_time" in sample_cells and "None" not in sample_cells, sample_cells
        assert "None" not in _drawn_texts(page)  # no grid on the page shows a NULL as "None"

        # History: the timeline opens on the table whose main changed last, each tick reads differently.
        page.set_viewport_size({"width": 1400, "height": 1000})
        page.goto(f"{base}/history")
        expect(page.get_by_text("Main's snapshot timeline")).to_be_visible()
        expect(page.get_by_role("combobox", name="Timeline of table")).to_have_value(latest)
        assert latest != "demo.airlines"
        page.wait_for_timeout(1500)
        tl = _chart_svg(page, "main moved")
        assert tl is not None
        ticks = [d["t"] for d in tl["x"]]
        assert len(ticks) >= 2 and len(set(ticks)) == len(ticks), ticks

        # Explore: the ref's time and a timestamp cell read with their zone.
        page.goto(f"{base}/explore?table=demo.flights")
        caption = page.get_by_text("Reading demo.flights at branch main")
        expect(caption).to_be_visible()
        zoned = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d ([A-Z]{2,5}|[+-]\d{4})\b")
        assert zoned.search(caption.inner_text()), caption.inner_text()

        # Overview: the recent publishes show the reason and the time whole (wrapped, never cut off).
        page.goto(f"{base}/")
        expect(page.get_by_text("Recent publishes")).to_be_visible()
        recent = page.get_by_test_id("stTable").first
        expect(recent).to_contain_text("January backfill")
        cells = recent.evaluate(
            """t => Array.from(t.querySelectorAll('tr')).map(tr => Array.from(tr.querySelectorAll('th,td')).map(c => ({
                 t: c.innerText.replaceAll('\\u2060', '').replaceAll('\\u00a0', ' ').trim(),
                 cut: c.scrollWidth > c.clientWidth + 1 || c.scrollHeight > c.clientHeight + 1})))"""
        )
        header = [c["t"] for c in cells[0]]
        assert header[:3] == ["outcome", "reason", "at"], header
        rows = [[c["t"] for c in r] for r in cells[1:]]
        assert any(r[1] == reason and r[0] in ("published", "forced") for r in rows), rows
        assert all(zoned.fullmatch(r[2]) for r in rows), rows
        assert not [c for r in cells for c in r if c["cut"]], cells
        box = recent.evaluate("t => [t.scrollWidth, t.clientWidth]")
        assert box[0] <= box[1] + 1, box  # no column pushed out of sight
        # The times never wrap mid-date (2026-11- / 26 17:21:02 UTC), in a narrower window too: one line each.
        for width in (1400, 1000):
            page.set_viewport_size({"width": width, "height": 1000})
            page.wait_for_timeout(800)
            lines = recent.evaluate(
                """t => Array.from(t.querySelectorAll('tr')).slice(1).map(tr => {
                     const cell = tr.querySelectorAll('th,td')[2], walk = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
                     const tops = new Set();
                     for (let n = walk.nextNode(); n; n = walk.nextNode()) {
                       const r = document.createRange(); r.selectNodeContents(n);
                       for (const b of r.getClientRects()) if (b.width > 0) tops.add(Math.round(b.top));
                     }
                     return tops.size;
                   })"""
            )
            assert lines and set(lines) == {1}, (width, lines)
            box = recent.evaluate("t => [t.scrollWidth, t.clientWidth]")
            assert box[0] <= box[1] + 1, (width, box)
        page.set_viewport_size({"width": 1400, "height": 1000})
        # One label for one thing: "main moved", as Branches has it.
        header = _grid(page, 1)[0]
        assert "main moved" in header and "main_moved" not in header, header
        # Audit outcomes: bars a bin wide, each label a different bin (never 16:52 four times).
        helpers.page_idle(page)
        _tall(page)
        helpers.wait_for(lambda: _svg_by_axis(page, "audit time (per "), 60, "the audit outcomes chart")
        outcomes = _svg_by_axis(page, "audit time (per ")
        ticks = [d["t"] for d in outcomes["x"]]
        assert len(ticks) >= 2 and len(set(ticks)) == len(ticks), ticks
        assert outcomes["bars"] and min(float(b["w"]) for b in outcomes["bars"]) >= 8, outcomes["bars"]

        # Checks: the heatmap names each audit by its branch, and lists exactly the suite table's checks.
        page.goto(f"{base}/checks")
        expect(page.get_by_text("Checks file").first).to_be_visible()
        helpers.page_idle(page)
        _tall(page)
        helpers.wait_for(
            lambda: _svg_by_axis(page, "audited branch", "not_null(dep_time)"), 60, "the heatmap"
        )
        heat = _svg_by_axis(page, "audited branch", "not_null(dep_time)")
        branches = {e.branch for e in Lakehouse(demo_settings).journal.history(str(FLIGHTS), limit=500)}
        audited = [d["t"] for d in heat["x"]]
        assert "load_2013_01_a" in audited and all(a.split(" · ")[0] in branches for a in audited), audited
        suite = _grid(page, 2)
        listed = [row[suite[0].index("check")] for row in suite[1:]]
        assert "malformed_rows" in listed and set(listed) == {d["t"] for d in heat["y"]}, (listed, heat["y"])

        # Explore's SQL box: a computed sum carries thousands separators, as the metrics.
        page.goto(f"{base}/explore?table=demo.flights")
        page.get_by_role("tab", name="SQL").click()
        page.get_by_role("textbox", name="SQL").fill(
            "SELECT sum(distance) AS total, max(year) AS year FROM ref_view"
        )
        page.get_by_role("button", name="Run query").click()
        helpers.wait_for(lambda: _grid_drawing(page, "total"), 300, "the SQL result's grid")
        drawn = _grid_drawing(page, "total")
        assert [t for t in drawn if GROUPED.fullmatch(t)] and "2013" in drawn, drawn  # a year stays 2013
