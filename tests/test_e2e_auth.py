"""Real OIDC sign-in end to end: the console with ``[auth]`` against a real OIDC provider, in Chromium.

``oidc-provider-mock`` (a real OpenID Connect server) runs on a free port with one predefined user
(sub ``ann``, e-mail ``ann@corp.test``); the console reads its ``[auth]`` section from a secrets file
outside the repository (``--secrets.files``). An anonymous visitor sees only the sign-in screen;
after signing in through the provider's authorize form, ann (an approver in the access file) sees
her identity and role in the sidebar, discards a branch through the Review dialog, and the journal
row of that discard carries ``ann@corp.test``.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import helpers
import pytest
from helpers import write_csv

from wap_core import Lakehouse, Settings, TableId
from wap_core.workflow.ingest import ingest
from wap_core.workflow.publish import publish

ROOT = Path(__file__).resolve().parent.parent
T = TableId("crm", "leads")
BRANCH = "leads_batch"
ACCESS = """\
roles:
  viewer: ["*"]
  steward: [sam@corp.test]
  approver: [ann@corp.test]
  admin: [root]
"""

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory, spark_session: None) -> Settings:
    """A small lakehouse built in the test process: one published batch and one open branch."""
    if not Path(helpers.CHROMIUM).exists():
        pytest.skip("Chromium is not installed (make test-deps)")
    home = tmp_path_factory.mktemp("e2eauth")
    checks = "crm.leads:\n  checks:\n    - not_null: [email]\n"
    settings = helpers.lake_settings(home, "e2eauth", checks, ingest_roots=(home,))
    lh = Lakehouse(settings)
    src = home / "src"
    ingest(
        lh,
        T,
        [write_csv(src / "a.csv", ["id", "email"], [(1, "a@x"), (2, "b@x")])],
        create=True,
        branch="first",
    )
    publish(lh, T, "first")
    ingest(lh, T, [write_csv(src / "b.csv", ["id", "email"], [(3, "c@x")])], branch=BRANCH)
    (home / "access.yml").write_text(ACCESS)  # default $WAP_HOME/access.yml
    return settings


@pytest.fixture(scope="module")
def servers(lake: Settings) -> Iterator[str]:
    """The OIDC provider and the console (sign-in configured through a secrets file outside the repo)."""
    oidc_port, port = helpers.free_port(), helpers.free_port()
    issuer = f"http://127.0.0.1:{oidc_port}"
    secrets = lake.home / "secrets.toml"
    secrets.write_text(
        "[auth]\n"
        f'redirect_uri = "http://127.0.0.1:{port}/oauth2callback"\n'
        'cookie_secret = "e2e-cookie-secret-0123456789abcdef"\n'
        'client_id = "wap-console"\n'
        'client_secret = "wap-console-secret"\n'
        f'server_metadata_url = "{issuer}/.well-known/openid-configuration"\n'
    )
    base_env = {k: v for k, v in os.environ.items() if not k.startswith("WAP_")}
    claims = json.dumps({"sub": "ann", "email": "ann@corp.test", "name": "Ann"})
    with helpers.running(
        [sys.executable, "-m", "oidc_provider_mock", "-p", str(oidc_port), "--user-claims", claims],
        cwd=lake.home,
        env=base_env,
        log=lake.home / "oidc.log",
        health=f"{issuer}/.well-known/openid-configuration",
        what="oidc_provider_mock",
    ):
        env = {
            **base_env,
            # WAP_USER: the OS identity must NOT be used once sign-in is on
            **helpers.lake_env(lake, "root", WAP_SPARK_DRIVER_MEMORY="1g"),
            "PYSPARK_PYTHON": sys.executable,
        }
        cmd = helpers.streamlit_cmd(port, "--secrets.files", str(secrets))
        with helpers.running(
            cmd,
            cwd=ROOT,
            env=env,
            log=lake.home / "streamlit.log",
            health=f"http://127.0.0.1:{port}/_stcore/health",
            what="streamlit",
        ):
            yield f"http://127.0.0.1:{port}"


def test_oidc_sign_in_then_a_journaled_action_as_the_signed_in_user(servers: str, lake: Settings) -> None:
    from playwright.sync_api import expect

    base = servers
    lh = Lakehouse(lake)
    main_before = lh.table(T).metadata.refs["main"].snapshot_id
    with helpers.browser_page(180_000) as page:  # the Review page starts Spark in the server
        # Anonymous: the sign-in screen and nothing else, also on a deep link.
        page.goto(f"{base}/review?table=crm.leads&branch={BRANCH}")
        expect(page.get_by_role("button", name="Sign in")).to_be_visible()
        page.wait_for_timeout(1000)
        body = page.inner_text("body")
        for secret in (
            "crm.leads",
            BRANCH,
            "e2eauth",
            "Catalog",
            "Warehouse",
            "Signed in as",
            "root",
            "Discard",
        ):
            assert secret not in body, (secret, body)
        assert page.locator('[data-testid="stSidebarNav"]').count() == 0

        # Sign in through the provider's authorize form (the predefined user "ann").
        page.get_by_role("button", name="Sign in").click()
        page.wait_for_url("http://127.0.0.1:*/oauth2/authorize*")
        page.get_by_role("button", name="ann", exact=True).click()
        page.wait_for_url(f"{base}/**")
        sidebar = page.locator('[data-testid="stSidebar"]')
        # the address reads as text, not a mailto link: an invisible word joiner follows the "@"
        expect(sidebar).to_contain_text(re.compile("Signed in as ann@\u2060corp\\.test"))
        expect(sidebar).to_contain_text("Role: approver")
        expect(sidebar.get_by_role("button", name="Sign out")).to_be_visible()
        assert "sign-in is off" not in sidebar.inner_text()

        # One journaled action through the UI: discard the branch in the Review dialog.
        page.goto(f"{base}/review?table=crm.leads&branch={BRANCH}")
        expect(page.get_by_role("button", name="Discard")).to_be_enabled()
        dialog = helpers.open_dialog(page, page.get_by_role("button", name="Discard"))
        dialog.get_by_label("Reason", exact=True).fill("duplicate leads from the CRM export")
        dialog.get_by_label("Reason", exact=True).press("Enter")  # one submit: the text with Enter
        # the discard itself first (a precise failure if the submit was not taken), then its success line:
        # once in ~6 runs under load the line was lost although the discard was done (CI s34, local s35): a
        # newer rerun interrupted the run that showed it, which had already consumed it (fixed: one-shot state
        # is consumed when the page's run ends, pages/_common.run_page)
        deadline = time.monotonic() + 180
        while BRANCH in Lakehouse(lake).table(T).metadata.refs:
            assert time.monotonic() < deadline, "the discard submitted in the dialog did not happen"
            page.wait_for_timeout(1000)
        expect(page.get_by_text(f"Discarded crm.leads · {BRANCH}")).to_be_visible()
        helpers.page_idle(page)

        # Sign out: the provider's end-session form, then back to the sign-in screen. From a page loaded anew
        # (Overview): once in a fresh clone's full run (2026-12-02) the Review page, rerunning after the
        # discard under load, never showed its sidebar's button again within 180 s; the sign-out is what
        # this step tests, on any page, and the discard's line was asserted above.
        page.goto(f"{base}/")
        sign_out = page.locator('[data-testid="stSidebar"]').get_by_role("button", name="Sign out")
        expect(sign_out).to_be_visible()
        sign_out.click()
        page.wait_for_url("http://127.0.0.1:*/oauth2/end_session*")
        page.get_by_role("button", name="End session").click()
        expect(page.get_by_role("button", name="Sign in")).to_be_visible()
        assert "ann@corp.test" not in page.inner_text("body").replace("\u2060", "")

    refs = Lakehouse(lake).table(T).metadata.refs
    assert BRANCH not in refs and refs["main"].snapshot_id == main_before
    entry = Lakehouse(lake).journal.history(str(T), branch=BRANCH, action="discard")[0]
    assert (entry.user, entry.outcome, entry.reason) == (
        "ann@corp.test",
        "discarded",
        "duplicate leads from the CRM export",
    )
