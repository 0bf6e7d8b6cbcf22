"""The SQL box's own processes: a user's query runs in a worker process with its own small Spark driver.

Why not the console's driver: Spark's FAIR pools share task slots but never preempt a running task, and
one allowed query can hold every slot (a ``UNION ALL`` of two exploding equi-joins has a task per branch;
independent stages of one query run at once). In the shared driver another user's Review diff then waits
for the time limit. So the console runs each SQL-box query (``WAP_QUERY_ISOLATION=process``, the default)
in a **worker**: a Python process started with ``python -c`` in its own session (process group), niced
(``WAP_QUERY_NICE`` steps above the console, default 10: the console's work comes first on a busy CPU), whose Spark driver is
``local[WAP_QUERY_SLOTS]`` (default 1) with a ``WAP_QUERY_MEMORY`` heap (default 1g) and no UI.

- At most ``WAP_QUERY_WORKERS`` workers (default 2) exist; each runs one query at a time, and a user has
  at most one query running (a second waits for the first). An idle worker is reused (its JVM is warm).
- The time limit (``WAP_QUERY_TIMEOUT``, counted from the moment the worker has the query), the Cancel
  button and the end of the browser session **kill the worker's process group** (its Python and its JVM):
  the work stops at once whatever a task is doing, and the next query starts a fresh worker (~10 s).
- A worker whose parent is gone exits on its own (its socket closes; a watchdog checks the parent).
- A worker whose request hit a JVM ``Error`` (``OutOfMemoryError``, ``StackOverflowError``, any
  ``java.lang.Error``; or Python's ``MemoryError``/``RecursionError``) is never reused: it answers
  ``("fatal", error)``, exits, and its caller kills its process group; the next query starts a fresh worker.
  A JVM after an ``Error`` is in no state to be trusted (half-built objects, a heap at its limit), although
  Spark keeps its context open when the ``Error`` was thrown in the driver's own thread (the optimizer
  folding a constant), where no task's uncaught-exception handler ends the JVM.
- Authorization and the guard's first stage run in the caller before anything is sent; the worker binds
  ``ref_view`` and runs the full guard (analyzed and optimized plans) itself.

The CLI's ``query`` runs in a worker too (:func:`wap_core.analysis.explore.bounded_query_rows`): Spark plans a
query (and its optimizer evaluates constant expressions) before any job exists, so only a kill bounds it.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import pickle
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, TypeVar

from wap_core.config import Settings
from wap_core.exceptions import QueryTimeoutError, SparkJobError, WapError, first_line
from wap_core.lake.jobs import CANCELLED, SESSION_ENDED, TIMEOUT, BackgroundWork, cancel_error
from wap_core.lakehouse import Lakehouse
from wap_core.registry import Registry

log = logging.getLogger(__name__)
T = TypeVar("T")

#: What a worker runs for each request: ``handler(lakehouse, request) -> value`` (a module-level function).
Handler = Callable[[Lakehouse, Any], Any]
#: How long a new worker may take to start its Spark driver.
START_SECONDS = 180.0
#: How often a waiting query looks at Cancel, ``alive()`` and its deadline.
POLL_SECONDS = 0.2
#: An idle worker older than this is ended (its JVM's memory given back); the next query starts a new one.
IDLE_SECONDS = 300.0
#: The tag on a worker's command line (``ps``): ``wap-sql-box <home>``.
TAG = "wap-sql-box"
#: Spark conf of the console that must not reach a worker's own local driver (UI port, cluster settings).
_NOT_FOR_WORKER = (
    "spark.ui.",
    "spark.executor.",
    "spark.cores.",
    "spark.dynamicAllocation.",
    "spark.driver.host",
    "spark.driver.bindAddress",
    "spark.driver.port",
    "spark.driver.memory",
    "spark.blockManager.port",
    "spark.master",
)
#: Why a query never got a worker: every worker stayed busy with other users' queries until the time limit.
BUSY = "busy"
_PACKAGE_ROOT = Path(__file__).resolve().parent.parent.parent


def worker_settings(settings: Settings) -> Settings:
    """The settings a worker's Spark runs with: ``local[query_slots]``, ``query_memory``, no UI, tagged."""
    conf = tuple((k, v) for k, v in settings.spark_conf if not k.startswith(_NOT_FOR_WORKER))
    return replace(
        settings,
        spark_master=f"local[{settings.query_slots}]",
        spark_driver_memory=settings.query_memory,
        spark_conf=(*conf, ("spark.app.name", TAG), ("spark.ui.enabled", "false")),
    )


# ----- the worker process ----------------------------------------------------------------------------


def serve(fd: int) -> None:
    """A worker's main loop (``python -c``): read (settings, handler, nice), start Spark, answer requests.

    Replies are ``("ready", pid)`` once Spark runs, then ``("ok", value)``, ``("error", exception)`` or
    ``("fatal", what)`` (a JVM ``Error``, named by :func:`jvm_error`) per request; ``("failed", exception)``
    if Spark cannot start. The process exits when its socket closes, when its parent is gone, after a
    fatal error, or after an error that left its Spark driver unusable.
    """
    conn = Connection(fd)
    parent = os.getppid()
    settings, handler, nice = conn.recv()
    if nice:
        os.nice(nice)
    threading.Thread(
        target=_exit_when_orphaned, args=(parent,), name="wap-sql-box-orphan", daemon=True
    ).start()
    try:
        lh = Lakehouse(worker_settings(settings))
        _warm_up(lh)
    except Exception as exc:  # noqa: BLE001 - not swallowed: the parent raises it
        conn.send(("failed", _portable(exc)))
        return
    conn.send(("ready", os.getpid()))
    while True:
        try:
            request = conn.recv()
        except (EOFError, OSError):
            return
        try:
            conn.send(("ok", handler(lh, request)))
        except Exception as exc:  # noqa: BLE001 - not swallowed: the parent raises it
            fatal = jvm_error(exc)
            if fatal is not None:
                log.info("SQL box worker %s retires: its request hit %s", os.getpid(), fatal)
                conn.send(("fatal", fatal))
                return
            conn.send(("error", _portable(exc)))
            if not _spark_usable(lh):
                return


def _warm_up(lh: Lakehouse) -> None:
    """Start Spark, its catalog and a first job before saying ready: a user's first query (and its time
    limit) should not pay for class loading and code generation."""
    spark = lh.spark
    spark.sql(f"SHOW NAMESPACES IN {lh.settings.catalog_name}").collect()
    spark.range(1000).selectExpr("count(*)", "sum(id)").collect()


def _exit_when_orphaned(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(1.0)
    os._exit(0)


def _spark_usable(lh: Lakehouse) -> bool:
    try:
        return not bool(lh.spark.sparkContext._jsc.sc().isStopped())
    except Exception:  # noqa: BLE001 - the JVM is gone: the worker retires
        return False


def jvm_error(exc: BaseException) -> str | None:
    """The JVM ``Error`` (``java.lang.Error`` or a subclass) behind ``exc`` as ``class: message`` (one line), or
    Python's ``MemoryError``/``RecursionError``; None for an ordinary failure (a refusal, a SQL error).

    Walks ``exc``'s Python causes and, for each Py4J/PySpark error among them, the Java throwable's causes.
    If the JVM cannot even be asked, the answer is fatal too (``"an unreachable JVM"``).
    """
    seen: set[int] = set()
    todo: list[BaseException] = [exc]
    while todo:
        e = todo.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, (MemoryError, RecursionError)):
            return type(e).__name__
        java = getattr(e, "java_exception", None) or getattr(e, "_origin", None)
        if java is not None:
            found = _java_error(java)
            if found is not None:
                return found
        todo.extend(c for c in (e.__cause__, e.__context__) if c is not None)
    return None


#: How deep :func:`jvm_error` follows a Java throwable's causes.
_MAX_CAUSES = 20


def _java_error(throwable: Any) -> str | None:
    try:
        for _ in range(_MAX_CAUSES):
            if throwable is None:
                return None
            klass = throwable.getClass()
            k = klass
            while k is not None:
                if str(k.getName()) == "java.lang.Error":
                    message = throwable.getMessage()
                    what = str(klass.getName()) + ("" if message is None else f": {message}")
                    return first_line(what)
                k = k.getSuperclass()
            throwable = throwable.getCause()
    except Exception:  # noqa: BLE001 - the JVM cannot be asked: do not trust it with another query
        return "an unreachable JVM"
    return None


def _portable(exc: Exception) -> Exception:
    """``exc`` if it survives pickling as itself, else a WapError with its one-line message."""
    try:
        back = pickle.loads(pickle.dumps(exc))
    except Exception:  # noqa: BLE001 - an exception class pickle cannot rebuild
        back = None
    if isinstance(back, WapError) and str(back) == str(exc):
        return back
    if isinstance(exc, WapError):
        return WapError(first_line(exc))
    return SparkJobError(f"the query's worker failed: {type(exc).__name__}: {first_line(exc)}")


# ----- the caller's side ---------------------------------------------------------------------------------


class _Worker:
    """One worker process and the socket to it."""

    def __init__(self, settings: Settings, handler: Handler) -> None:
        mine, theirs = socket.socketpair()
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(_PACKAGE_ROOT), env.get("PYTHONPATH", "")) if p)
        code = f"from wap_core.analysis.sandbox import serve; serve({theirs.fileno()})"
        self.proc = subprocess.Popen(
            [sys.executable, "-c", code, TAG, str(settings.home)],
            pass_fds=(theirs.fileno(),),
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # its own process group: killing it ends its JVM too
            env=env,
        )
        theirs.close()
        self.conn = Connection(mine.detach())
        self.conn.send((settings, handler, settings.query_nice))
        self.ready = False
        self.idle_since = time.monotonic()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        """End the worker's whole process group (its Python and its JVM) and wait until none of it runs."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            self.proc.kill()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL is not ignorable
            log.warning("SQL box worker %s did not end after SIGKILL", self.proc.pid)
        deadline = time.monotonic() + 30
        while group_members(self.proc.pid) and time.monotonic() < deadline:  # its JVM's many threads exiting
            time.sleep(0.02)
        self.conn.close()


def group_members(pgid: int) -> list[int]:
    """Processes of process group ``pgid`` still running (a worker's Python and JVM; zombies are done), from
    /proc; where there is no /proc, ``[pgid]`` while the group can still be signalled."""
    proc = Path("/proc")
    if not proc.is_dir():  # pragma: no cover - Linux has /proc
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return []
        return [pgid]
    found = []
    for entry in proc.iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:  # it ended while we looked
                continue
            if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
                found.append(int(entry.name))
    return found


class WorkerPool:
    """At most ``settings.query_workers`` workers for one lakehouse; one query per worker, one per user."""

    def __init__(self, settings: Settings, handler: Handler) -> None:
        self.settings = settings
        self.handler = handler
        self._idle: list[_Worker] = []
        self._all: set[_Worker] = set()
        self._users: set[str] = set()
        self._cond = threading.Condition()
        self._reaper: threading.Thread | None = None

    def workers(self) -> list[int]:
        """Process ids of the workers alive now."""
        with self._cond:
            return sorted(w.pid for w in self._all if w.alive())

    def acquire(self, user: str, deadline: float, stopped: Callable[[], str | None]) -> _Worker:
        """A worker for ``user``'s next query: an idle one, a new one, or the next to free up (until ``deadline``)."""
        with self._cond:
            while user in self._users or (not self._idle and len(self._all) >= self.settings.query_workers):
                reason = stopped()
                if reason is not None:
                    raise _Stopped(reason)
                if time.monotonic() >= deadline:
                    raise _Stopped(BUSY)
                self._cond.wait(POLL_SECONDS)
            self._users.add(user)
            while self._idle:
                worker = self._idle.pop()
                if worker.alive() and time.monotonic() - worker.idle_since < IDLE_SECONDS:
                    return worker
                self._all.discard(worker)
                worker.kill()
            try:
                worker = _Worker(self.settings, self.handler)
            except BaseException:
                self._users.discard(user)
                self._cond.notify_all()
                raise
            self._all.add(worker)
            return worker

    def release(self, user: str, worker: _Worker, *, keep: bool) -> None:
        """Give ``worker`` back (idle) or end it; ``user`` may start another query."""
        keep = keep and worker.alive()
        if not keep:
            worker.kill()
        with self._cond:
            self._users.discard(user)
            if keep:
                worker.idle_since = time.monotonic()
                self._idle.append(worker)
                if self._reaper is None:
                    self._reaper = threading.Thread(target=self._reap, name="wap-sql-box-reaper", daemon=True)
                    self._reaper.start()
            else:
                self._all.discard(worker)
            self._cond.notify_all()

    def _reap(self) -> None:
        """End workers idle longer than :data:`IDLE_SECONDS` (checked every tenth of it), while any is idle."""
        while True:
            time.sleep(IDLE_SECONDS / 10)
            now = time.monotonic()
            with self._cond:
                stale = [w for w in self._idle if now - w.idle_since >= IDLE_SECONDS]
                for w in stale:
                    self._idle.remove(w)
                    self._all.discard(w)
                done = not self._idle
                if done:
                    self._reaper = None
            for w in stale:
                log.info("ending SQL box worker %s: idle for %.0f s", w.pid, now - w.idle_since)
                w.kill()
            if done:
                return

    def close(self) -> None:
        """End every worker."""
        with self._cond:
            every = list(self._all)
            self._all.clear()
            self._idle.clear()
        for w in every:
            w.kill()


class _Stopped(Exception):
    """Internal: the query was stopped (``reason``) before or while it ran."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


_pools: Registry[Settings, WorkerPool] = Registry()


def pool_for(settings: Settings, handler: Handler) -> WorkerPool:
    """The process-wide pool of workers for ``settings`` (created on first use; the time limit is per query)."""
    key = replace(settings, query_timeout=Settings.query_timeout)
    return _pools.get(key, lambda: WorkerPool(key, handler))


@atexit.register
def close_all() -> None:
    """End every worker of this process (at exit; tests)."""
    for pool in _pools.take_all():
        pool.close()


class SandboxQuery(BackgroundWork[T]):
    """One query sent to a worker; the same surface as :class:`wap_core.lake.jobs.QueryHandle`.

    ``cancel()`` it, wait for ``result()``; ``phase`` is ``waiting`` (for a free worker), ``starting`` (a new
    worker's Spark), ``running`` or ``done``.
    """

    def __init__(
        self,
        pool: WorkerPool,
        user: str,
        description: str,
        request: Any,
        *,
        timeout: float,
        alive: Callable[[], bool] | None = None,
    ) -> None:
        super().__init__(description)
        self.pool = pool
        self.user = user
        self.timeout = timeout
        self._request = request
        self._alive = alive
        self._reason: str | None = None
        self.phase = "waiting"
        self.worker_pid: int | None = None
        self._thread = threading.Thread(target=self._run, name="wap-sql-box-query", daemon=True)
        self._thread.start()

    # the QueryHandle surface
    def cancel(self) -> None:
        """Stop the query: its worker is killed (its result raises QueryCancelledError)."""
        if self._reason is None and not self._done.is_set():
            log.info("cancelling %s (user %s)", self.description, self.user)
            self._reason = CANCELLED

    # the work
    def _stopped(self, deadline: float | None = None) -> str | None:
        if self._reason is None and deadline is not None and time.monotonic() >= deadline:
            self._reason = TIMEOUT
        if self._reason is None and self._alive is not None:
            try:
                gone = not self._alive()
            except Exception:
                log.warning("liveness check of %s failed", self.description, exc_info=True)
                gone = False
            if gone:
                self._reason = SESSION_ENDED
        return self._reason

    def _run(self) -> None:
        worker: _Worker | None = None
        keep = False
        try:
            worker = self.pool.acquire(self.user, self.started + self.timeout, self._stopped)
            self.worker_pid = worker.pid
            if not worker.ready:
                self.phase = "starting"
                self._wait_ready(worker)
            self.phase = "running"
            worker.conn.send(self._request)
            kind, payload = self._answer(worker, time.monotonic() + self.timeout)
            # It answered (rows, or an error such as a refusal): it can take the next query, unless its JVM
            # hit an Error (out of memory, stack overflow): then it is killed (release) and never reused.
            keep = kind != "fatal"
            if kind == "fatal":
                raise SparkJobError(
                    f"{self.description} failed: its worker's JVM hit {payload}; the worker was ended (the next "
                    "query starts a fresh one); narrow the query or ask an admin to raise WAP_QUERY_MEMORY"
                )
            if kind != "ok":
                raise payload
            self._value = payload
        except _Stopped as stop:
            self._error = self._stop_error(stop.reason)
        except Exception as exc:  # noqa: BLE001 - not swallowed: result() raises it
            self._error = exc
        finally:
            if worker is not None:
                self.pool.release(self.user, worker, keep=keep)
            self.phase = "done"
            self._finish()

    def _stop_error(self, reason: str) -> Exception:
        if reason == BUSY:
            return QueryTimeoutError(
                f"cancelled: {self.description} waited WAP_QUERY_TIMEOUT ({self.timeout:g} s) for one of the SQL "
                f"box's {self.pool.settings.query_workers} workers (WAP_QUERY_WORKERS), all busy with other "
                "queries or with another query of yours; run it again in a moment"
            )
        return cancel_error(reason, self.description, self.timeout)

    def _wait_ready(self, worker: _Worker) -> None:
        deadline = time.monotonic() + START_SECONDS
        while not worker.conn.poll(POLL_SECONDS):
            reason = self._stopped()
            if reason is not None:
                raise _Stopped(reason)
            if not worker.alive():
                raise SparkJobError(
                    f"the SQL box's worker ended while starting (exit code {worker.proc.returncode})"
                )
            if time.monotonic() >= deadline:
                raise SparkJobError(
                    f"the SQL box's worker did not start its Spark driver within {START_SECONDS:g} s"
                )
        kind, payload = worker.conn.recv()
        if kind != "ready":
            raise payload
        worker.ready = True

    def _answer(self, worker: _Worker, deadline: float) -> tuple[str, Any]:
        """Wait for the worker's reply: ``("ok", value)``, ``("error", exception)`` or ``("fatal", exception)``."""
        while not worker.conn.poll(POLL_SECONDS):
            reason = self._stopped(deadline)
            if reason is not None:
                raise _Stopped(reason)
            if not worker.alive():
                raise SparkJobError(
                    f"{self.description} failed: its worker process ended (exit code {worker.proc.returncode}); "
                    "it may have run out of memory (WAP_QUERY_MEMORY)"
                )
        try:
            kind, payload = worker.conn.recv()
        except (EOFError, OSError) as exc:
            raise SparkJobError(f"{self.description} failed: its worker process ended ({exc})") from exc
        return str(kind), payload


def submit(
    lh: Lakehouse,
    handler: Handler,
    user: str,
    description: str,
    request: Any,
    *,
    alive: Callable[[], bool] | None = None,
) -> SandboxQuery[Any]:
    """Send ``request`` to a worker of ``lh``'s pool (``handler`` answers it there), under the time limit."""
    pool = pool_for(lh.settings, handler)
    return SandboxQuery(pool, user, description, request, timeout=lh.settings.query_timeout, alive=alive)
