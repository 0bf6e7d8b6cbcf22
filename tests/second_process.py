"""The suite in two processes: the browser modules run in a second pytest process beside the first.

The end-to-end modules (``SECOND_PROCESS_MODULES``, with a few that mostly start other processes) mostly wait: on a console server of their own (its own
Python and JVM) and on Chromium. Run one after another with the rest they left the machine's 2 cores half
idle for a third of the suite. So when a run of the default backend collects them together with other tests,
they run in a second ``pytest`` process, started as soon as the suite is collected, with the same node ids;
the first process keeps each of them as a :class:`SecondProcessItem`, after its own tests, that waits for that
test's outcome in the second process and reports it as its own (pass, skip, or the failure's text), so the
run's report, its exit status and ``-ra`` list every test as before.

**The second process then takes over the first's last modules** (work stealing, so neither process idles
while the other still has modules to run): it is also given the first process's other modules
(:func:`stealable`: all but those declaring a background job or an early run, whose runs belong to the first)
and, once its own are done, claims them one by one from the end of the first's order, while the first claims
each from the front when it reaches it. A claim is a file created with ``O_EXCL`` in the run's claims folder,
so each module is run by exactly one process; a module the second claimed is waited for in the first, as
above. How long each process runs differs by machine and load: the split follows it.

The second process writes each test phase's outcome as a JSON line (``OUTCOMES_ENV`` names the file:
:func:`record`), and a last line when its session ends. A run that selects only those modules (or none)
runs them in its own process as usual; so does a run with ``-p no:...``/``--collect-only``/another backend.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import suppress
from pathlib import Path
from typing import Any

import pytest
from _pytest.runner import runtestprotocol

ROOT = Path(__file__).resolve().parent.parent
OUTCOMES_ENV = "WAP_TEST_OUTCOMES"  # set in the second process: where it records its tests' outcomes
#: set in the second process: a JSON file naming the modules it may take over (in the first process's order)
#: and the claims folder
STEAL_ENV = "WAP_TEST_STEAL"
#: the modules the second process runs: the browser (Playwright + a console server) modules
SECOND_PROCESS_MODULES = frozenset(
    {
        "tests/test_e2e_auth.py",
        "tests/test_e2e_batch.py",
        "tests/test_e2e_browser.py",
        "tests/test_e2e_evidence.py",
        "tests/test_e2e_moves.py",
        "tests/test_e2e_quarantine.py",
        "tests/test_e2e_query_cancel.py",
        "tests/test_e2e_review_approval.py",
        "tests/test_rendering.py",
        # the in-process console (AppTest) and the modules that mostly start other processes' JVMs (the SQL
        # box's workers, the CLI): they balance the two processes' times
        "tests/test_app.py",
        "tests/test_sandbox.py",
        "tests/test_secrets_argv.py",
        "tests/test_spark_errors.py",
    }
)
_WAIT = 3600.0  # the longest a test's outcome is waited for after the second process started


def record(report: pytest.TestReport) -> None:
    """In the second process: append one phase's outcome (``pytest_runtest_logreport``)."""
    path = os.environ.get(OUTCOMES_ENV)
    if not path:
        return
    line: dict[str, Any] = {
        "nodeid": report.nodeid,
        "when": report.when,
        "outcome": report.outcome,
        "duration": round(report.duration, 2),
    }
    if report.failed:
        line["text"] = report.longreprtext
    elif report.skipped:
        longrepr = report.longrepr
        line["text"] = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(line) + "\n")


def record_end(exitstatus: int) -> None:
    """In the second process: the session ended."""
    path = os.environ.get(OUTCOMES_ENV)
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps({"end": int(exitstatus)}) + "\n")


class SecondProcess:
    """``pytest NODEIDS`` in a new process group, recording to a JSON-lines file read by its waiting items."""

    def __init__(
        self, nodeids: list[str], *, extra_args: list[str], steal: dict[str, list[str]] | None = None
    ) -> None:
        """Run ``nodeids``, then take over modules of ``steal`` (module -> its selected node ids, in the first
        process's order) that the first process has not reached yet."""
        self.dir = Path(tempfile.mkdtemp(prefix="wap-second-process-"))
        self.outcomes = self.dir / "outcomes.jsonl"
        self.outcomes.touch()
        self.log = self.dir / "output.log"
        self.claims = self.dir / "claims"
        self.claims.mkdir()
        self.stealable = dict(steal or {})
        self._decided: dict[str, bool] = {}  # module -> claimed by the first process
        args = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--durations=15", *extra_args]
        args += [f"--basetemp={self.dir / 'tmp'}", *nodeids]
        env = {**os.environ, OUTCOMES_ENV: str(self.outcomes)}
        if self.stealable:
            spec = self.dir / "steal.json"
            spec.write_text(json.dumps({"claims": str(self.claims), "modules": list(self.stealable)}))
            env[STEAL_ENV] = str(spec)
            args += [n for ids in self.stealable.values() for n in ids]
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                args, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        self.started = time.monotonic()
        self._seen: dict[str, list[dict[str, Any]]] = {}
        self._offset = 0
        self.ended: int | None = None

    def _read(self) -> None:
        with open(self.outcomes, encoding="utf-8") as f:
            f.seek(self._offset)
            while True:
                line = f.readline()
                if not line.endswith("\n"):  # not written whole yet: read it again next time
                    break
                self._offset += len(line.encode("utf-8"))
                entry = json.loads(line)
                if "end" in entry:
                    self.ended = int(entry["end"])
                else:
                    self._seen.setdefault(entry["nodeid"], []).append(entry)

    def phases(self, nodeid: str) -> list[dict[str, Any]]:
        """Wait until ``nodeid`` finished in the second process (its teardown recorded); its phases' outcomes."""
        while True:
            self._read()
            phases = self._seen.get(nodeid, [])
            if any(p["when"] == "teardown" for p in phases):
                return phases
            if self.ended is not None or self.proc.poll() is not None:
                self._read()
                phases = self._seen.get(nodeid, [])
                if any(p["when"] == "teardown" for p in phases):
                    return phases
                pytest.fail(
                    f"the second process ({self.log}) ended (exit {self.proc.poll()}) before {nodeid} ended:\n"
                    + self.tail(),
                    pytrace=False,
                )
            if time.monotonic() - self.started > _WAIT:
                pytest.fail(f"{nodeid} did not end in the second process in {_WAIT:.0f} s", pytrace=False)
            time.sleep(0.2)

    def tail(self, chars: int = 6000) -> str:
        """The end of the second process's output."""
        return self.log.read_text(errors="replace")[-chars:]

    def summary(self) -> str:
        """Its own report's end (the slowest tests and the counts), for the first process's terminal summary."""
        lines = self.log.read_text(errors="replace").splitlines()
        start = next((n for n, line in enumerate(lines) if "slowest" in line and "durations" in line), None)
        return "\n".join(lines[start:] if start is not None else lines[-3:])

    def run_or_wait(self, item: pytest.Item, nextitem: pytest.Item | None) -> bool | None:
        """In the first process (``pytest_runtest_protocol``): None to run ``item`` here (its module is not one
        the second may take, or this process claimed it when it reached its first test); True once its outcome
        in the second process, which claimed its module first, was waited for and reported as its own."""
        module = _module(item)
        if module not in self.stealable or isinstance(item, SecondProcessItem):
            return None
        if module not in self._decided:
            self._decided[module] = claim(self.claims, module, "first")
        if self._decided[module]:
            return None
        assert item.parent is not None
        waiting = SecondProcessItem.from_parent(item.parent, name=item.name, second=self, original=item)
        item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
        runtestprotocol(waiting, nextitem=nextitem, log=True)
        item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
        return True

    def stop(self) -> None:
        """Kill its process group (the first process's session ends: nothing is left running)."""
        if self.proc.poll() is None:
            with suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)


class SecondProcessItem(pytest.Item):
    """A test that ran in the second process: waits for its outcome there and reports it as its own."""

    def __init__(self, *, second: SecondProcess, original: pytest.Item, **kw: Any) -> None:
        super().__init__(**kw)
        self.second = second
        self.original_nodeid = original.nodeid
        self.own_markers = list(original.own_markers)
        self.keywords.update(original.keywords)

    def runtest(self) -> None:
        phases = self.second.phases(self.original_nodeid)
        failed = [p for p in phases if p["outcome"] == "failed"]
        if failed:
            text = "\n".join(f"--- {p['when']} (in the second process)\n{p.get('text', '')}" for p in failed)
            pytest.fail(text, pytrace=False)
        skipped = [p for p in phases if p["outcome"] == "skipped"]
        if skipped:
            pytest.skip(str(skipped[0].get("text", "skipped in the second process")))

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, None, f"{self.name} (second process)"


def split(config: pytest.Config, items: list[pytest.Item]) -> SecondProcess | None:
    """In the first process: start the second one on the selected items of ``SECOND_PROCESS_MODULES`` and put
    a waiting item in place of each; None (nothing changed) where the run is not split."""
    if os.environ.get(OUTCOMES_ENV) or config.getoption("collectonly"):
        return None
    if config.getoption("backend") != "local-sqlite" or os.environ.get("WAP_TEST_ONE_PROCESS"):
        return None
    chosen = [i for i in items if _module(i) in SECOND_PROCESS_MODULES]
    if not chosen or len(chosen) == len(items):
        return None
    extra = ["-x"] if config.getoption("maxfail") == 1 else []
    steal = {} if os.environ.get("WAP_TEST_NO_STEAL") else stealable([i for i in items if i not in chosen])
    second = SecondProcess([i.nodeid for i in chosen], extra_args=extra, steal=steal)
    replaced = {id(i) for i in chosen}
    own: list[pytest.Item] = []
    waiting: list[pytest.Item] = []
    for item in items:
        if id(item) in replaced:
            assert item.parent is not None
            waiting.append(
                SecondProcessItem.from_parent(item.parent, name=item.name, second=second, original=item)
            )
        else:
            own.append(item)
    # the first process runs its own tests first and collects the second's outcomes last: it never idles
    # at a waiting item while it still has tests of its own
    items[:] = own + waiting
    return second


def _module(item: pytest.Item) -> str:
    return item.nodeid.split("::", 1)[0]


#: session fixtures that seed a whole lakehouse (the demo: ~40 CPU seconds): a module using one stays in the first
#: process, which seeds it once for all of them
SEEDED_ONCE = frozenset({"demo_lakehouse"})


def stealable(items: list[pytest.Item]) -> dict[str, list[str]]:
    """The first process's modules the second may take over, in the first's order, each with its selected node
    ids: all but a module declaring a background job (``BACKGROUND``) or an early run (``EARLY_START``), whose
    runs start in the first process, which collects them, and a module using a :data:`SEEDED_ONCE` fixture."""
    modules: dict[str, list[str]] = {}
    stays: set[str] = set()
    for item in items:
        declared = getattr(item, "module", None)
        if getattr(declared, "BACKGROUND", None) or getattr(declared, "EARLY_START", None):
            stays.add(_module(item))
        if SEEDED_ONCE & set(getattr(item, "fixturenames", ())):
            stays.add(_module(item))
        modules.setdefault(_module(item), []).append(item.nodeid)
    return {m: ids for m, ids in modules.items() if m not in stays}


def claim(claims: Path, module: str, who: str) -> bool:
    """Claim ``module`` for ``who`` (a file created with O_EXCL): True for the one process that claims it."""
    try:
        fd = os.open(claims / module.replace("/", "__"), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w") as f:
        f.write(who)
    return True


def runtestloop(session: pytest.Session) -> bool | None:
    """In the second process (``pytest_runtestloop``): its own modules first, then the first process's modules
    it claims, one at a time from the end of the first's order, until a claim fails (the first process has
    reached that module: it has every one before it). None (pytest's own loop) where nothing may be taken."""
    spec = os.environ.get(STEAL_ENV)
    if not spec or session.config.option.collectonly:
        return None
    if session.testsfailed and not session.config.option.continue_on_collection_errors:
        raise session.Interrupted(f"{session.testsfailed} error(s) during collection")
    declared = json.loads(Path(spec).read_text(encoding="utf-8"))
    claims, order = Path(declared["claims"]), list(declared["modules"])
    groups: dict[str, list[pytest.Item]] = {}
    own: list[pytest.Item] = []
    for item in session.items:
        module = _module(item)
        (groups.setdefault(module, []) if module in order else own).append(item)

    def take() -> list[pytest.Item]:
        while order:
            module = order.pop()
            if module not in groups:
                continue
            if not claim(claims, module, "second"):
                return []  # the first process is there: every module before it is its own
            return groups.pop(module)
        return []

    current = own or take()
    while current:
        following: list[pytest.Item] = []
        for n, item in enumerate(current):
            if n + 1 < len(current):
                nextitem: pytest.Item | None = current[n + 1]
            else:  # the next module is claimed before the last test of this one: its teardown needs to know
                following = take()
                nextitem = following[0] if following else None
            item.config.hook.pytest_runtest_protocol(item=item, nextitem=nextitem)
            if session.shouldfail:
                raise session.Failed(session.shouldfail)
            if session.shouldstop:
                raise session.Interrupted(session.shouldstop)
        current = following
    return True
