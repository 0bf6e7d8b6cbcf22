"""User text never renders as Markdown/HTML, and the catalog password never reaches the page.

A small lakehouse whose data, checks file, journal and audits hold a hostile string (an image, a
link, raw HTML, bold and a Streamlit colour directive). The console is driven with AppTest (every
Markdown body and label of the element tree is parsed with markdown-it-py: no image, link or HTML
token may come from it) and, once, in real Chromium (no <img>/<a> produced from it on Review).
The sidebar of a console on a real PostgreSQL catalog whose URL carries a password shows it masked.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import helpers
import pytest
from markdown_it import MarkdownIt
from streamlit.testing.v1 import AppTest

from wap_core import Lakehouse, TableId
from wap_core.workflow.discard import discard
from wap_core.workflow.ingest import ingest
from wap_core.workflow.publish import publish

ITEMS = TableId("shop", "items")
HOSTILE = "![p](http://127.0.0.1:9/x.png) [link](http://evil) <img src=x onerror=alert(1)> **bold** :red[x]"
HOSTILE_NAME = "![n](http://127.0.0.1:9/name.png) [n](http://evil/name)"
CHECKS = f"""\
shop.items:
  checks:
    - accepted_values: {{column: city, values: [Paris, Lyon]}}
    - expression: {{name: "{HOSTILE_NAME}", sql: "qty > 0"}}
"""
# Text GFM turns into live links with no Markdown syntax at all (a URL, a www. host, an e-mail address):
# escaping the punctuation does not stop it, Streamlit's Markdown links it after resolving the escapes.
LINKY = "see http://evil.example/login or www.evil.example, mail phish@evil.example"
_names = itertools.count(1)
# GFM's literal autolinks (mdast-util-gfm-autolink-literal), run on the text as the page resolves it.
_GFM_URL = re.compile(r"(https?://|www(?=\.))([-.\w]+)([^ \t\r\n]*)", re.IGNORECASE)
_GFM_EMAIL = re.compile(r"([-.\w+]+)@([-\w]+(?:\.[-\w]+)+)")


def _gfm_autolinks(text: str) -> list[str]:
    """What GFM would link in ``text`` once its backslash escapes are resolved."""
    plain = re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", text)
    return [m.group(0) for rx in (_GFM_URL, _GFM_EMAIL) for m in rx.finditer(plain)]


_MD = MarkdownIt("commonmark").enable(["table", "strikethrough"])
_ACTIVE = {"image", "link_open", "html_inline", "html_block"}
_FIELDS = {"body", "label", "help", "title", "caption"}


def _active_tokens(text: str) -> set[str]:
    """Token types of ``text`` parsed as Markdown that would fetch or link anything, or inject HTML."""
    found: set[str] = set()
    stack = list(_MD.parse(text))
    while stack:
        tok = stack.pop()
        if tok.type in _ACTIVE:
            found.add(tok.type)
        stack.extend(tok.children or [])
    if re.search(r"(?<!\\):[a-z]+\[", text):  # a Streamlit directive such as :red[...]
        found.add("directive")
    return found


def _strings(at: AppTest) -> list[str]:
    """Every Markdown body and label in the page's element tree (sidebar and dialogs included)."""
    out: list[str] = []

    def proto_strings(msg: Any) -> None:
        for fd, value in msg.ListFields():
            if fd.message_type is not None:
                for v in (
                    [value] if hasattr(value, "ListFields") else value
                ):  # one message, or a repeated field
                    proto_strings(v)
            elif fd.name in _FIELDS and isinstance(value, str):
                out.append(value)

    def walk(node: Any) -> None:
        proto = getattr(node, "proto", None)
        if proto is not None and hasattr(proto, "ListFields"):
            proto_strings(proto)
        for child in getattr(node, "children", {}).values():
            walk(child)

    walk(at._tree)
    return out


def _unescape(text: str) -> str:
    """The text as read on screen: escapes resolved, the invisible word joiners (no autolinks) dropped."""
    return re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", text).replace("\u2060", "")


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory, spark_session: None) -> Lakehouse:
    home = tmp_path_factory.mktemp("render")
    lh = Lakehouse(helpers.lake_settings(home, f"render{next(_names)}", CHECKS))
    src = home / "landing"
    src.mkdir()
    (src / "first.csv").write_text(
        "id,city,qty\n" + "".join(f"{i},{'Paris' if i % 2 else 'Lyon'},{i}\n" for i in range(1, 11))
    )
    first = ingest(lh, ITEMS, [str(src / "first.csv")], create=True, branch="initial")
    publish(lh, ITEMS, first.branch)
    # a hostile cell value (fails accepted_values) and a row failing the hostile-named check, ingested BY a hostile user
    (src / "bad.csv").write_text(f'id,city,qty\n20,"{HOSTILE}",1\n21,Paris,-1\n22,Lyon,3\n')
    bad = ingest(lh, ITEMS, [str(src / "bad.csv")], branch="hostile_batch", user=HOSTILE)
    assert bad.audit.status == "failed" and bad.audit.user == HOSTILE
    (src / "other.csv").write_text("id,city,qty\n30,Paris,1\n")
    ingest(lh, ITEMS, [str(src / "other.csv")], branch="other")
    discard(lh, ITEMS, "other", reason=HOSTILE, user=HOSTILE)
    lh.journal.record(
        user=HOSTILE,
        action="publish",
        outcome="refused",
        table=str(ITEMS),
        branch="hostile_batch",
        reason=HOSTILE,
        details={"note": HOSTILE},
    )
    return lh


@pytest.fixture
def env(hostile: Lakehouse, monkeypatch: pytest.MonkeyPatch) -> Iterator[Lakehouse]:
    helpers.use_env(monkeypatch, helpers.lake_env(hostile.settings, "reviewer"))
    yield hostile


def test_the_detector_sees_what_the_hostile_text_would_do() -> None:
    assert _active_tokens(HOSTILE) == {"image", "link_open", "html_inline", "directive"}
    from pages._common import md

    assert _active_tokens(md(HOSTILE)) == set() and _unescape(md(HOSTILE)) == HOSTILE
    assert _active_tokens(f"by **{md(HOSTILE)}**  \n{md('x' + chr(10) + '# h' + chr(10) + '<b>')}") == set()
    assert _active_tokens(md("see www.evil.test or http://evil.test", code=True)) == set()
    # no literal autolink either, while the text reads the same (the word joiners are invisible)
    assert _gfm_autolinks(LINKY) == ["http://evil.example/login", "www.evil.example,", "phish@evil.example"]
    assert _gfm_autolinks(md(LINKY)) == [] and _unescape(md(LINKY)) == LINKY
    for text in ("HTTPS://x.example", "WWW.x.example", "a.b+c@d.example", "x:https://y.example", HOSTILE):
        assert _gfm_autolinks(text) and _gfm_autolinks(md(text)) == [], text
    assert md("a `http://x.example` b", code=True) == "`` a `http://x.example` b ``"  # code spans never link
    # issue 25: a terminal escape in user text (a CSV header) shows as its escape, never as the raw bytes
    hostile_header = "id,\x1b]0;pwn\x07name\x00\x9b"
    for shown in (md(hostile_header), md(hostile_header, code=True)):
        assert not re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f]", shown), repr(shown)
    assert _unescape(md(hostile_header)) == "id,\\x1b]0;pwn\\x07name\\x00\\x9b"
    assert _unescape(md("a\r\nb")) == "a  \nb"  # line breaks stay line breaks


def _page(page: str, **query: str) -> AppTest:
    return helpers.app_test(page, timeout=180, **query)


def _assert_inert(at: AppTest) -> list[str]:
    strings = _strings(at)
    bad = {s: _active_tokens(s) for s in strings if _active_tokens(s)}
    assert not bad, bad
    return [_unescape(s) for s in strings]


def test_review_history_overview_render_hostile_text_inert(env: Lakehouse) -> None:
    at = _page("pages/review.py", table="shop.items", branch="hostile_batch")
    shown = "\n".join(_assert_inert(at))
    assert f"by {HOSTILE} at snapshot" in shown  # the audit's user, shown literally in the verdict
    assert HOSTILE_NAME in shown  # the hostile check name in the verdict and the audit details
    for page in ("pages/history.py", "pages/overview.py", "pages/branches.py", "pages/checks.py"):
        _assert_inert(_page(page))
    history = _page("pages/history.py")
    assert any(
        HOSTILE in df.value.to_string() for df in history.dataframe if hasattr(df.value, "to_string")
    )  # shown, as data
    # a hostile query parameter ends in an escaped error, not in Markdown
    at = _page("pages/review.py", table="shop.items", branch=HOSTILE)
    assert "invalid branch name" in "\n".join(_assert_inert(at))


def test_console_uploads_get_their_own_folder_and_server_paths_are_confined(env: Lakehouse) -> None:
    uploads = env.settings.home / "uploads"
    before = set(uploads.glob("*/*")) if uploads.exists() else set()
    for n, branch in enumerate(("upload_one", "upload_two")):
        at = _page("pages/ingest.py")
        at.file_uploader[0].set_value(
            ("items.csv", f"id,city,qty\n{100 + n},Paris,{n + 1}\n".encode(), "text/csv")
        )
        at.selectbox(key="ingest_table").set_value("shop.items")
        at.text_input(key="ingest_branch").input(branch)
        next(b for b in at.button if b.label == "Ingest and audit").click().run()
        assert not at.exception, [e.value for e in at.exception]
        assert f"Branch **{branch}** of **shop.items**: 1 row written" in _unescape(
            "\n".join(x.value for x in at.success)
        )
    files = sorted(set(uploads.glob("*/*")) - before)
    assert [f.name for f in files] == ["items.csv", "items.csv"] and files[0].parent != files[1].parent
    assert sorted(f.read_text() for f in files) == [
        "id,city,qty\n100,Paris,1\n",
        "id,city,qty\n101,Paris,2\n",
    ]
    rows = {
        b: [r.id for r in env.spark.table(env.spark_name(ITEMS, b)).where("id >= 100").collect()]
        for b in ("upload_one", "upload_two")
    }
    assert rows == {"upload_one": [100], "upload_two": [101]}
    # a server-side path outside the roots: refused by the core, shown as one escaped error naming the roots
    refs_before = set(env.table(ITEMS).metadata.refs)
    at = _page("pages/ingest.py")
    at.radio(key="ingest_source").set_value("Server-side path")
    at.selectbox(key="ingest_table").set_value("shop.items")
    at.run()
    at.text_input(key="ingest_path").input("/etc/passwd")
    next(b for b in at.button if b.label == "Ingest and audit").click().run()
    assert not at.exception, [e.value for e in at.exception]
    error = _unescape("\n".join(x.value for x in at.error))
    assert (
        "'/etc/passwd' is outside the allowed ingest roots" in error
        and str((env.settings.home / "landing").resolve()) in error
    )
    assert set(env.table(ITEMS).metadata.refs) == refs_before
    _assert_inert(at)


@pytest.mark.postgres
def test_sidebar_masks_the_catalog_password(
    postgres: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    uri = postgres.replace(
        "://wap@", "://wap:Sup3rS3cretPw@"
    )  # trust auth: the password is carried, not checked
    assert uri != postgres
    monkeypatch.setenv("WAP_HOME", str(tmp_path / "pg"))
    monkeypatch.setenv("WAP_CATALOG_URI", uri)
    monkeypatch.setenv("WAP_CATALOG_NAME", f"pgrender{next(_names)}")
    monkeypatch.setenv("WAP_USER", "reviewer")
    for var in ("WAP_CONFIG", "WAP_CHECKS", "WAP_CATALOG_JDBC_URI", "WAP_WAREHOUSE", "WAP_INGEST_ROOTS"):
        monkeypatch.delenv(var, raising=False)
    at = helpers.app_test()
    everything = "\n".join(_strings(at))
    assert "Sup3rS3cretPw" not in everything
    assert "postgresql+psycopg2://wap:***@127.0.0.1:" in _unescape(
        "\n".join(c.value for c in at.sidebar.caption)
    )


# ----------------------------------------------------------------------------- real Chromium, one page load
@pytest.mark.e2e
def test_review_in_chromium_renders_no_image_no_link_no_html_from_user_text(env: Lakehouse) -> None:
    from playwright.sync_api import expect

    if not Path(helpers.CHROMIUM).exists():
        pytest.skip("Chromium is not installed (make browser-deps)")
    s = env.settings
    server_env = helpers.console_env(**helpers.lake_env(s, "reviewer"))
    dialogs: list[str] = []
    with helpers.console(server_env, s.home / "streamlit-render.log") as base, helpers.browser_page() as page:
        page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        page.goto(f"{base}/review?table=shop.items&branch=hostile_batch")
        expect(page.get_by_text("Audit failed").first).to_be_visible()
        expect(
            page.get_by_text("checks (failing first)").first
        ).to_be_visible()  # the audit details rendered too
        expect(page.get_by_text("onerror=alert(1)").first).to_be_visible()  # the text is there, literally
        page.wait_for_timeout(500)
        for selector in (
            "img[src*='x.png']",
            "img[src*='name.png']",
            "img[src='x']",
            "[data-testid=stMain] img",
        ):
            assert page.locator(selector).count() == 0, selector
        # A link may carry user text only as an encoded parameter of the console's own pages (Review's "all
        # failing rows of <check> in Explore"): never as where the link goes.
        for href in page.eval_on_selector_all("a[href*='evil']", "as => as.map(a => a.href)"):
            where = urlsplit(href)
            assert (where.scheme, where.netloc) == urlsplit(base)[:2] and "evil" not in where.path, href
            assert where.path in ("/explore", "/ingest") and "evil" not in unquote(where.path), href
        assert "**bold**" in page.locator("[data-testid=stMain]").inner_text()  # not turned into <strong>
    assert dialogs == []


# ----------------------------------------------------------------------------- no link from user text (issue 19, 5)
@pytest.fixture(scope="module")
def linky(hostile: Lakehouse) -> Lakehouse:
    """URLs, hosts and e-mail addresses in every kind of user text: approval and request-changes
    comments, a thread comment, a forced publish's reason, a refusal's reason; a branch to discard."""
    from wap_core.workflow.review import add_comment, approve, request_changes

    src = hostile.settings.home / "landing"
    for n, branch in enumerate(("linky_batch", "linky_forced", "linky_discard")):
        (src / f"{branch}.csv").write_text(f"id,city,qty\n{40 + n},Paris,2\n")
        assert ingest(
            hostile, ITEMS, [str(src / f"{branch}.csv")], branch=branch, user="ingester"
        ).audit.passed
    approve(hostile, ITEMS, "linky_batch", comment=LINKY, user="approver@corp.example")
    add_comment(hostile, ITEMS, "linky_batch", LINKY, user="steward@corp.example")
    request_changes(hostile, ITEMS, "linky_batch", comment=LINKY, user="www.second.example")
    publish(hostile, ITEMS, "linky_forced", force=True, reason=LINKY, user="admin@corp.example")
    hostile.journal.record(
        user="http://user.example",
        action="publish",
        outcome="refused",
        table=str(ITEMS),
        branch="linky_batch",
        reason=LINKY,
    )
    return hostile


@pytest.mark.e2e
def test_no_link_from_user_text_in_chromium(linky: Lakehouse) -> None:
    """Every place user text is shown (review thread and approvals, a discard reason, the journal on
    History and Overview, errors built from URL parameters): the text is there, no <a> comes from it."""
    from playwright.sync_api import expect

    if not Path(helpers.CHROMIUM).exists():
        pytest.skip("Chromium is not installed (make browser-deps)")
    s = linky.settings
    server_env = helpers.console_env(**helpers.lake_env(s, "reviewer", WAP_SPARK_EAGER="0"))
    evil = ("evil.example", "second.example", "user.example", "corp.example")

    def no_links_from_user_text(page, base: str, where: str) -> str:  # type: ignore[no-untyped-def]
        page.wait_for_timeout(800)
        # the page's own links only: same origin (pages, in-page anchors such as #stMain), and no href
        # that carries user text (an autolink's is the text itself: http://..., mailto:...)
        links = page.evaluate(
            "() => Array.from(document.querySelectorAll('a')).map(a => [a.href, a.getAttribute('href') || ''])"
        )
        foreign = [raw for href, raw in links if not href.startswith(base) or any(e in raw for e in evil)]
        assert not foreign, (where, foreign)
        return str(page.locator("[data-testid=stMain]").inner_text()).replace("\u2060", "")

    with helpers.console(server_env, s.home / "streamlit-links.log") as base, helpers.browser_page() as page:
        # the review thread: an approval's and a request-changes comment, a comment, the users
        page.goto(f"{base}/review?table=shop.items&branch=linky_batch")
        expect(page.get_by_text("Changes requested").first).to_be_visible()
        expect(page.get_by_text("No comments yet.")).to_have_count(0)
        shown = no_links_from_user_text(page, base, "review")
        assert shown.count(LINKY) >= 2 and "www.second.example" in shown, shown
        # a discard through the dialog: its reason comes back in the confirmation
        page.goto(f"{base}/review?table=shop.items&branch=linky_discard")
        # a dialog's submit reruns after the page's run: let the Spark diff finish first
        expect(page.get_by_text("Diff computed on").first).to_be_visible(timeout=300_000)
        dialog = helpers.open_dialog(page, page.get_by_role("button", name="Discard"))
        box = dialog.get_by_label("Reason", exact=True)
        box.fill(LINKY)
        box.press("Enter")
        # the confirmation comes after the discard and the page's rerun, slow on a loaded machine (the full
        # suite runs two browser processes beside Spark); a lost submit would still fail here
        expect(page.get_by_text("Discarded shop.items · linky_discard")).to_be_visible(timeout=300_000)
        assert LINKY in no_links_from_user_text(page, base, "discarded")
        # the journal's reasons (History, Overview) and the forced publish
        for path, marker in (("/history", "Main's snapshot timeline"), ("/", "Recent publishes")):
            page.goto(f"{base}{path}")
            expect(page.get_by_text(marker)).to_be_visible()
            no_links_from_user_text(page, base, path)
        # errors built from URL parameters
        for query, error in (
            ("table=shop.items&branch=http://evil.example/login", "invalid branch name"),
            ("table=shop.items&branch=phish@evil.example", "invalid branch name"),
            ("table=www.evil.example&branch=x", "www.evil.example"),
        ):
            page.goto(f"{base}/review?{query}")
            expect(page.get_by_text(re.compile(r"invalid (branch|table) name")).first).to_be_visible()
            shown = no_links_from_user_text(page, base, query)
            assert error in shown, (query, shown)
