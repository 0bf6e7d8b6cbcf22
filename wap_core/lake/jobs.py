"""Spark work started for a user: its own job group, the user's FAIR pool, a time limit and cancel.

One Spark driver serves every console session and the CLI's commands of a process. So that one user's
runaway query cannot starve the others:

- every query, diff, keyed diff and audit started for a user runs in its **own job group**
  (``SparkContext.setJobGroup(group, description, interruptOnCancel=True)``: PySpark's pinned-thread mode
  keeps it per Python thread; ``SparkSession.addTag`` is Spark Connect only in 3.5);
- in the **user's FAIR pool** ``user:<name>`` (the ``spark.scheduler.pool`` local property; the session runs
  with ``spark.scheduler.mode=FAIR`` and the allocation file ``lake/fairscheduler.xml`` shipped with
  wap_core, see :mod:`wap_core.lake.spark`). Pools not in that file are created by Spark on first use with
  the defaults (weight 1, minShare 0, FIFO inside the pool): every user gets an equal share of the task
  slots, whatever one of them runs;
- with a **time limit** (``WAP_QUERY_TIMEOUT``, :attr:`wap_core.config.Settings.query_timeout`) after which
  the group is cancelled and the caller gets :class:`~wap_core.exceptions.QueryTimeoutError`, one line;
- **cancellable** from any thread (:meth:`JobGroup.cancel`, :meth:`QueryHandle.cancel`: the console's
  Cancel button) and when the one who started it is gone (``alive()`` turns false: the console passes
  "this browser session is still connected").

Spark 3.5 cancels a group's *active* jobs only: a cancelled group is therefore cancelled again every
:data:`CANCEL_REPEAT_SECONDS` until its work returns, so a job it starts later dies at once too.

Some work does not stop when cancelled: Spark's optimizer evaluates constant expressions while planning,
before any job exists (``'aaa...' rlike '(.*a){8}x'`` backtracks for minutes), and nothing interrupts it.
(A task inside a regular expression is a lesser case: its job ends at the cancel and the caller gets its
error, but the task's thread runs on, holding its slot, until ``java.util.regex`` returns: it never looks at
the interrupt.) A :class:`QueryHandle` whose work has not returned :data:`STUCK_SECONDS` after it was
cancelled stops waiting: its ``result()`` raises the time-out (or cancel) error, saying that the work may
still run in this driver. So the wait is bounded here; the work is not: only a SQL-box worker
(:mod:`wap_core.analysis.sandbox`, ``WAP_QUERY_ISOLATION=process``) is killed, whatever it is doing.
"""

from __future__ import annotations

import hashlib
import logging
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Generic, TypeVar, cast

from wap_core.exceptions import QueryCancelledError, QueryTimeoutError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)
T = TypeVar("T")

POOL_PROPERTY = "spark.scheduler.pool"
_JOB_GROUP = "spark.jobGroup.id"
#: The thread-local properties a group sets (and restores afterwards).
_LOCAL_PROPERTIES = (
    _JOB_GROUP,
    "spark.job.description",
    "spark.job.interruptOnCancel",
    POOL_PROPERTY,
)
#: How often a cancelled group is cancelled again while its work has not returned.
CANCEL_REPEAT_SECONDS = 0.2
#: How often the watcher looks at the deadline and ``alive()``.
WATCH_SECONDS = 0.5
#: How long a :class:`QueryHandle` waits for cancelled work to return before it gives up on it.
STUCK_SECONDS = 5.0
_POOL_UNSAFE = re.compile(r"[^A-Za-z0-9._@+-]")

CANCELLED = "cancelled"
TIMEOUT = "timeout"
SESSION_ENDED = "session_ended"


def pool_for(user: str) -> str:
    """The FAIR pool of ``user``: ``user:<name>`` (other characters replaced, then a hash keeps names apart)."""
    safe = _POOL_UNSAFE.sub("_", user)[:64]
    if safe != user:
        safe += "-" + hashlib.sha256(user.encode("utf-8")).hexdigest()[:8]
    return f"user:{safe or 'anonymous'}"


def cancel_error(
    reason: str, what: str, timeout: float | None, *, stuck: bool = False
) -> QueryCancelledError:
    """The one-line error of work (``what``) stopped for ``reason`` (cancelled | timeout | session_ended);
    ``stuck``: the work did not return within :data:`STUCK_SECONDS` of the cancel (it may still run)."""
    stopped = (
        f"was cancelled but did not stop within {STUCK_SECONDS:g} s (Spark's optimizer does not heed a "
        "cancel), so it may still run in this driver; WAP_QUERY_ISOLATION=process kills such work"
        if stuck
        else "its Spark jobs were stopped"
    )
    if reason == TIMEOUT:
        return QueryTimeoutError(
            f"cancelled: {what} ran longer than WAP_QUERY_TIMEOUT ({timeout or 0:g} s) and {stopped}; "
            "narrow it (filters, fewer joins, a LIMIT) or ask an admin to raise WAP_QUERY_TIMEOUT"
        )
    if reason == SESSION_ENDED:
        return QueryCancelledError(
            f"cancelled: the console session that started {what} ended, so {stopped}", reason=SESSION_ENDED
        )
    return QueryCancelledError(f"cancelled: {what} was cancelled and {stopped}")


class JobGroup:
    """One group of Spark jobs started for ``user``; cancel it from any thread.

    Run the work inside :meth:`running` (in the thread that starts the jobs). After ``timeout`` seconds,
    on :meth:`cancel`, or once ``alive()`` returns false, every job of the group is cancelled and the work
    raises :class:`QueryCancelledError` (:class:`QueryTimeoutError` for the time limit) instead of
    whatever Spark raised.
    """

    def __init__(
        self,
        spark: SparkSession,
        user: str,
        description: str,
        *,
        timeout: float | None = None,
        alive: Callable[[], bool] | None = None,
    ) -> None:
        self.id = f"wap-{uuid.uuid4().hex}"
        self.user = user
        self.pool = pool_for(user)
        self.description = description
        self.timeout = timeout
        self._alive = alive
        self._sc = spark.sparkContext
        self._lock = threading.Lock()
        self._reason: str | None = None
        self._finished = threading.Event()
        self._wake = threading.Event()
        self._cancelled_at: float | None = None
        #: Called once (from the watcher) if the work has not returned STUCK_SECONDS after the cancel.
        self.on_stuck: Callable[[], None] | None = None

    @property
    def reason(self) -> str | None:
        """Why the group was cancelled (``cancelled`` | ``timeout`` | ``session_ended``), or None."""
        return self._reason

    def cancel(self, reason: str = CANCELLED) -> None:
        """Cancel every job of the group, now and until its work returns (no effect once it has returned)."""
        with self._lock:
            if self._reason is not None or self._finished.is_set():
                return
            self._reason = reason
            self._cancelled_at = time.monotonic()
        log.info("cancelling job group %s (%s, user %s): %s", self.id, self.description, self.user, reason)
        self._wake.set()

    def running_jobs(self) -> list[int]:
        """Ids of the group's jobs Spark still runs (its status tracker)."""
        tracker = self._sc.statusTracker()
        out = []
        for job in tracker.getJobIdsForGroup(self.id):
            info = tracker.getJobInfo(job)
            if info is not None and info.status == "RUNNING":
                out.append(int(job))
        return out

    def error(self) -> QueryCancelledError:
        """The one-line error of a cancelled group."""
        return cancel_error(self._reason or CANCELLED, self.description, self.timeout)

    @contextmanager
    def running(self) -> Iterator[JobGroup]:
        """Run the block's Spark jobs (this thread's) in this group and pool, under the watcher."""
        sc = self._sc
        saved = {k: sc.getLocalProperty(k) for k in _LOCAL_PROPERTIES}
        sc.setJobGroup(self.id, self.description, interruptOnCancel=True)
        sc.setLocalProperty(POOL_PROPERTY, self.pool)
        watcher = threading.Thread(target=self._watch, name=f"wap-watch-{self.id}", daemon=True)
        watcher.start()
        try:
            if self._reason is not None:
                raise self.error()
            yield self
        except Exception as exc:
            if self._reason is not None and not isinstance(exc, QueryCancelledError):
                raise self.error() from exc
            raise
        finally:
            with self._lock:
                self._finished.set()
            self._wake.set()
            for k, v in saved.items():  # None (Py4J: null) removes the property again
                sc.setLocalProperty(k, v)  # type: ignore[arg-type]

    def _watch(self) -> None:
        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        while not self._finished.is_set():
            if self._reason is None:
                if deadline is not None and time.monotonic() >= deadline:
                    self.cancel(TIMEOUT)
                elif self._alive is not None and not self._still_alive():
                    self.cancel(SESSION_ENDED)
            if self._reason is not None:
                try:
                    self._sc.cancelJobGroup(self.id)
                except Exception:  # the context may be stopping; the work fails or returns on its own
                    log.warning("could not cancel job group %s", self.id, exc_info=True)
                wait = CANCEL_REPEAT_SECONDS
                since = time.monotonic() - (self._cancelled_at or 0.0)
                if self.on_stuck is not None and since >= STUCK_SECONDS:
                    stuck, self.on_stuck = self.on_stuck, None
                    log.info(
                        "job group %s (%s) did not stop %.0f s after its cancel",
                        self.id,
                        self.description,
                        since,
                    )
                    stuck()
            else:
                wait = WATCH_SECONDS
                if deadline is not None:
                    wait = max(0.0, min(wait, deadline - time.monotonic()))
            self._wake.wait(wait)
            self._wake.clear()

    def _still_alive(self) -> bool:
        assert self._alive is not None
        try:
            return bool(self._alive())
        except Exception:  # a failing liveness probe keeps the work running (the time limit still holds)
            log.warning("liveness check of job group %s failed", self.id, exc_info=True)
            return True


@contextmanager
def user_jobs(
    spark: SparkSession,
    user: str,
    description: str,
    *,
    timeout: float | None = None,
    alive: Callable[[], bool] | None = None,
) -> Iterator[JobGroup]:
    """Run the block's Spark jobs in a new group in ``user``'s pool, cancelled after ``timeout`` seconds."""
    group = JobGroup(spark, user, description, timeout=timeout, alive=alive)
    if timeout is None and alive is None and spark.sparkContext.getLocalProperty(_JOB_GROUP):
        # The caller already runs this work in a job group it governs (a QueryHandle's, an orchestrator's,
        # a test counting jobs): the jobs stay there, so cancelling that group still stops them.
        yield group
        return
    with group.running():
        yield group


class BackgroundWork(Generic[T]):
    """Work a background thread does for a caller who waits: :meth:`done`, :attr:`elapsed`, :meth:`result`.

    The thread sets ``_value`` or ``_error`` and then calls :meth:`_finish`.
    """

    def __init__(self, description: str) -> None:
        self.description = description
        self._done = threading.Event()
        self._value: T | None = None
        self._error: Exception | None = None
        self.started = time.monotonic()
        self.ended: float | None = None

    def _finish(self) -> None:
        self.ended = time.monotonic()
        self._done.set()

    def done(self) -> bool:
        """True once the work returned or failed."""
        return self._done.is_set()

    @property
    def elapsed(self) -> float:
        """Seconds since start (until the end once done)."""
        return (self.ended if self.ended is not None else time.monotonic()) - self.started

    def result(self, timeout: float | None = None) -> T:
        """The work's value; its error re-raised; TimeoutError if it is still running after ``timeout`` seconds."""
        if not self._done.wait(timeout):
            raise TimeoutError(f"{self.description} is still running")
        if self._error is not None:
            raise self._error
        return cast(T, self._value)


class QueryHandle(BackgroundWork[T]):
    """Work running in a background thread in its own job group: :meth:`cancel` it, wait for :meth:`result`."""

    def __init__(self, group: JobGroup, work: Callable[[], T]) -> None:
        from pyspark import InheritableThread  # pinned-thread mode: the JVM thread ends with this one

        super().__init__(group.description)
        self.group = group
        self._work = work
        self._settled = threading.Lock()
        group.on_stuck = self._give_up
        self._thread = InheritableThread(target=self._run, name=f"wap-query-{group.id}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        value: T | None = None
        error: Exception | None = None
        try:
            with self.group.running():
                value = self._work()
        except Exception as exc:  # noqa: BLE001 - not swallowed: result() raises it in the caller
            log.debug("work of job group %s failed: %s", self.group.id, exc)
            error = exc
        with self._settled:
            if self._done.is_set():  # given up on (_give_up): the caller already has its error
                return
            self._value, self._error = value, error
            self._finish()

    def _give_up(self) -> None:
        """The cancelled work did not return within STUCK_SECONDS: end the wait (the work may run on)."""
        with self._settled:
            if self._done.is_set():
                return
            reason = self.group.reason or CANCELLED
            self._error = cancel_error(reason, self.description, self.group.timeout, stuck=True)
            self._finish()

    def cancel(self) -> None:
        """Cancel the work's Spark jobs (its result raises :class:`QueryCancelledError`)."""
        self.group.cancel(CANCELLED)

    @property
    def phase(self) -> str:
        """``running`` or ``done`` (a SQL-box worker's query also knows ``waiting`` and ``starting``)."""
        return "done" if self._done.is_set() else "running"


def start(
    spark: SparkSession,
    user: str,
    description: str,
    work: Callable[[], T],
    *,
    timeout: float | None = None,
    alive: Callable[[], bool] | None = None,
) -> QueryHandle[T]:
    """Start ``work`` in a background thread, in its own job group in ``user``'s pool."""
    return QueryHandle(JobGroup(spark, user, description, timeout=timeout, alive=alive), work)
