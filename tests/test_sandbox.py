"""The SQL box's worker processes (issue 19, item 1): no allowed query can hold the console's task slots.

Real Spark in a real worker process (its own JVM), real Iceberg. The runaway queries are the ones the guard
still allows: a self-join of a 200,000-row table on a key with two values (2 * 10^10 rows, one task) and a
``UNION ALL`` of two of them (a task per branch: in the console's driver ``local[2]`` it held both slots and
another user's diff waited for the time limit, bench/results/crowd.md). Here the query runs in a worker:
the console's own Spark jobs finish while it runs; the time limit, Cancel and the end of the session kill
the worker's whole process group (its Python and its JVM: checked in /proc); a worker whose parent is
killed ends on its own; errors keep their class and error class across the process boundary.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import helpers
import pytest

from wap_core import Lakehouse, TableId
from wap_core.analysis import explore, sandbox
from wap_core.exceptions import QueryCancelledError, QueryTimeoutError, SparkJobError, ValidationError
from wap_core.lake.jobs import QueryHandle

T = TableId("jobs", "wide")
ROWS = 200_000
RUNAWAY_SQL = (
    "SELECT count(*) AS n, sum(a.id + b.id) AS s FROM ref_view a JOIN ref_view b ON a.id % 2 = b.id % 2"
)
UNION_SQL = (
    "SELECT count(*) AS n, sum(k) AS s FROM (SELECT a.id + b.id AS k FROM ref_view a JOIN ref_view b "
    "ON a.id % 2 = b.id % 2 UNION ALL SELECT a.id - b.id FROM ref_view a JOIN ref_view b ON a.id % 2 = b.id % 2)"
)
QUICK_SQL = "SELECT count(*) AS n FROM ref_view"
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory, spark_session: None) -> Iterator[Lakehouse]:
    home = tmp_path_factory.mktemp("sandbox")
    lh = Lakehouse(helpers.lake_settings(home, "sandboxed", query_timeout=600))
    helpers.publish_ids(lh, T, home / "landing" / "wide.parquet", ROWS)
    yield lh
    sandbox.close_all()


def _main(lh: Lakehouse) -> int:
    return int(lh.table(T).metadata.refs["main"].snapshot_id)


def _with(lh: Lakehouse, **changes: object) -> Lakehouse:
    return Lakehouse(lh.settings.with_(**changes))


def _running(handle: object) -> int:
    assert isinstance(handle, sandbox.SandboxQuery)
    helpers.wait_for(lambda: handle.phase == "running", 240, "the query to reach its worker")
    assert handle.worker_pid is not None
    return handle.worker_pid


def test_a_query_runs_in_a_worker_that_is_reused_and_niced(lake: Lakehouse) -> None:
    first = explore.submit_query(lake, T, _main(lake), QUICK_SQL, user="ann")
    assert isinstance(first, sandbox.SandboxQuery)
    assert first.result(240)["n"].tolist() == [ROWS]
    second = explore.submit_query(lake, T, _main(lake), QUICK_SQL, user="ann")
    assert isinstance(second, sandbox.SandboxQuery)
    assert second.result(240)["n"].tolist() == [ROWS]
    assert second.worker_pid == first.worker_pid  # the warm worker answered again
    pid = first.worker_pid
    assert pid is not None and pid != os.getpid()
    members = sandbox.group_members(pid)
    assert len(members) >= 2  # the worker's Python and its own JVM, in the worker's process group
    mine = os.getpriority(os.PRIO_PROCESS, 0)  # the worker is niced relative to its console
    assert os.getpriority(os.PRIO_PROCESS, pid) == min(19, mine + lake.settings.query_nice)
    assert f"{sandbox.TAG}\0{lake.settings.home}".encode() in Path(f"/proc/{pid}/cmdline").read_bytes()


def test_driver_isolation_keeps_the_in_driver_path(lake: Lakehouse) -> None:
    handle = explore.submit_query(
        _with(lake, query_isolation="driver"), T, _main(lake), QUICK_SQL, user="ann"
    )
    assert isinstance(handle, QueryHandle)
    assert handle.result(240)["n"].tolist() == [ROWS]


def test_refusals_and_errors_keep_their_class_across_the_process(lake: Lakehouse) -> None:
    with pytest.raises(ValidationError, match="may only read ref_view"):  # the parse stage, before any worker
        explore.submit_query(lake, T, _main(lake), "SELECT * FROM sandboxed.jobs.wide", user="ann")
    refused = explore.submit_query(lake, T, _main(lake), "SELECT * FROM ref_view a, ref_view b", user="ann")
    with pytest.raises(ValidationError, match="refused"):  # the optimized plan's stage, in the worker
        refused.result(240)
    failing = explore.submit_query(
        lake, T, _main(lake), "SELECT map(id, 'a', id, 'b') AS m FROM ref_view", user="ann"
    )
    with pytest.raises(SparkJobError, match=r"^SQL error: DUPLICATED_MAP_KEY: ") as err:
        failing.result(240)
    assert err.value.error_class == "DUPLICATED_MAP_KEY"
    assert refused.worker_pid == failing.worker_pid  # a refusal or a SQL error does not cost the worker
    assert "\n" not in str(err.value) and "o2" not in str(err.value)


def test_the_time_limit_kills_the_worker_and_its_jvm(lake: Lakehouse) -> None:
    short = _with(lake, query_timeout=4)
    handle = explore.submit_query(short, T, _main(lake), RUNAWAY_SQL, user="tim")
    pid = _running(handle)
    with pytest.raises(QueryTimeoutError, match=r"ran longer than WAP_QUERY_TIMEOUT \(4 s\)"):
        handle.result(240)
    assert sandbox.group_members(pid) == []  # Python and JVM are gone the moment the error is raised
    again = explore.submit_query(lake, T, _main(lake), QUICK_SQL, user="tim")  # same pool, no tight limit
    assert isinstance(again, sandbox.SandboxQuery)
    assert again.result(240)["n"].tolist() == [ROWS]  # a fresh worker answers the next query
    assert again.worker_pid != pid


def test_cancel_and_the_end_of_the_session_kill_the_worker(lake: Lakehouse) -> None:
    handle = explore.submit_query(lake, T, _main(lake), RUNAWAY_SQL, user="cat")
    pid = _running(handle)
    time.sleep(1)
    threading.Thread(target=handle.cancel).start()
    with pytest.raises(QueryCancelledError, match="was cancelled and its Spark jobs were stopped"):
        handle.result(60)
    assert sandbox.group_members(pid) == []

    connected = threading.Event()
    connected.set()
    gone = explore.submit_query(lake, T, _main(lake), RUNAWAY_SQL, user="cat", alive=connected.is_set)
    pid = _running(gone)
    connected.clear()  # the browser session ended
    with pytest.raises(QueryCancelledError, match="console session that started") as err:
        gone.result(60)
    assert err.value.reason == "session_ended"
    assert sandbox.group_members(pid) == []


def test_a_union_runaway_in_a_worker_leaves_the_consoles_driver_free(lake: Lakehouse) -> None:
    """The query that held both slots of the shared driver: the console's own job finishes while it runs."""
    hog = explore.submit_query(lake, T, _main(lake), UNION_SQL, user="hog")
    _running(hog)
    time.sleep(3)  # its tasks are running in the worker
    done = threading.Event()

    def console_job() -> None:
        lake.spark.sparkContext.setLocalProperty("spark.scheduler.pool", "user:steward")
        lake.spark.range(0, 2_000_000, numPartitions=4).selectExpr("sum(id)").collect()
        done.set()

    threading.Thread(target=console_job, daemon=True).start()
    assert done.wait(120), "the console's Spark job did not finish while a SQL-box query ran"
    assert not hog.done()  # the runaway was still running all along
    hog.cancel()
    with pytest.raises(QueryCancelledError):
        hog.result(60)


def test_one_query_per_user_at_a_time_and_at_most_n_workers(lake: Lakehouse) -> None:
    one = _with(lake, query_workers=1, query_timeout=600)
    first = explore.submit_query(one, T, _main(lake), RUNAWAY_SQL, user="una")
    _running(first)
    same_user = explore.submit_query(one, T, _main(lake), QUICK_SQL, user="una")
    time.sleep(1)
    assert same_user.phase == "waiting" and not same_user.done()
    first.cancel()
    assert same_user.result(240)["n"].tolist() == [ROWS]  # it got the worker once the first one ended

    hog = explore.submit_query(one, T, _main(lake), RUNAWAY_SQL, user="una")
    _running(hog)
    impatient = _with(lake, query_workers=1, query_timeout=3)  # the same pool: the time limit is per query
    other = explore.submit_query(impatient, T, _main(lake), QUICK_SQL, user="otto")
    with pytest.raises(
        QueryTimeoutError, match=r"waited WAP_QUERY_TIMEOUT \(3 s\) for one of the SQL box's 1 workers"
    ):
        other.result(240)
    assert not hog.done()
    hog.cancel()
    with pytest.raises(QueryCancelledError):
        hog.result(60)


def test_a_worker_ends_when_its_parent_is_killed(lake: Lakehouse, tmp_path: Path) -> None:
    script = tmp_path / "parent.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import sys, time
            from wap_core import Lakehouse, Settings, TableId
            from wap_core.analysis import explore
            lh = Lakehouse(Settings.from_env())
            h = explore.submit_query(lh, TableId("jobs", "wide"), {_main(lake)}, {RUNAWAY_SQL!r}, user="ann")
            while h.phase != "running":
                time.sleep(0.1)
            print(h.worker_pid, flush=True)
            time.sleep(600)
            """
        )
    )
    env = {**os.environ, **helpers.lake_env(lake.settings, "ann"), "PYTHONPATH": str(ROOT)}
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert parent.stdout is not None
        pid = int(parent.stdout.readline())
        assert sandbox.group_members(pid)
        parent.send_signal(signal.SIGKILL)
        parent.wait(30)
        helpers.wait_for(
            lambda: not sandbox.group_members(pid), 60, "the orphaned worker (and its JVM) to end"
        )
    finally:
        parent.kill()


def oom_or_pid(lh: Lakehouse, request: str) -> int:
    """A worker's handler for the test below: the query that killed a reused worker in issue 25 (Spark folds
    the constant in the optimizer, in the driver's own thread: OutOfMemoryError, the context stays open)
    run without the guard, or the worker's pid."""
    if request == "oom":
        lh.spark.sql("SELECT size(array_insert(array(1), 1500000000, 1)) AS n").collect()
    return os.getpid()


def test_a_worker_that_hit_a_jvm_error_is_never_reused(
    lake: Lakehouse, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 25 item 4: after an OutOfMemoryError the worker is ended, and the next query gets a fresh one."""
    here = str(Path(__file__).resolve().parent)  # the worker imports this module for its handler
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join((str(ROOT), here)))
    own = _with(lake, query_memory="512m", query_workers=1)  # a pool of its own (the handler is per pool)
    first = sandbox.submit(own, oom_or_pid, "olga", "the pid probe", "pid")
    pid = first.result(240)
    assert pid == first.worker_pid
    again = sandbox.submit(own, oom_or_pid, "olga", "the pid probe", "pid")
    assert again.result(240) == pid  # an ordinary answer: the warm worker is reused
    boom = sandbox.submit(own, oom_or_pid, "olga", "the array_insert query", "oom")
    with pytest.raises(SparkJobError, match="OutOfMemoryError") as err:
        boom.result(240)
    assert boom.worker_pid == pid
    assert "hit java.lang.OutOfMemoryError: Java heap space; the worker was ended" in str(
        err.value
    ) and "\n" not in str(err.value)
    assert sandbox.group_members(pid) == []  # its Python and its JVM are gone
    fresh = sandbox.submit(own, oom_or_pid, "olga", "the pid probe", "pid")
    assert fresh.result(240) != pid  # a new worker answered
    assert sandbox.pool_for(own.settings, oom_or_pid).workers() == [fresh.result(1)]
