"""Real Chromium on the Review page: approve through the dialog (Enter submits the form), then Publish is enabled.

A small lakehouse of its own: ``demo.people`` with a policy of one approval, one passing branch
ingested by sam (the author); the console runs as ann@corp.test (approver).
"""

from __future__ import annotations

from pathlib import Path

import helpers
import pytest

from wap_core import Lakehouse, TableId
from wap_core.workflow.ingest import ingest
from wap_core.workflow.publish import publish
from wap_core.workflow.review import review_state

ROOT = Path(__file__).resolve().parent.parent
T = TableId("demo", "people")
SUITE = "demo.people:\n  checks:\n    - not_null: [name]\n"
ACCESS = """\
roles:
  viewer: ["*"]
  steward: [sam@corp.test]
  approver: [ann@corp.test]
policies:
  demo.people: {approvals: 1, author_cannot_approve: true}
"""

pytestmark = pytest.mark.e2e


def test_approve_in_the_dialog_with_enter_enables_publish(tmp_path: Path, spark_session: None) -> None:
    from playwright.sync_api import expect

    if not Path(helpers.CHROMIUM).exists():
        pytest.skip("Chromium is not installed (make browser-deps)")
    home = tmp_path / "lh"
    settings = helpers.lake_settings(
        home,
        "e2ereview",
        SUITE,
        user="sam@corp.test",
        access_path=home / "access.yml",
        ingest_roots=(tmp_path,),
    )
    lh = Lakehouse(settings)
    ingest(
        lh,
        T,
        [helpers.write_csv(tmp_path / "a.csv", ["id", "name"], [(1, "ann")])],
        create=True,
        branch="first",
    )
    publish(lh, T, "first")
    assert ingest(
        lh, T, [helpers.write_csv(tmp_path / "b.csv", ["id", "name"], [(2, "bob")])], branch="batch"
    ).audit.passed
    settings.access_file.write_text(ACCESS)
    assert review_state(lh, T, "batch").state.value == "awaiting"

    env = helpers.console_env(**helpers.lake_env(settings, "ann@corp.test", access=True))
    with helpers.console(env, home / "streamlit.log") as base, helpers.browser_page() as page:
        # every text the sidebar ever shows during the first load (issue 40 item 7: Streamlit's raw list of
        # pages/ files, "common", "review parts"..., showed for seconds before the console's navigation)
        page.add_init_script(
            "window.__sidebarTexts = []; new MutationObserver(() => { const s ="
            " document.querySelector('[data-testid=\"stSidebar\"]'); if (s) window.__sidebarTexts.push(s.innerText);"
            " }).observe(document, {subtree: true, childList: true, characterData: true});"
        )
        page.goto(f"{base}/review?table=demo.people&branch=batch")
        expect(page.get_by_text("Awaiting approval").first).to_be_visible()
        sidebar = page.get_by_test_id("stSidebar")
        for name in (
            "Overview",
            "Branches",
            "Review",
            "Ingest",
            "Explore",
            "History",
            "Checks",
            "Quarantine",
        ):
            expect(sidebar.get_by_role("link", name=name, exact=True)).to_be_visible()
        seen = " | ".join(page.evaluate("window.__sidebarTexts"))
        assert seen, "the sidebar was never drawn"
        for raw in ("review parts", "quarantine parts", "batch review", "common", "workflow"):
            assert raw not in seen.lower(), (raw, seen[:2000])
        expect(page.get_by_role("button", name="Publish", exact=True)).to_be_disabled()
        dialog = helpers.open_dialog(
            page, page.get_by_role("button", name="Approve", exact=True), ready="Approve"
        )
        box = dialog.get_by_label("Comment (optional)")
        box.fill("checked the **ids** <b>")
        expect(dialog.get_by_text("Press Enter to submit form")).to_be_visible()  # the box holds the text
        box.press("Enter")  # one submit carries the text and the click
        expect(page.get_by_text("Approved", exact=True).first).to_be_visible()
        expect(page.get_by_role("button", name="Publish", exact=True)).to_be_enabled()
        expect(page.get_by_text("checked the **ids** <b>").first).to_be_visible()  # escaped, shown literally
    st = review_state(lh, T, "batch")
    assert [(r.user, r.comment) for r in st.approvals] == [("ann@corp.test", "checked the **ids** <b>")]
