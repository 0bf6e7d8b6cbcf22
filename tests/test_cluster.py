"""The lifecycle on a real Spark standalone cluster with a PostgreSQL catalog.

A master and two workers (pip pyspark's ``bin/spark-class``, 127.0.0.1, 1 core and 1 executor each)
and the session's PostgreSQL server; then the backend-parametrized modules (the same tests and
assertions as the local run: ingest, audit with every check type, malformed rows, diff, keyed diff,
publish, refusals, rebase, discard, the concurrent publish race) run again in a pytest subprocess with
``--backend cluster-postgres`` (one SparkContext per process: this run's is ``local[2]``). The
subprocess's failures are reported here by test id. The executors must really have run the tasks:
the driver's master is the cluster's, both executors completed tasks and run the project's Python.
This process only waits for all that: it runs in the background lane (``BACKGROUND``; tests/helpers.py ``Lane``)
from the suite's first test on, and the test collects its outcome.
"""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Callable

import pytest
from helpers import Lane, pytest_on_backend
from spark_cluster import spark_cluster

# The lifecycle on the cluster: every step once, with the local tests' own assertions (kept to what
# covers each step, to stay within a few minutes on 2 cores; the rest of those modules is local-only).
LIFECYCLE = "tests/test_core_lifecycle.py::test_"
SELECTION = [
    LIFECYCLE + "ingest_writes_only_to_a_new_branch_with_provenance",
    LIFECYCLE + "publish_fast_forwards_main_to_the_audited_head_and_removes_the_branch",
    LIFECYCLE + "publish_refuses_a_failed_audit_and_force_needs_a_reason",
    LIFECYCLE + "main_moved_refuses_publish_then_rebase_replays_and_needs_a_new_audit",
    LIFECYCLE + "concurrent_publish_of_one_branch_moves_main_exactly_once",
    LIFECYCLE + "a_commit_to_main_between_check_and_publish_is_a_conflict_not_a_lost_write",
    LIFECYCLE + "discard_drops_the_branch_and_keeps_main",
    LIFECYCLE + "malformed_csv_rows_are_counted_located_and_fail_the_audit",
    "tests/test_core_checks.py",  # every check type, against main and a reference table
    "tests/test_upserts.py",  # a job's MERGE / UPDATE / DELETE / INSERT OVERWRITE audited on what main becomes
    "tests/test_core_diff.py",  # diff (profiles, merged main profile) and the keyed diff's schema changes
    "tests/test_cli.py::test_full_lifecycle_through_the_cli",  # ingest .. diff --key .. publish .. history
]
pytestmark = [pytest.mark.cluster, pytest.mark.postgres]
FAST_JVM = "-XX:TieredStopAtLevel=1"


def _cluster_run(lane: Lane, params: dict[str, object]) -> None:
    """The whole test but its wait: run in the background lane (tests/helpers.py ``Lane``)."""
    postgres, tmp_path = lane.postgres, lane.tmp("cluster")
    shared = tmp_path / "shared"  # the warehouses: a directory every process (driver, executors) reaches
    shared.mkdir()
    probe = tmp_path / "probe.json"
    with spark_cluster(tmp_path / "cluster", workers=2, cores=1, memory="1536m") as cluster:
        state = cluster.state()
        assert [w["state"] for w in state["workers"]] == ["ALIVE", "ALIVE"] and state["cores"] == 2
        env = {
            **lane.environ,
            "WAP_SPARK_MASTER": cluster.master_url,
            "WAP_SPARK_DRIVER_MEMORY": "1g",
            "WAP_SPARK_CONF": " ".join(
                shlex.quote(kv)
                for kv in [
                    "spark.executor.memory=1g",
                    "spark.executor.cores=1",
                    "spark.cores.max=2",
                    "spark.driver.host=127.0.0.1",
                    "spark.driver.bindAddress=127.0.0.1",
                    f"spark.pyspark.python={sys.executable}",
                    f"spark.local.dir={tmp_path / 'driver-local'}",
                    # test speed on 2 busy cores: no wait for data locality, JIT without C2 (short-lived JVMs)
                    "spark.locality.wait=0s",
                    f"spark.executor.extraJavaOptions={FAST_JVM}",
                    f"spark.driver.extraJavaOptions=-Dlog4j.rootLogger=WARN,console {FAST_JVM}",
                ]
            ),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "PYSPARK_PYTHON": sys.executable,
            "WAP_TEST_POSTGRES_URL": postgres,
            "WAP_TEST_SHARED_STORAGE": str(shared),
            "WAP_TEST_CLUSTER_PROBE": str(probe),
        }
        pytest_on_backend(
            SELECTION,
            "cluster-postgres",
            env=env,
            tmp=tmp_path,
            timeout=900,  # the driver JVM goes down with its pytest (one process group)
            run="cluster run",
            failed_on="the cluster + PostgreSQL backend",
            min_tests=25,
            logs=cluster.logs_tail,
        )

        # it really ran on the cluster: the master's app, two executors that completed tasks, the project's Python
        seen = json.loads(probe.read_text())
        assert seen["master"] == cluster.master_url
        executors = [e for e in seen["executors"] if e["id"] != "driver"]
        assert len(executors) == 2 and all(e["completed_tasks"] > 0 for e in executors), executors
        assert all(e["host_port"].startswith("127.0.0.1:") for e in executors)
        assert seen["pythons"] == [sys.executable]
        logs = (
            cluster.executor_logs()
        )  # each worker launched an executor for this application and it ran tasks
        assert all(any(seen["app_id"] in str(p) for p in paths) for paths in logs.values()), logs
        for paths in logs.values():
            assert any("Finished task" in p.read_text(errors="replace") for p in paths), paths


# the cluster run only waits from this process: it runs in the background lane, beside the suite
BACKGROUND = {"test_lifecycle_on_a_spark_cluster_with_a_postgres_catalog": _cluster_run}


def test_lifecycle_on_a_spark_cluster_with_a_postgres_catalog(background: Callable[[float], object]) -> None:
    background(1200)
