"""Shared test plumbing: small real data files, a test lakehouse's settings as ``WAP_*`` variables, the CLI
run in-process, the console under AppTest, and the server/browser plumbing of the end-to-end tests."""

from __future__ import annotations

import io
import logging
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager, redirect_stderr, redirect_stdout, suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from wap_core import Lakehouse, Settings, TableId
from wap_core.cli import main as cli_main
from wap_core.workflow.ingest import ingest
from wap_core.workflow.publish import publish

if TYPE_CHECKING:
    from streamlit.testing.v1 import AppTest

log = logging.getLogger(__name__)
ROOT = Path(__file__).resolve().parent.parent


#: demo.people under the two-person rule (test_workflow, test_authors): the table, its suite and CSV header,
#: the access file (sam ingests, ann and bob approve, root and ops administer) and those users
PEOPLE = TableId("demo", "people")
PEOPLE_SUITE = "demo.people:\n  checks:\n    - not_null: [name]\n    - unique: [id]\n"
PEOPLE_HEADER = ["id", "name"]
TWO_PERSON_ACCESS = """\
roles:
  viewer: ["*"]
  steward: [sam@corp.test]
  approver: [ann@corp.test, bob@corp.test]
  admin: [root, ops]
policies:
  "*": {approvals: 0}
  demo.people: {approvals: 1, author_cannot_approve: true, force_needs_second_admin: true}
"""
SAM, ANN, BOB, ROOT_, OPS = "sam@corp.test", "ann@corp.test", "bob@corp.test", "root", "ops"


def write_csv(path: Path, header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [",".join(header)] + [",".join("" if v is None else str(v) for v in r) for r in rows]
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def refs(lh, table):  # type: ignore[no-untyped-def]
    """{ref name: snapshot id} read back with PyIceberg (never the CLI's word)."""
    return {name: ref.snapshot_id for name, ref in lh.table(table).metadata.refs.items()}


# --------------------------------------------------------------------------- a test lakehouse's settings
def lake_settings(
    home: Path, name: str, checks: str | None = None, *, user: str = "seeder", **kw: Any
) -> Settings:
    """The settings of a test lakehouse in ``home`` (created) as ``user``: catalog ``name`` (unique in the test
    process's Spark session), the checks file ``home/checks.yml`` (written when ``checks`` is given),
    2 shuffle partitions, then ``kw``."""
    home.mkdir(parents=True, exist_ok=True)
    if checks is not None:
        (home / "checks.yml").write_text(checks)
    return Settings(
        home=home, checks_path=home / "checks.yml", user=user, catalog_name=name, shuffle_partitions=2, **kw
    )


def seed_tables(
    lh: Any,
    tables: Iterable[TableId],
    src: Path,
    header: Sequence[str] = ("id", "name"),
    rows: Sequence[Sequence[object]] = ((1, "ann"), (2, "bob")),
) -> None:
    """Each of ``tables`` created in ``lh`` by a batch of ``rows`` (``src/<table name>0.csv``) on the branch
    ``first``, which passes its audit and is published."""
    for t in tables:
        r = ingest(lh, t, [write_csv(src / f"{t.name}0.csv", header, rows)], create=True, branch="first")
        assert r.audit.passed, (t, r.audit)
        publish(lh, t, "first")


def publish_ids(lh: Any, table: TableId, src: Path, rows: int) -> int:
    """Publish a table of one int64 column ``id`` = 0..rows-1 (written to ``src``, a Parquet file); its main."""
    src.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"id": pa.array(range(rows), pa.int64())}), src)
    ingest(lh, table, [str(src)], create=True, branch="b1")
    publish(lh, table, "b1")
    return int(lh.table(table).metadata.refs["main"].snapshot_id)


def guarded_lake(home: Path, name: str, checks: str, access: str, tables: Iterable[TableId]) -> Lakehouse:
    """A ``Lakehouse`` of ``lake_settings(home, name, checks)`` (ingest root ``home``) whose ``tables`` are
    seeded (``seed_tables`` from ``home/src``) before its access file ``home/access.yml`` gets ``access``:
    the seeder acted while everyone was admin."""
    settings = lake_settings(home, name, checks, access_path=home / "access.yml", ingest_roots=(home,))
    lh = Lakehouse(settings)
    seed_tables(lh, tables, home / "src")
    settings.access_file.write_text(access)
    return lh


# --------------------------------------------------------------------------- settings as WAP_* variables
# Settings a test's environment must not inherit from the shell that runs the tests (unless it sets them).
STRAY_SETTINGS = (
    "WAP_CONFIG",
    "WAP_CATALOG_URI",
    "WAP_CATALOG_JDBC_URI",
    "WAP_WAREHOUSE",
    "WAP_ACCESS",
    "WAP_INGEST_ROOTS",
    "WAP_NOTIFY",
    "WAP_FAULT",
    "WAP_TOKEN",
)


def lake_env(
    s: Settings, user: str | None = None, *, access: bool = False, roots: bool = False, **more: str
) -> dict[str, str]:
    """The ``WAP_*`` variables under which ``Settings.from_env`` names the lakehouse of ``s`` (its home, checks
    file, catalog name and shuffle partitions), as ``user`` when given, with its access file (``access``) and
    ingest roots (``roots``), then ``more`` (``WAP_*`` names)."""
    env = {
        "WAP_HOME": str(s.home),
        "WAP_CHECKS": str(s.checks_file),
        "WAP_CATALOG_NAME": s.catalog_name,
        "WAP_SHUFFLE_PARTITIONS": str(s.shuffle_partitions),
    }
    if user is not None:
        env["WAP_USER"] = user
    if access:
        env["WAP_ACCESS"] = str(s.access_file)
    if roots:
        env["WAP_INGEST_ROOTS"] = os.pathsep.join(str(p) for p in s.ingest_roots)
    env.update(more)
    return env


def use_env(mp: pytest.MonkeyPatch, env: Mapping[str, str], unset: Iterable[str] = STRAY_SETTINGS) -> None:
    """Set ``env`` with ``mp``, and unset each of ``unset`` that ``env`` does not set."""
    for k, v in env.items():
        mp.setenv(k, v)
    for k in unset:
        if k not in env:
            mp.delenv(k, raising=False)


def run_cli(
    env: Mapping[str, str], *args: str, unset: Iterable[str] = STRAY_SETTINGS
) -> tuple[int, str, str]:
    """``python -m wap_core ARGS`` in this process (its Spark session) under ``env`` (see ``use_env``), the
    environment restored after: the exit code (argparse's usage errors too), stdout and stderr."""
    out, err = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as mp:
        use_env(mp, env, unset)
        with redirect_stdout(out), redirect_stderr(err):
            try:
                code = cli_main(list(args))
            except SystemExit as exc:  # argparse: bad usage
                code = int(exc.code or 0)
    return code, out.getvalue(), err.getvalue()


def cli_process(env: Mapping[str, str], *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """``python -m wap_core ARGS`` in a new process (the project's root its working directory) with ``env`` as
    its whole environment: its exit code and text output."""
    return subprocess.run(
        [sys.executable, "-m", "wap_core", *args],
        cwd=ROOT,
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


# --------------------------------------------------------------------------- test modules again, on another backend
def junit_failures(junit: Path) -> list[str]:
    """'test id: first line of the failure' for every failed or errored test of a junit report."""
    if not junit.is_file():
        return []
    out = []
    for case in ET.parse(junit).getroot().iter("testcase"):
        for bad in list(case.iter("failure")) + list(case.iter("error")):
            msg = (bad.get("message") or "").strip().splitlines()
            out.append(f"{case.get('classname')}::{case.get('name')}: {msg[0][:300] if msg else bad.tag}")
    return out


def junit_counts(junit: Path) -> dict[str, int]:
    suite = ET.parse(junit).getroot()
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")  # type: ignore[assignment]
    assert suite is not None
    return {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}


class BackendRun:
    """``pytest SELECTION --backend BACKEND`` started in a new process group (the project's root its working
    directory, ``env`` its whole environment, its junit report and base temp under ``tmp``); :meth:`finish`
    waits for it and judges it."""

    #: the runs not finished yet (killed by :meth:`kill_all` when the session ends)
    _live: ClassVar[set[BackendRun]] = set()
    _live_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(
        self,
        selection: Sequence[str],
        backend: str,
        *,
        env: Mapping[str, str],
        tmp: Path,
        python: Path | str = sys.executable,
    ) -> None:
        self.junit = tmp / "junit.xml"
        cmd = [str(python), "-m", "pytest", *selection, "--backend", backend, "-q", "-ra"]
        cmd += ["-p", "no:cacheprovider", f"--junitxml={self.junit}", f"--basetemp={tmp / 'run'}"]
        self.started = time.monotonic()
        with self._live_lock:
            self.proc = subprocess.Popen(
                cmd,
                cwd=ROOT,
                env=dict(env),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                start_new_session=True,
            )
            self._live.add(self)

    def kill(self) -> None:
        """Kill the run with its process group (a session that ends before its test collected it)."""
        if self.proc.poll() is None:
            with suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)  # not communicate(): a lane thread may be reading its output
        with self._live_lock:
            self._live.discard(self)

    @classmethod
    def kill_all(cls) -> None:
        """Kill every run not finished (the session ends: none is left running)."""
        with cls._live_lock:
            live = list(cls._live)
        for run in live:
            run.kill()

    def finish(
        self,
        *,
        timeout: float,
        run: str,
        failed_on: str,
        min_tests: int,
        logs: Callable[[], str] = lambda: "",
    ) -> dict[str, int]:
        """Wait for the run (killed with its group after ``timeout`` s from its start). The calling test fails
        naming ``run`` when it did not finish (the output's tail, then ``logs()``), and ``failed_on`` (what
        failed where) with the run's failures by test id when any test failed, or when fewer than
        ``min_tests`` ran or any was skipped; the report's counts otherwise."""
        left = max(1.0, timeout - (time.monotonic() - self.started))
        try:
            output, _ = self.proc.communicate(timeout=left)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            output, _ = self.proc.communicate()
            pytest.fail("\n".join([f"the {run} did not finish in {timeout:.0f} s", output[-4000:], logs()]))
        finally:
            with self._live_lock:
                self._live.discard(self)
        elapsed = time.monotonic() - self.started
        failed = junit_failures(self.junit)
        assert self.proc.returncode == 0 and not failed, (
            f"the lifecycle failed on {failed_on} (exit {self.proc.returncode}):\n  "
            + "\n  ".join(failed or ["(no junit report)"])
            + f"\n--- pytest output (tail)\n{output[-6000:]}"
        )
        counts = junit_counts(self.junit)
        assert counts["tests"] >= min_tests and counts["skipped"] == 0, counts
        # logged, never printed: a background job's run finishes in the lane's thread, where a print would land
        # in whatever sys.stdout a test has redirected at that moment (an in-process CLI call's JSON: stop 36)
        log.info("%s: %s tests passed in %.0f s", run, counts["tests"], elapsed)
        return counts


def pytest_on_backend(
    selection: Sequence[str],
    backend: str,
    *,
    env: Mapping[str, str],
    tmp: Path,
    timeout: float,
    run: str,
    failed_on: str,
    min_tests: int,
    logs: Callable[[], str] = lambda: "",
) -> dict[str, int]:
    """:class:`BackendRun` started now and finished (see :meth:`BackendRun.finish`)."""
    return BackendRun(selection, backend, env=env, tmp=tmp).finish(
        timeout=timeout, run=run, failed_on=failed_on, min_tests=min_tests, logs=logs
    )


class Lane:
    """The background lane: whole runs in subprocesses that the suite's own process only waits for (the cluster
    run, the object-store run, the orchestrators' venvs), one at a time in one thread, beside the rest of the
    suite. A test module declares ``BACKGROUND = {test function name: job}``; ``job(lane, params)`` (``params``:
    the test's parameters) runs the whole test body but its fixtures, and its test collects the job's outcome
    through the ``background`` fixture (tests/conftest.py). The jobs start with the session's first test, in the
    order of their tests, so a job is done, or nearly, when the suite reaches its test."""

    def __init__(self, postgres: str, environ: Mapping[str, str]) -> None:
        self.postgres = postgres  # the session's PostgreSQL server (its URL)
        # the environment as the session began: the jobs' runs start from it, never from ``os.environ`` (the
        # suite's own tests patch it meanwhile, e.g. WAP_USER or WAP_ACCESS_PATH, from another thread)
        self.environ = dict(environ)
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="wap-test-lane")
        self.jobs: dict[str, Future[object]] = {}

    def submit(
        self, nodeid: str, job: Callable[[Lane, dict[str, Any]], object], params: dict[str, Any]
    ) -> None:
        """Queue ``job`` for the test ``nodeid``."""
        self.jobs[nodeid] = self._pool.submit(job, self, params)

    @staticmethod
    def tmp(name: str) -> Path:
        """A new temporary directory for a job (jobs run outside any test: no ``tmp_path``)."""
        return Path(tempfile.mkdtemp(prefix=f"wap-lane-{name}-"))

    def shutdown(self) -> None:
        """Drop the jobs not started, kill the runs still running, wait for the thread."""
        for future in self.jobs.values():
            future.cancel()
        BackendRun.kill_all()
        self._pool.shutdown(wait=True, cancel_futures=True)


def cli_as(lh: Any, user: str, *args: str) -> tuple[int, str, str]:
    """``run_cli`` as ``user`` on the lakehouse ``lh`` with its access file and ingest roots."""
    return run_cli(lake_env(lh.settings, user, access=True, roots=True), *args)


def in_threads(
    target: Callable[..., object], args: Iterable[tuple[Any, ...]], timeout: float | None = None
) -> None:
    """``target(*a)`` for each ``a`` of ``args``, each in its own thread, all started before any is joined."""
    threads = [threading.Thread(target=target, args=a) for a in args]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)


# --------------------------------------------------------------------------- the console under AppTest
def app_test(
    page: str | None = None,
    *,
    timeout: float = 120,
    secrets: Mapping[str, Any] | None = None,
    st_user: Mapping[str, Any] | None = None,
    **query: str,
) -> AppTest:
    """The console (``app.py``) under AppTest in this process's environment, run once; with ``page``, switched
    to it with ``query`` as its URL parameters and run again. Neither run may raise."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=timeout)
    if secrets:
        at.secrets.update(secrets)
    if st_user is not None:
        at.user = dict(st_user)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    if page:
        at.switch_page(page)
        for k, v in query.items():
            at.query_params[k] = v
        at.run()
        assert not at.exception, [e.value for e in at.exception]
    return at


# --------------------------------------------------------------------------- servers for end-to-end tests
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def _ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (Linux; 32768 when unknown)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_ports(n: int) -> list[int]:
    """``n`` distinct free loopback ports for servers the tests start, held open together while picked.

    They are picked below the kernel's ephemeral range: a port from ``bind(0)`` lies in that range, where any
    outgoing connection of the machine (Spark, JDBC, the browser) may take it as its local end between the
    pick and the server's bind, or while a stopped server waits to start again on the same ports (CI s35:
    SeaweedFS restarted in ``test_s3_store`` died with "address already in use")."""
    top = max(2048, _ephemeral_low())
    low = max(1024, top - 12000)
    rng = random.SystemRandom()
    socks: list[socket.socket] = []
    try:
        while len(socks) < n:
            s = socket.socket()
            try:
                s.bind(("127.0.0.1", rng.randrange(low, top)))
            except OSError:
                s.close()
                continue
            socks.append(s)
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


def free_port() -> int:
    """One free loopback port for a server (see :func:`free_ports`)."""
    return free_ports(1)[0]


def wait_for(cond: Callable[[], object], seconds: float, what: str, *, every: float = 0.1) -> None:
    """Poll ``cond`` until it is true; fail naming ``what`` after ``seconds`` (an OSError counts as not yet:
    a loaded machine's HTTP endpoint that did not answer in time is asked again)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            if cond():
                return
        except OSError:
            pass
        time.sleep(every)
    raise AssertionError(f"timed out waiting for {what}")


def wait_healthy(
    url: str, proc: subprocess.Popen[bytes], timeout: float = 90, what: str = "streamlit"
) -> None:
    """Poll ``url`` until it answers 200; fail early when ``proc`` exits."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise TimeoutError(f"{url} not healthy after {timeout}s")


@contextmanager
def running(
    cmd: list[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    log: Path,
    health: str,
    timeout: float = 90,
    what: str = "server",
) -> Iterator[subprocess.Popen[bytes]]:
    """Start ``cmd`` in its own process group, wait until ``health`` answers, stop the group afterwards."""
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            cmd, cwd=cwd, env=dict(env), stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            wait_healthy(health, proc, timeout, what)
            yield proc
        finally:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(timeout=20)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                with suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)


@contextmanager
def browser_page(timeout_ms: int = 120_000) -> Iterator[Any]:
    """A page (1400 x 1000) of a fresh headless Chromium whose actions and ``expect`` wait up to
    ``timeout_ms``; the browser is closed after."""
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=timeout_ms)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.set_default_timeout(timeout_ms)
            yield page
        finally:
            browser.close()


def page_idle(page: Any, timeout_ms: int = 300_000) -> None:
    """Wait until the console's script run is over (Streamlit's running indicator is gone)."""
    from playwright.sync_api import expect

    expect(page.get_by_test_id("stStatusWidget")).to_have_count(0, timeout=timeout_ms)


def upload(page: Any, path: str | Path, timeout_ms: int = 300_000) -> None:
    """Put the file at ``path`` into the page's file uploader and wait until the browser has sent it (its chip
    shows, no spinner, no error), then until the page's run is over. Waiting for the run alone is not enough:
    inside a form an upload starts no run, and a submit before the upload has begun goes without the file
    (busy cores: "choose a file to upload" after Ingest and audit was clicked)."""
    from playwright.sync_api import expect

    page.get_by_test_id("stFileUploaderDropzoneInput").set_input_files(str(path))
    # (the chip shows a long name shortened in its middle: its first 6 characters stay)
    chip = page.get_by_test_id("stFileChip").filter(has_text=Path(path).name[:6])
    expect(chip).to_be_visible(timeout=timeout_ms)
    expect(page.get_by_test_id("stFileChipIconSpinner")).to_have_count(0, timeout=timeout_ms)
    expect(page.get_by_test_id("stFileChipIconError")).to_have_count(0, timeout=timeout_ms)
    page_idle(page, timeout_ms)


def open_dialog(page: Any, button: Any, *, ready: str = "Confirm", attempts: int = 2) -> Any:
    """Click ``button`` once the page's run is over and return the dialog, its form drawn (its
    ``ready`` button visible) and the run that drew it over. Streamlit reruns the page for the click; a
    click it did not take (the button is still there, no dialog a minute later) is clicked again,
    ``attempts`` times in all."""
    from playwright.sync_api import expect

    dialog = page.get_by_role("dialog")
    form_drawn = dialog.get_by_role("button", name=ready, exact=True)
    for _ in range(attempts - 1):
        page_idle(page)
        button.click()
        try:
            expect(form_drawn).to_be_visible(timeout=60_000)
        except AssertionError:
            continue  # the click was not taken: click again
        break
    else:
        page_idle(page)
        button.click()
        expect(form_drawn).to_be_visible()
    # The run that drew the dialog goes on drawing the page under it (a Review's diffs and charts); a
    # submit while it runs was lost under load (CI: Confirm clicked, the dialog stayed, nothing done).
    page_idle(page)
    return dialog


def console_env(**wap: str) -> dict[str, str]:
    """This process's environment without any ``WAP_*`` setting, plus ``wap`` (the console's settings)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WAP_")}
    env.update(PYSPARK_PYTHON=sys.executable, **wap)
    return env


def streamlit_cmd(port: int, *args: str) -> list[str]:
    """The command line that serves the console (``streamlit run app.py``) headless on 127.0.0.1:``port``."""
    return [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        "app.py",
        "--server.headless",
        "true",
        "--server.port",
        str(port),
        "--server.address",
        "127.0.0.1",
        "--browser.gatherUsageStats",
        "false",
        *args,
    ]


@contextmanager
def console(
    env: Mapping[str, str], log: Path, timeout: float = 90, port: int | None = None, args: Sequence[str] = ()
) -> Iterator[str]:
    """The console on a free (or the given) local port with ``env`` and extra streamlit ``args``;
    yields its base URL, stops it after."""
    port = port or free_port()
    base = f"http://127.0.0.1:{port}"
    with running(
        streamlit_cmd(port, *args),
        cwd=ROOT,
        env=env,
        log=log,
        health=f"{base}/_stcore/health",
        timeout=timeout,
        what="streamlit",
    ):
        yield base
