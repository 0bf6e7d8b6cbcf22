"""The Explore SQL box in a real browser (issue 19, item 1): Cancel while it runs; closing the tab cancels it.

The console serves a 200,000-row table; the runaway query is a self-join of it on a key with two values
(2 * 10^10 rows: the SQL box refuses a cross join, not an equi-join that explodes) with a time limit the
test never reaches (WAP_QUERY_TIMEOUT=600), so only the Cancel button or the end of the
browser session can stop it. Both places a query can run are tried:

- ``WAP_QUERY_ISOLATION=process`` (the default): the query runs in a SQL-box worker process
  (wap_core.analysis.sandbox); what runs is read from /proc: the worker's process group (its Python and its
  JVM) exists while the page says so, and is gone after Cancel and after the tab closed;
- ``driver``: the query runs in the console's own Spark; what runs is read from Spark's REST API (the
  console's Spark UI on a free port): the query's job is running, then gone.
"""

from __future__ import annotations

import json
import os
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import helpers
import pytest

from wap_core import Lakehouse, TableId
from wap_core.analysis import sandbox

CHROMIUM = helpers.CHROMIUM
ARGS = helpers.CHROMIUM_ARGS
T = TableId("jobs", "wide")
ROWS = 200_000
RUNAWAY_SQL = (
    "SELECT count(*) AS n, sum(a.id + b.id) AS s FROM ref_view a JOIN ref_view b ON a.id % 2 = b.id % 2"
)

pytestmark = pytest.mark.e2e


@dataclass
class Console:
    base: str
    spark_ui: str
    isolation: str
    home: Path

    def query_running(self) -> bool:
        """True while the console runs an Explore query (a worker's process group, or a Spark job)."""
        if self.isolation == "process":
            return bool(self.worker_processes())
        return bool(self.running_query_jobs())

    def worker_processes(self) -> list[int]:
        """Processes of this console's SQL-box workers (tagged ``wap-sql-box <home>``) and their JVMs."""
        tag = f"{sandbox.TAG}\0{self.home}\0".encode()
        workers = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    if tag in Path(f"/proc/{entry}/cmdline").read_bytes():
                        workers.append(int(entry))
                except OSError:
                    continue
        return [pid for w in workers for pid in sandbox.group_members(w)]

    def running_query_jobs(self) -> list[dict[str, Any]]:
        """The console's running Spark jobs started by an Explore query (their group's description)."""
        with urllib.request.urlopen(f"{self.spark_ui}/api/v1/applications", timeout=30) as r:
            app = json.load(r)[0]["id"]
        with urllib.request.urlopen(
            f"{self.spark_ui}/api/v1/applications/{app}/jobs?status=running", timeout=30
        ) as r:
            jobs: list[dict[str, Any]] = json.load(r)
        return [j for j in jobs if str(j.get("jobGroup", "")).startswith("wap-")]


@pytest.fixture(scope="module", params=["process", "driver"])
def console(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, spark_session: None
) -> Iterator[Console]:
    if not Path(CHROMIUM).exists():
        pytest.skip("Chromium is not installed (make browser-deps)")
    isolation = str(request.param)
    home = tmp_path_factory.mktemp(f"cancel-{isolation}")
    settings = helpers.lake_settings(home, f"e2ecancel{isolation}")
    lh = Lakehouse(settings)
    helpers.publish_ids(lh, T, home / "landing" / "wide.parquet", ROWS)
    ui_port = helpers.free_port()
    env = helpers.console_env(
        **helpers.lake_env(
            settings,
            "analyst-e2e",
            WAP_QUERY_TIMEOUT="600",
            WAP_QUERY_ISOLATION=isolation,
            WAP_SPARK_UI="true",
            WAP_SPARK_CONF=f"spark.ui.port={ui_port} spark.port.maxRetries=0",
        )
    )
    with helpers.console(env, home / "streamlit.log") as base:
        yield Console(base, f"http://127.0.0.1:{ui_port}", isolation, home)


def _start_runaway(page: Any, base: str) -> None:
    from playwright.sync_api import expect

    page.goto(f"{base}/explore?table={T}")
    expect(page.get_by_text(f"Reading {T} at branch main")).to_be_visible()
    page.get_by_role("tab", name="SQL").click()
    box = page.get_by_role("textbox", name="SQL")
    box.fill(RUNAWAY_SQL)
    page.get_by_role("button", name="Run query").click()
    expect(page.get_by_text("Running with Spark…")).to_be_visible()


def test_cancel_button_and_closed_tab_stop_the_query(console: Console) -> None:
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=180_000)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.set_default_timeout(180_000)
            _start_runaway(page, console.base)
            helpers.wait_for(console.query_running, 120, "the query to run")
            page.get_by_role("button", name="Cancel").click()
            expect(page.get_by_text("was cancelled and its Spark jobs were stopped")).to_be_visible()
            expect(page.get_by_role("button", name="Cancel")).to_have_count(0)
            helpers.wait_for(lambda: not console.query_running(), 60, "the cancelled query to end")

            context = browser.new_context(viewport={"width": 1400, "height": 1000})
            tab = context.new_page()
            tab.set_default_timeout(180_000)
            _start_runaway(tab, console.base)
            helpers.wait_for(console.query_running, 120, "the second query to run")
            context.close()  # the browser tab is gone: its session disconnects
            helpers.wait_for(
                lambda: not console.query_running(), 60, "the closed tab's query to be cancelled"
            )
        finally:
            browser.close()
