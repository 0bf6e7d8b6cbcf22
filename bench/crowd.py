"""Many users at once (issue 10, item 4): scenario ``crowd`` of ``python -m bench.run --only crowd``.

One real console (``streamlit run app.py``) with OIDC sign-in against a real provider
(``oidc-provider-mock``, one predefined user per session, all approvers in the access file), and
``--crowd-sessions`` (default 8) Playwright browser contexts in one Chromium, each an asyncio task
signed in as its own user. Each session owns ``--crowd-rounds`` open branches on one of
``--crowd-tables`` TPC-H ``lineitem`` tables (two sessions share a table, so their publishes race
for the same main) and, for each branch, loops: open the Review page (verdict, then the Spark diff),
rebase when main moved, re-run the audit (button), publish through the dialog with a typed note
(a refusal because the other session's publish landed first is expected: rebase and try again),
then opens Branches, Overview and History. Meanwhile a CLI (``python -m wap_core ingest``
subprocesses, one at a time) ingests new batches into the same tables.

Afterwards, from the catalog database and the Iceberg metadata (never the pages' word):

- errors: no ``stException`` element, no unexpected error alert on any page, no CLI non-zero exit;
- lost: no pending intent, every resolved intent has exactly one journal row, every publish click has
  its journal row (published or refused), every CLI ingest its ``written`` row and its branch;
- duplicates: each session branch published exactly once, main moved once per publish (snapshot log),
  no journal row twice.

Latency of each page action: from navigation start (or the click) to the deciding element visible.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shutil
import statistics
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from bench import data
from bench.common import Bench, Row, fmt_s, log

SCENARIOS = ("crowd", "runaway")
NS = "crowd"
CATALOG = "crowd"
BATCH_ROWS = 2000
EXPECTED_REFUSALS = ("main moved", "lost a race", "is busy", "rebase")
ACCESS = """\
roles:
  viewer: ["*"]
  steward: [cli@corp.test]
  approver: [{approvers}]
  admin: [bench-setup]
"""


def checks_yaml(tables: list[str]) -> str:
    return "".join(data.lineitem_checks(NS, t) for t in tables)


@dataclass
class Stats:
    """What the sessions and the CLI did, as they saw it (checked against the catalog afterwards)."""

    latency: dict[str, list[float]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    refusals: list[str] = field(default_factory=list)  # expected: another session's publish landed first
    published: list[tuple[str, str, str]] = field(default_factory=list)  # (table, branch, user) per success
    publish_clicks: Counter[str] = field(default_factory=Counter)  # user -> Confirm clicks
    audits: Counter[str] = field(default_factory=Counter)  # user -> audit re-runs
    rebases: int = 0
    cli: list[dict[str, Any]] = field(default_factory=list)
    unpublished: list[str] = field(default_factory=list)

    def timed(self, kind: str, seconds: float) -> None:
        self.latency.setdefault(kind, []).append(seconds)


def _pct(xs: list[float], q: float) -> float:
    if len(xs) == 1:
        return xs[0]
    return statistics.quantiles(xs, n=100, method="inclusive")[int(q) - 1]


# --------------------------------------------------------------------------- set-up (core API)


def _batch(t: pa.Table, index: int, out: Path) -> Path:
    """``BATCH_ROWS`` lineitem rows with order keys moved above every other batch's: a fresh batch."""
    path = out / f"batch_{index}.parquet"
    if not path.is_file():
        start = (index * BATCH_ROWS) % max(1, len(t) - BATCH_ROWS)
        s = t.slice(start, BATCH_ROWS)
        i = s.schema.get_field_index("l_orderkey")
        s = s.set_column(i, "l_orderkey", pc.add(s["l_orderkey"], pa.scalar((index + 1) * 10**9, pa.int64())))
        pq.write_table(s, path)
    return path


class Crowd:
    def __init__(self, b: Bench) -> None:
        a = b.args
        self.b = b
        self.sessions: int = a.crowd_sessions
        self.rounds: int = a.crowd_rounds
        self.ntables: int = a.crowd_tables
        self.local: bool = a.crowd_local
        self.home = b.work / "crowd"
        self.batches = self.home / "batches"
        self.tables = [f"li_{k}" for k in range(self.ntables)]
        self.users = [f"u{i}@corp.test" for i in range(self.sessions)]
        self.stats = Stats()
        self.next_batch = 0
        self.source: pa.Table | None = None

    def batch(self) -> Path:
        assert self.source is not None
        self.next_batch += 1
        return _batch(self.source, self.next_batch, self.batches)

    def table_of(self, s: int) -> str:
        return self.tables[s % self.ntables]

    def branches_of(self, s: int) -> list[str]:
        return [f"s{s}_r{r}" for r in range(self.rounds)]

    def setup(self) -> None:
        import shutil

        from wap_core import Lakehouse, Settings, TableId
        from wap_core.security.paths import SourcePolicy
        from wap_core.workflow.ingest import ingest
        from wap_core.workflow.publish import publish

        t0 = time.perf_counter()
        src = data.generate(self.b.data_dir, 0.01, ("lineitem",))
        self.source = data._plain_strings(pq.read_table(src / "lineitem.parquet"))
        shutil.rmtree(self.home, ignore_errors=True)
        self.batches.mkdir(parents=True)
        (self.home / "checks.yml").write_text(checks_yaml(self.tables))
        (self.home / "access.yml").write_text(ACCESS.format(approvers=", ".join(self.users)))
        self.settings = Settings(
            home=self.home,
            checks_path=self.home / "checks.yml",
            access_path=self.home / "access.yml",
            user="bench-setup",
            catalog_name=CATALOG,
            shuffle_partitions=2,
            spark_driver_memory="1g",
            ingest_roots=(self.batches,),
        )
        lh = Lakehouse(self.settings)
        self.b.lh = lh
        main = self.batches / "main.parquet"
        pq.write_table(self.source, main)
        for name in self.tables:
            tid = TableId(NS, name)
            ingest(lh, tid, [str(main)], create=True, branch="initial", source_policy=SourcePolicy.ANY)
            publish(lh, tid, "initial")
            for s in range(self.sessions):
                if self.table_of(s) != name:
                    continue
                for br in self.branches_of(s):
                    res = ingest(lh, tid, [str(self.batch())], branch=br, source_policy=SourcePolicy.ANY)
                    if not res.audit.passed:
                        raise SystemExit(f"crowd set-up: {name}/{br} failed its audit")
        self.main_before = {
            n: lh.table(TableId(NS, n)).metadata.refs["main"].snapshot_id for n in self.tables
        }
        self.log_before = {n: len(lh.table(TableId(NS, n)).metadata.snapshot_log) for n in self.tables}
        with lh.catalog.engine.connect() as conn:
            from sqlalchemy import text

            self.journal_max = int(
                conn.execute(text("SELECT COALESCE(MAX(id), 0) FROM wap_journal")).scalar()
            )
            self.intent_max = int(conn.execute(text("SELECT COALESCE(MAX(id), 0) FROM wap_intents")).scalar())
        self.setup_seconds = time.perf_counter() - t0
        log(
            f"crowd set-up in {self.setup_seconds:.1f} s: {self.ntables} tables × {len(self.source):,} rows, "
            f"{self.sessions * self.rounds} open branches of {BATCH_ROWS} rows ({self.rounds} per session)"
        )
        from wap_core.lake.spark import spark_running

        if spark_running():  # the crowd's Spark is the console's; the bench needs none from here on
            lh.spark.stop()

    # ----- servers -------------------------------------------------------------------------------
    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("WAP_")}
        env.update(
            WAP_HOME=str(self.home),
            WAP_CHECKS=str(self.home / "checks.yml"),
            WAP_ACCESS=str(self.home / "access.yml"),
            WAP_CATALOG_NAME=CATALOG,
            WAP_SHUFFLE_PARTITIONS="2",
            WAP_SPARK_DRIVER_MEMORY="2g",
            WAP_INGEST_ROOTS=str(self.batches),
            PYSPARK_PYTHON=sys.executable,
            PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
        )
        return env

    # ----- one browser session -------------------------------------------------------------------
    async def check_page(self, page: Any, where: str) -> None:
        """No exception element and no unexpected error alert on the page."""
        exc = page.locator('[data-testid="stException"]')
        if await exc.count():
            self.stats.errors.append(f"{where}: exception {(await exc.first.inner_text())[:300]!r}")
        alerts = page.locator('[data-testid="stAlertContentError"]')
        for k in range(await alerts.count()):
            msg = (await alerts.nth(k).inner_text())[:300]
            if not any(x in msg for x in EXPECTED_REFUSALS):
                self.stats.errors.append(f"{where}: error alert {msg!r}")

    async def session(self, browser: Any, s: int, base: str) -> None:
        from playwright.async_api import expect

        user = self.users[s]
        table = f"{NS}.{self.table_of(s)}"
        ctx = await browser.new_context(viewport={"width": 1400, "height": 1000})
        page = await ctx.new_page()
        page.set_default_timeout(300_000)
        try:
            await page.goto(base)
            if not self.local:
                await page.get_by_role("button", name="Sign in").click()
                await page.wait_for_url("http://127.0.0.1:*/oauth2/authorize*")
                await page.get_by_role("button", name=f"u{s}", exact=True).click()
                await page.wait_for_url(f"{base}/**")
                await expect(page.locator('[data-testid="stSidebar"]')).to_contain_text(
                    f"Signed in as {user}", timeout=300_000
                )
            for branch in self.branches_of(s):
                await self.publish_branch(page, s, table, branch, base)
                await self.metadata_pages(page, base, table)
        except Exception as exc:
            self.stats.errors.append(f"session {s} ({user}): {type(exc).__name__}: {str(exc)[:400]}")
            with_shot = self.home / f"session{s}_error.png"
            with contextlib.suppress(Exception):
                await page.screenshot(path=str(with_shot), full_page=True)
        finally:
            await ctx.close()

    async def publish_branch(self, page: Any, s: int, table: str, branch: str, base: str) -> None:
        from playwright.async_api import expect

        user = self.users[s]
        url = f"{base}/review?table={table}&branch={branch}"
        where = f"{user} {table} {branch}"
        for _attempt in range(8):
            t0 = time.perf_counter()
            await page.goto(url, wait_until="commit")
            publish_btn = page.get_by_role("button", name="Publish", exact=True)
            await expect(publish_btn).to_be_visible()
            self.stats.timed("review: verdict and actions", time.perf_counter() - t0)
            await expect(page.get_by_text(re.compile(r"Diff computed on [\d,]+ new rows"))).to_be_visible()
            self.stats.timed("review: Spark diff rendered", time.perf_counter() - t0)
            await self.check_page(page, f"{where} review")
            rebase_btn = page.get_by_role("button", name="Rebase", exact=True)
            if await rebase_btn.count():
                t0 = time.perf_counter()
                await rebase_btn.click()
                rebased = page.get_by_text(re.compile(rf"Rebased {re.escape(table)} {branch} onto main"))
                lost = page.locator('[data-testid="stAlertContentError"]').filter(has_text="lost a race")
                await expect(rebased.or_(lost).first).to_be_visible()
                if not await rebased.count():
                    # the rebase's commit lost every retry to the other session's publish or a CLI
                    # ingest on the same table: refused and journaled, nothing changed; try again
                    msg = (await lost.first.inner_text())[:300]
                    self.stats.timed("rebase refused (lost a race)", time.perf_counter() - t0)
                    self.stats.refusals.append(f"{where}: rebase {msg}")
                    continue
                self.stats.timed("rebase (button)", time.perf_counter() - t0)
                self.stats.rebases += 1
                await self.check_page(page, f"{where} rebase")
            t0 = time.perf_counter()
            await page.get_by_role("button", name="Re-run audit", exact=True).click()
            await expect(page.get_by_text(f"Audit re-run by {user}")).to_be_visible()
            self.stats.timed("re-run audit (button)", time.perf_counter() - t0)
            self.stats.audits[user] += 1
            await self.check_page(page, f"{where} audit")
            publish_btn = page.get_by_role("button", name="Publish", exact=True)
            await expect(publish_btn).to_be_visible()
            if not await publish_btn.is_enabled():
                # main moved under us since the page rendered (the other session published): rebase again
                self.stats.refusals.append(f"{where}: Publish disabled after the audit (main moved)")
                continue
            t0 = time.perf_counter()
            await publish_btn.click()
            dialog = page.get_by_role("dialog")
            disabled_now = page.get_by_text("Publish is disabled:")
            await expect(dialog.or_(disabled_now).first).to_be_visible()
            if not await dialog.count():
                # the other session's publish landed between the render and the click: the rerun shows
                # Publish disabled (main moved) instead of opening the dialog; rebase and try again
                self.stats.refusals.append(
                    f"{where}: Publish clicked as main moved: the page shows it disabled"
                )
                continue
            await dialog.get_by_label("Note (optional)").fill(f"crowd bench: {user} publishes {branch}")
            self.stats.publish_clicks[user] += 1
            await dialog.get_by_role("button", name="Confirm").click()
            done = page.get_by_text(
                re.compile(rf"Published {re.escape(table)} · {branch}: main is now snapshot")
            )
            refused = dialog.locator('[data-testid="stAlertContentError"]')
            await expect(done.or_(refused).first).to_be_visible()
            if await done.count():
                self.stats.timed("publish (dialog Confirm → success)", time.perf_counter() - t0)
                self.stats.published.append((table, branch, user))
                await self.check_page(page, f"{where} publish")
                return
            msg = (await refused.first.inner_text())[:300]
            self.stats.timed("publish refused (dialog Confirm → error)", time.perf_counter() - t0)
            if any(x in msg for x in EXPECTED_REFUSALS):
                self.stats.refusals.append(f"{where}: {msg}")
            else:
                self.stats.errors.append(f"{where}: publish error {msg!r}")
            await dialog.get_by_role("button", name="Cancel").click()
            await expect(dialog).to_be_hidden()
        self.stats.unpublished.append(f"{table} {branch}")

    async def metadata_pages(self, page: Any, base: str, table: str) -> None:
        from playwright.async_api import expect

        for kind, path, deciding in (
            ("Branches", "/branches", page.get_by_text(re.compile(r"\d+ of \d+ open branches"))),
            ("Overview", "/", page.get_by_text("Open branches by status")),
            ("History", "/history", page.get_by_text(re.compile(r"\d+ journal entries"))),
        ):
            t0 = time.perf_counter()
            await page.goto(base + path, wait_until="commit")
            await expect(deciding).to_be_visible()
            self.stats.timed(f"{kind} page", time.perf_counter() - t0)
            await self.check_page(page, f"{kind} page")

    # ----- the CLI -------------------------------------------------------------------------------
    async def cli(self, stop: asyncio.Event) -> None:
        env = dict(self.env(), WAP_USER="cli@corp.test", WAP_SPARK_DRIVER_MEMORY="1g")
        n = 0
        while not stop.is_set() or n < self.b.args.crowd_cli_min:
            name = self.tables[n % self.ntables]
            branch = f"cli_{n}"
            path = self.batch()
            t0 = time.perf_counter()
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "wap_core",
                "ingest",
                f"{NS}.{name}",
                str(path),
                "--branch",
                branch,
                cwd=str(ROOT),
                env=env,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
            out, err = await proc.communicate()
            self.stats.cli.append(
                {
                    "table": f"{NS}.{name}",
                    "branch": branch,
                    "rc": proc.returncode,
                    "seconds": time.perf_counter() - t0,
                    "stdout": out.decode(errors="replace").strip()[-200:],
                    "stderr": err.decode(errors="replace").strip()[-300:],
                }
            )
            if proc.returncode != 0:
                self.stats.errors.append(
                    f"CLI ingest {name} {branch}: exit {proc.returncode}: {err.decode()[-300:]}"
                )
            n += 1

    async def drive(self, base: str) -> float:
        from playwright.async_api import async_playwright, expect

        helpers = _helpers()
        expect.set_options(timeout=300_000)  # a loaded 2-core machine: minutes, not the default 5 s
        async with async_playwright() as p:
            browser = await p.chromium.launch(executable_path=helpers.CHROMIUM, args=helpers.CHROMIUM_ARGS)
            try:
                await self.warm_up(browser, base)
                log(f"crowd: {self.sessions} sessions and the CLI start")
                stop = asyncio.Event()
                cli = asyncio.create_task(self.cli(stop))
                t0 = time.perf_counter()
                await asyncio.gather(*(self.session(browser, s, base) for s in range(self.sessions)))
                elapsed = time.perf_counter() - t0
                stop.set()
                await cli
                return elapsed
            finally:
                await browser.close()

    async def warm_up(self, browser: Any, base: str) -> None:
        """Sign in once and wait until the console's Spark runs (its start is reported, not timed per page)."""
        from playwright.async_api import expect

        ctx = await browser.new_context()
        page = await ctx.new_page()
        t0 = time.perf_counter()
        try:
            await page.goto(base)
            if not self.local:
                await page.get_by_role("button", name="Sign in").click()
                await page.wait_for_url("http://127.0.0.1:*/oauth2/authorize*")
                await page.get_by_role("button", name="u0", exact=True).click()
                await page.wait_for_url(f"{base}/**")
            await expect(page.locator('[data-testid="stSidebar"]')).to_contain_text(
                "Spark: running", timeout=600_000
            )
        finally:
            await ctx.close()
        self.spark_start = time.perf_counter() - t0
        log(f"crowd: the console's Spark is running ({self.spark_start:.1f} s after the first visit)")

    # ----- the run -------------------------------------------------------------------------------
    def serve_and_drive(self) -> None:
        from contextlib import ExitStack

        helpers = _helpers()
        env = self.env()
        port = helpers.free_port()
        base = f"http://127.0.0.1:{port}"
        cmd = helpers.streamlit_cmd(port)
        with ExitStack() as stack:
            if not self.local:
                oidc_port = helpers.free_port()
                issuer = f"http://127.0.0.1:{oidc_port}"
                secrets = self.home / "secrets.toml"
                secrets.write_text(
                    "[auth]\n"
                    f'redirect_uri = "{base}/oauth2callback"\n'
                    'cookie_secret = "crowd-bench-cookie-secret-0123456789"\n'
                    'client_id = "wap-console"\n'
                    'client_secret = "wap-console-secret"\n'
                    f'server_metadata_url = "{issuer}/.well-known/openid-configuration"\n'
                )
                claims: list[str] = []
                for i, u in enumerate(self.users):
                    claims += ["--user-claims", json.dumps({"sub": f"u{i}", "email": u, "name": f"User {i}"})]
                stack.enter_context(
                    helpers.running(
                        [sys.executable, "-m", "oidc_provider_mock", "-p", str(oidc_port), *claims],
                        cwd=self.home,
                        env=env,
                        log=self.home / "oidc.log",
                        health=f"{issuer}/.well-known/openid-configuration",
                        what="oidc_provider_mock",
                    )
                )
                cmd += ["--secrets.files", str(secrets)]
            else:
                env["WAP_USER"] = self.users[0]
            stack.enter_context(
                helpers.running(
                    cmd,
                    cwd=ROOT,
                    env=env,
                    log=self.home / "streamlit.log",
                    health=f"{base}/_stcore/health",
                    timeout=180,
                )
            )
            log(f"crowd: console at {base} ({'local mode' if self.local else 'OIDC sign-in'})")
            self.load_before = os.getloadavg()
            self.elapsed = asyncio.run(self.drive(base))
            self.load_after = os.getloadavg()

    # ----- verification (catalog database + Iceberg metadata) -------------------------------------
    def verify(self) -> dict[str, Any]:
        from sqlalchemy import text

        from wap_core import Lakehouse, TableId

        lh = Lakehouse(self.settings)
        st = self.stats
        with lh.catalog.engine.connect() as conn:
            journal = [
                dict(r)
                for r in conn.execute(
                    text("SELECT * FROM wap_journal WHERE id > :m ORDER BY id"), {"m": self.journal_max}
                ).mappings()
            ]
            intents = [
                dict(r)
                for r in conn.execute(
                    text("SELECT * FROM wap_intents WHERE id > :m ORDER BY id"), {"m": self.intent_max}
                ).mappings()
            ]
        lost: list[str] = []
        dups: list[str] = []
        by_intent = Counter(r["intent_id"] for r in journal if r["intent_id"] is not None)
        for it in intents:
            if it["status"] == "pending":
                lost.append(
                    f"intent {it['id']} ({it['action']} {it['table_name']} {it['branch']}) still pending"
                )
            elif by_intent[it["id"]] != 1:
                lost.append(
                    f"intent {it['id']} ({it['action']} {it['branch']}) has {by_intent[it['id']]} journal rows"
                )
        intent_ids = {it["id"] for it in intents}
        for i, _n in by_intent.items():
            if i not in intent_ids:
                lost.append(f"journal row for unknown intent {i}")
        pub_rows = [r for r in journal if r["action"] == "publish"]
        published = Counter(
            (r["table_name"], r["branch"]) for r in pub_rows if r["outcome"] in ("published", "forced")
        )
        # every publish click has its row: published or refused, by that user
        for u in self.users:
            rows = [r for r in pub_rows if r["user_name"] == u and r["outcome"] in ("published", "refused")]
            if len(rows) != st.publish_clicks[u]:
                lost.append(f"{u}: {st.publish_clicks[u]} publish clicks, {len(rows)} publish journal rows")
            audits = [r for r in journal if r["action"] == "audit" and r["user_name"] == u]
            if len(audits) < st.audits[u]:
                lost.append(f"{u}: {st.audits[u]} audit re-runs, {len(audits)} audit journal rows")
        for table, branch, user in st.published:
            if not any(
                r["table_name"] == table and r["branch"] == branch and r["user_name"] == user
                for r in pub_rows
                if r["outcome"] == "published"
            ):
                lost.append(f"{table} {branch}: published by {user} in the page, no journal row")
        main_moves = 0
        for name in self.tables:
            tid = TableId(NS, name)
            tbl = lh.table(tid)
            refs = tbl.metadata.refs
            main_ids = set()
            snap = tbl.snapshot_by_id(refs["main"].snapshot_id)
            while snap is not None:
                main_ids.add(snap.snapshot_id)
                snap = tbl.snapshot_by_id(snap.parent_snapshot_id) if snap.parent_snapshot_id else None
            mine = [
                (str(tid), br)
                for s in range(self.sessions)
                if self.table_of(s) == name
                for br in self.branches_of(s)
            ]
            for key in mine:
                if published[key] != 1:
                    dups.append(f"{key[0]} {key[1]} published {published[key]} times")
                if key[1] in refs:
                    dups.append(f"{key[0]} {key[1]} still open")
            n_pub = sum(v for (t, _b), v in published.items() if t == str(tid))
            moves = len(tbl.metadata.snapshot_log) - self.log_before[name]
            main_moves += moves
            if moves != n_pub:
                dups.append(f"{tid}: main moved {moves} times for {n_pub} publishes")
            for r in pub_rows:
                if (
                    r["table_name"] == str(tid)
                    and r["outcome"] == "published"
                    and r["snapshot_after"] not in main_ids
                ):
                    lost.append(
                        f"{tid} {r['branch']}: published snapshot {r['snapshot_after']} not in main's history"
                    )
        for c in st.cli:
            if c["rc"] != 0:
                continue
            rows = [
                r
                for r in journal
                if r["action"] == "ingest" and r["table_name"] == c["table"] and r["branch"] == c["branch"]
            ]
            if [r["outcome"] for r in rows] != ["written"]:
                lost.append(
                    f"CLI ingest {c['table']} {c['branch']}: journal rows {[r['outcome'] for r in rows]}"
                )
            if c["branch"] not in lh.table(TableId.parse(c["table"])).metadata.refs:
                lost.append(f"CLI ingest {c['table']} {c['branch']}: branch missing")
        seen = Counter(
            (r["action"], r["table_name"], r["branch"], r["user_name"], r["outcome"], str(r["at"]))
            for r in journal
        )
        dups += [f"journal row twice: {k}" for k, v in seen.items() if v > 1]
        return {
            "journal_rows": len(journal),
            "intents": len(intents),
            "lost": lost,
            "dups": dups,
            "published_rows": sum(published.values()),
            "main_moves": main_moves,
            "outcomes": Counter(f"{r['action']}:{r['outcome']}" for r in journal),
        }


def _helpers() -> Any:
    """tests/helpers.py (free port, server start/stop in its own process group, Chromium flags)."""
    tests = str(ROOT / "tests")
    if tests not in sys.path:
        sys.path.insert(0, tests)
    import helpers

    return helpers


ROOT = Path(__file__).resolve().parent.parent


def scenario_crowd(b: Bench) -> None:

    c = Crowd(b)
    c.setup()
    c.serve_and_drive()
    st = c.stats
    v = c.verify()
    log(f"crowd: verified {v['journal_rows']} journal rows, {v['intents']} intents")
    mode = "local mode (one WAP_USER)" if c.local else f"OIDC sign-in, {c.sessions} distinct users"
    sizes = f"{c.sessions} sessions × {c.rounds} branches, {c.ntables} tables, {len(st.cli)} CLI ingests"
    notes = [
        f"crowd: {mode}; one console (streamlit), {c.sessions} Playwright contexts in one Chromium (asyncio tasks), "
        f"the CLI ingesting {BATCH_ROWS}-row batches into the same tables one process at a time; "
        f"run {c.elapsed:.0f} s after the console's Spark started ({c.spark_start:.0f} s after the first visit); "
        f"set-up {c.setup_seconds:.0f} s with the core API",
        f"crowd: load average before {c.load_before[0]:.1f} / {c.load_before[1]:.1f} / {c.load_before[2]:.1f}, "
        f"after {c.load_after[0]:.1f} / {c.load_after[1]:.1f} / {c.load_after[2]:.1f} (2 cores shared with other sessions)",
        f"crowd: actions: {sum(len(x) for x in st.latency.values())} timed; {sum(st.publish_clicks.values())} publish confirms, "
        f"{len(st.published)} published, {len(st.refusals)} expected refusals (the table's other session published first: "
        f"rebase, re-audit, publish again), {st.rebases} rebases, {sum(st.audits.values())} audit re-runs; "
        f"CLI ingests {len(st.cli)} (exit codes {dict(Counter(x['rc'] for x in st.cli))}, median "
        f"{statistics.median([x['seconds'] for x in st.cli]) if st.cli else 0:.1f} s each, a JVM per process)",
        f"crowd: journal rows written during the run {v['journal_rows']} ({', '.join(f'{k} {n}' for k, n in sorted(v['outcomes'].items()))}); "
        f"intents {v['intents']}; main moved {v['main_moves']} times for {v['published_rows']} published rows",
    ]
    notes += [f"crowd error: {e}" for e in st.errors[:20]]
    notes += [f"crowd lost: {e}" for e in v["lost"][:20]]
    notes += [f"crowd duplicate: {e}" for e in v["dups"][:20]]
    notes += [f"crowd refusal (expected): {e}" for e in st.refusals[:5]]
    notes += [f"crowd unpublished: {e}" for e in st.unpublished]
    for kind in sorted(st.latency):
        xs = st.latency[kind]
        p50, p95 = statistics.median(xs), _pct(xs, 95)
        b.rows.append(
            Row(
                f"crowd latency: {kind}",
                f"{len(xs)} actions, {c.sessions} sessions",
                p50,
                None,
                None,
                "—",
                True,
                value=f"p50 {fmt_s(p50)} · p95 {fmt_s(p95)}",
            )
        )
    expected = c.sessions * c.rounds
    for label, value, ok in (
        ("crowd errors (exceptions, error alerts, CLI exits ≠ 0)", len(st.errors), not st.errors),
        ("crowd lost journal rows", len(v["lost"]), not v["lost"]),
        ("crowd duplicate publishes / rows", len(v["dups"]), not v["dups"]),
        (
            f"crowd branches published exactly once (of {expected})",
            v["published_rows"],
            v["published_rows"] == expected and not st.unpublished,
        ),
    ):
        target = f"= {expected}" if "exactly" in label else "0"
        b.rows.append(Row(label, sizes, None, None, None, target, ok, value=str(value)))
    b.rows[-1].notes = notes


# --------------------------------------------------------------------------- scenario runaway (issue 19, item 1)
#: The SQL box refuses a join without an equality condition (sql_guard.check_joins), so the runaway is an
#: equi-join that explodes: 200,000 rows on a key with two values, 2 * (10^5)^2 = 2 * 10^10 rows.
RUNAWAY_SQL = "SELECT count(*) AS n, sum(a.k + b.k) AS s FROM ref_view a JOIN ref_view b ON a.k % 2 = b.k % 2"
#: Two such joins side by side: a UNION ALL's stage has a task per branch, so this one holds two task slots.
RUNAWAY_UNION_SQL = (
    "SELECT count(*) AS n, sum(k) AS s FROM (SELECT a.k + b.k AS k FROM ref_view a JOIN ref_view b "
    "ON a.k % 2 = b.k % 2 UNION ALL SELECT a.k - b.k FROM ref_view a JOIN ref_view b ON a.k % 2 = b.k % 2)"
)
#: The runaway this scenario used before the guard refused cartesian products (checked: refused).
CROSS_SQL = (
    "SELECT count(*) AS n, sum(a.k + b.k + c.k + d.k) AS s "
    "FROM ref_view a CROSS JOIN ref_view b CROSS JOIN ref_view c CROSS JOIN ref_view d"
)


def scenario_runaway(b: Bench) -> None:
    """While one user's runaway query runs, another user's Review diff: within 2x its quiet time.

    One process, one Spark driver, as in the console (the Review page's diff is ``compute_diff`` as the
    signed-in user; the SQL box is ``explore.submit_query``, once per isolation mode: a worker process of
    its own, the default, and the console's driver): a steward's diff of a 20,000-row batch of a
    200,000-row table, timed ``--runaway-diffs`` times quiet, then as many times each just after an
    analyst started a runaway query on main of the same table (an equi-join on ``k % 2``: 2 * 10^10 rows,
    never ends within the run; cancelled after the diff, or after ``--runaway-timeout`` s), then again under
    a UNION ALL of two such joins (a task per branch: two slots, one row each). A cross join,
    the runaway before, is checked to be refused by the guard. Each user's jobs run in their own job group
    and FAIR pool (wap_core.lake.jobs); a SQL box query reads ``ref_view`` as one split and shuffles into
    one partition, so it holds one task slot; FAIR scheduling does not preempt a running task, so the
    diff gets the other slots, unless the query holds them all (the UNION ALL). In a worker process
    (wap_core.analysis.sandbox) the query has its own driver ``local[1]``, niced. After each cancel, the time
    until none of the runaway's work runs (driver tasks, or the worker's process group) is recorded.
    """
    from wap_core import Lakehouse, Settings, TableId
    from wap_core.analysis import explore
    from wap_core.analysis.diff import compute_diff
    from wap_core.exceptions import QueryCancelledError, ValidationError
    from wap_core.workflow.ingest import ingest
    from wap_core.workflow.publish import publish

    home = b.work / "runaway"
    shutil.rmtree(home, ignore_errors=True)
    home.mkdir(parents=True)
    settings = Settings(
        home=home,
        checks_path=home / "checks.yml",
        user="bench-setup",
        catalog_name="runaway",
        query_timeout=3600,  # only the cancel at the end stops the runaway query
        shuffle_partitions=4,
    )
    lh = Lakehouse(settings)
    src = home / "landing"  # the default ingest root
    src.mkdir(exist_ok=True)

    def frame(lo: int, n: int) -> pa.Table:
        k = pa.array(range(lo, lo + n), pa.int64())
        return pa.table(
            {
                "k": k,
                "grp": pc.cast(pc.divide(k, 1000), pa.int64()),
                "amount": pc.multiply(pc.cast(k, pa.float64()), 0.25),
                "label": pa.array([f"item-{i % 997}" for i in range(lo, lo + n)], pa.string()),
            }
        )

    facts = TableId("rw", "facts")
    t0 = time.perf_counter()
    pq.write_table(frame(0, 200_000), src / "main.parquet")
    ingest(lh, facts, [str(src / "main.parquet")], create=True, branch="m1")
    publish(lh, facts, "m1")
    main = lh.table(facts).metadata.refs["main"].snapshot_id
    pq.write_table(frame(200_000, 20_000), src / "batch.parquet")
    ingest(lh, facts, [str(src / "batch.parquet")], branch="review_me")
    setup = time.perf_counter() - t0
    n = max(3, b.args.runaway_diffs)

    def diffs(times: int) -> list[float]:
        out = []
        for _ in range(times):
            s = time.perf_counter()
            compute_diff(lh, facts, "review_me", user="steward")
            out.append(time.perf_counter() - s)
        return out

    diffs(1)  # warm: main's profile cached, JIT
    quiet = diffs(n)
    log(f"runaway: quiet diffs {[round(x, 2) for x in quiet]}")
    limit = float(b.args.runaway_timeout)
    try:
        explore.run_sql(
            Lakehouse(settings.with_(query_timeout=limit)), facts, main, CROSS_SQL, user="analyst"
        )
        cross = "NOT refused: it ran"
    except ValidationError as exc:
        cross = f"refused ({str(exc)[:90]}…)"
    log(f"runaway: the four-way cross join: {cross}")

    def start_hog(sql: str, isolation: str) -> Any:
        """The analyst's runaway, started as the console's SQL box does (``explore.submit_query``)."""
        hog = explore.submit_query(
            Lakehouse(settings.with_(query_timeout=limit, query_isolation=isolation)),
            facts,
            main,
            sql,
            user="analyst",
        )
        deadline = time.monotonic() + 180
        if isolation == "driver":
            while not (hog.group.running_jobs() and _active_tasks(lh)) and time.monotonic() < deadline:
                if hog.done():
                    break
                time.sleep(0.2)
            time.sleep(1)  # its tasks run
        else:
            while hog.phase != "running" and not hog.done() and time.monotonic() < deadline:
                time.sleep(0.2)
            time.sleep(3)  # the worker's tasks run (its JVM started before the query was sent)
        return hog

    def hog_running(hog: Any, isolation: str) -> bool:
        """Is any of the runaway's work still running (the driver's tasks, or the worker's process group)?"""
        if isolation == "driver":
            return bool(_active_tasks(lh))
        return hog.worker_pid is not None and _process_group_alive(hog.worker_pid)

    def run_under(sql: str, isolation: str) -> tuple[list[float], list[int], list[float], list[str]]:
        loaded: list[float] = []
        busy: list[int] = []
        drained: list[float] = []
        endings: list[str] = []
        for _ in range(n):  # a fresh runaway query before each timed diff
            hog = start_hog(sql, isolation)
            busy.append(_active_tasks(lh))  # the console's driver: the diff's competitors there
            loaded += diffs(1)
            log(f"runaway ({isolation}): diff {loaded[-1]:.2f} s with {busy[-1]} driver task(s) running")
            still = not hog.done()
            hog.cancel()
            cancelled = time.monotonic()
            try:
                hog.result(timeout=120)
                endings.append("finished")
            except QueryCancelledError as exc:
                endings.append(exc.reason if still or exc.reason != "cancelled" else "ended before the diff")
            while hog_running(hog, isolation) and time.monotonic() < cancelled + 120:  # the work, not the job
                time.sleep(0.1)
            drained.append(time.monotonic() - cancelled)
        return loaded, busy, drained, endings

    q50, q95 = statistics.median(quiet), _pct(quiet, 95)
    for isolation in ("process", "driver"):
        for what, sql in (
            ("a self-join of 200k rows on k % 2", RUNAWAY_SQL),
            ("a UNION ALL of two such self-joins", RUNAWAY_UNION_SQL),
        ):
            loaded, busy, drained, endings = run_under(sql, isolation)
            ended = ", ".join(f"{k} {v}" for k, v in Counter(endings).items())
            log(
                f"runaway ({isolation}): diffs under {what} {[round(x, 2) for x in loaded]}; the runaways: {ended}"
            )
            l50, l95 = statistics.median(loaded), _pct(loaded, 95)
            ratio = l50 / q50 if q50 else None
            ok = (
                ratio is not None
                and ratio <= 2
                and l95 / q95 <= 2
                and set(endings) == {"cancelled"}  # each runaway still ran when the diff had finished
                and cross.startswith("refused")
            )
            where = (
                "in a SQL-box worker process (WAP_QUERY_ISOLATION=process, the default)"
                if isolation == "process"
                else "in the console's driver (WAP_QUERY_ISOLATION=driver)"
            )
            b.rows.append(
                Row(
                    f"runaway query {where}: another user's Review diff while it runs ({what})",
                    f"diff of 20k new rows on 200k; {n} diffs quiet, {n} under {what}",
                    l50,
                    q50,
                    ratio,
                    "p50 and p95 ≤ 2× quiet",
                    ok,
                    value=f"p50 {fmt_s(l50)} · p95 {fmt_s(l95)} (quiet p50 {fmt_s(q50)} · p95 {fmt_s(q95)}; p95 ratio {l95 / q95:.2f})",
                    notes=[
                        f"runaway ({what}, {isolation}): {sql}; the console driver's running tasks when each diff "
                        f"started {busy}; the runaway queries ended: {ended} (timeout = cancelled by the time limit "
                        f"while the diff waited); seconds from cancel until none of its work ran "
                        f"{', '.join(f'{x:.1f}' for x in drained)}; diffs under it "
                        f"{', '.join(f'{x:.2f}' for x in loaded)} s; load average {os.getloadavg()[0]:.1f} after",
                    ],
                )
            )
    b.rows[-1].notes += [
        f"runaway: one process, one Spark driver ({settings.spark_master}), FAIR pools user:analyst and user:steward; "
        f"set-up {setup:.0f} s; WAP_QUERY_TIMEOUT {limit:g} s for the runaway query (the console's default is 60 s); "
        f"quiet diffs {', '.join(f'{x:.2f}' for x in quiet)} s",
        f"runaway: the four-way cross join it replaced: {cross}",
    ]


def _process_group_alive(pgid: int) -> bool:
    """Does any process of group ``pgid`` (a SQL-box worker: its Python and its JVM) still run (zombies not)?"""
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                return True
    return False


def _active_tasks(lh: Any) -> int:
    """Tasks the executors run now (Spark's status store): a cancelled task counts until it has really ended,
    unlike the active stages of the status tracker, which drop a cancelled stage at once."""
    executors = lh.spark.sparkContext._jsc.sc().statusStore().executorList(True)
    return sum(int(executors.apply(i).activeTasks()) for i in range(executors.size()))
