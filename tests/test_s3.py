"""The lifecycle on object storage: SeaweedFS's S3 gateway (S3A / PyArrow S3) and its Iceberg REST catalog.

The backend-parametrized tests below run again in a pytest subprocess with ``--backend
s3-seaweedfs,rest-seaweedfs`` (one SparkContext per process, and this run's has no S3A jars): each
test once with the SQLite JDBC catalog and the warehouse in a bucket, once with SeaweedFS's REST
catalog (a table bucket per lakehouse, the journal in SQLite under the home). The subprocess starts
SeaweedFS itself (tests/conftest.py ``seaweed``; tests/s3_server.py) on free loopback ports and
stops it by its process group. tests/test_s3_store.py (collected on those backends only) adds what
only an object store has: nothing outside the bucket, gc deleting from the bucket, secrets, and the
store's failures. The subprocess's failures are reported here by test id. This process only waits for that
run: it runs in the background lane (``BACKGROUND``; tests/helpers.py ``Lane``) from the suite's first test on.

The store's failures (``FAILURES``) mostly wait: Iceberg retries a metadata read of a store that is gone
20 times with backoff (``BaseMetastoreTableOperations.refreshFromMetadataLocation``, about 90 s a read,
not configurable), CLI processes start their JVMs. So they run in a second subprocess that starts when the
suite is collected (``EARLY_START``, tests/conftest.py) and runs beside the rest of the suite; their test
collects it at its turn.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest
from helpers import BackendRun, Lane, pytest_on_backend

from wap_core.config import Settings
from wap_core.lake import s3

LIFECYCLE = "tests/test_core_lifecycle.py::test_"
BOTH = [
    LIFECYCLE + "ingest_writes_only_to_a_new_branch_with_provenance",
    LIFECYCLE + "publish_fast_forwards_main_to_the_audited_head_and_removes_the_branch",
    LIFECYCLE + "publish_refuses_a_failed_audit_and_force_needs_a_reason",
    LIFECYCLE + "main_moved_refuses_publish_then_rebase_replays_and_needs_a_new_audit",
    LIFECYCLE + "discard_drops_the_branch_and_keeps_main",
    "tests/test_core_checks.py::test_row_checks_count_exactly_the_failing_rows",  # every check type
    "tests/test_core_checks.py::test_results_are_journaled_with_the_audited_snapshot",
    "tests/test_core_diff.py",  # diff (profiles, merged main profile) and the keyed diff's schema changes
    "tests/test_gc.py::test_dry_run_changes_nothing_then_gc_expires_the_stale_branch_and_reclaims_its_files",
    "tests/test_cli.py::test_full_lifecycle_through_the_cli",  # ingest .. diff --key .. publish .. history
    "tests/test_s3_store.py::test_nothing_is_written_outside_the_bucket",
    "tests/test_s3_store.py::test_gc_deletes_the_expired_files_from_the_bucket",
    "tests/test_s3_store.py::test_rollback_moves_main_back_on_the_store",
    "tests/test_s3_store.py::test_the_sql_box_worker_reads_the_table_on_the_store",  # its own Spark, same store
    "tests/test_s3_store.py::test_credentials_never_appear_in_cli_output_journal_or_logs",
    # ingest sources as s3a:// / s3:// URLs under an object-store root, and the URLs refused (one row each)
    "tests/test_s3_store.py::test_a_url_source_under_an_object_store_root_is_ingested_confined_and_audited",
    "tests/test_s3_store.py::test_url_sources_outside_the_roots_are_refused",
    "tests/test_s3_store.py::test_a_url_root_must_be_readable_at_start",
    # issue 27: a batch's discard, rollback and rebase through the REST catalog's multi-table commit (REST only)
    "tests/test_batch_moves.py::test_batch_discard_rollback_and_rebase_on_a_rest_catalog[rest-seaweedfs]",
]
# the store's failures (each starts and stops a SeaweedFS of its own; kept to a few for the run's time):
# S3A + JDBC catalog (down before and in the middle of a publish, in the CLI and on a console page), and
# the REST catalog's refused credential
FAILURES = [
    "tests/test_s3_store.py::test_store_down_is_one_line_naming_the_endpoint_and_nothing_half_moved[s3-seaweedfs]",
    "tests/test_s3_store.py::test_wrong_credentials_are_one_line_naming_the_endpoint[s3-seaweedfs]",
    "tests/test_s3_store.py::test_missing_bucket_is_one_line_naming_the_bucket[s3-seaweedfs]",
    "tests/test_s3_store.py::test_wrong_credentials_are_one_line_naming_the_endpoint[rest-seaweedfs]",
    # issue 25 item 6: the store dying between the ingest's branch and its rows (S3A + JDBC catalog)
    "tests/test_s3_store.py::test_store_dying_mid_ingest_is_one_line_naming_the_endpoint[s3-seaweedfs]",
    # keys holding ':' in a URL glob (the parsing is the catalog's business of neither backend: one run)
    "tests/test_s3_store.py::test_a_url_glob_over_keys_holding_a_colon_ingests_them_all[s3-seaweedfs]",
    # issue 26 item 4: the endpoint given the generic way (s3.endpoint / S3A keys) is the one store
    "tests/test_s3_store.py::test_the_endpoint_given_the_generic_way_is_the_one_store[s3-seaweedfs]",
]


def _env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The object-store runs' environment: ``environ`` (the background lane's: as the session began) or this
    process's, without any WAP_* variable."""
    s3.s3a_jars(Settings())  # make setup-s3 installed them (a clear error naming the fix otherwise)
    env = {k: v for k, v in (os.environ if environ is None else environ).items() if not k.startswith("WAP_")}
    env["PYSPARK_PYTHON"] = sys.executable
    return env


def _lifecycle_run(lane: Lane, params: dict[str, object]) -> None:
    """The lifecycle test's run, in the background lane (tests/helpers.py ``Lane``)."""
    pytest_on_backend(
        BOTH,  # a node id without a parameter runs on both backends
        "s3-seaweedfs,rest-seaweedfs",
        env=_env(lane.environ),
        tmp=lane.tmp("s3-lifecycle"),
        timeout=1500,
        run="object-store run",
        failed_on="SeaweedFS (S3 / REST catalog)",
        min_tests=2 * len(BOTH),
    )


# the object-store run only waits from this process: it runs in the background lane, beside the suite
BACKGROUND = {"test_lifecycle_on_seaweedfs_s3_and_its_iceberg_rest_catalog": _lifecycle_run}


def test_lifecycle_on_seaweedfs_s3_and_its_iceberg_rest_catalog(
    background: Callable[[float], object],
) -> None:
    background(1800)


def _start_failures(tmp: Path) -> BackendRun:
    return BackendRun(FAILURES, "s3-seaweedfs,rest-seaweedfs", env=_env(), tmp=tmp)


# started when the suite is collected (tests/conftest.py), collected by its test
EARLY_START = {"test_the_stores_failures_on_seaweedfs": _start_failures}


def test_the_stores_failures_on_seaweedfs(early_run: BackendRun | None) -> None:
    if early_run is None:
        pytest.skip("this test starts the object-store run itself (on the local-sqlite backend)")
    early_run.finish(
        timeout=1500,
        run="object-store failures run",
        failed_on="SeaweedFS (the store's failures)",
        min_tests=len(FAILURES),
    )


def test_a_restarted_store_gets_past_a_port_taken_while_it_was_down(tmp_path: Path) -> None:
    """CI s35: a SeaweedFS stopped and started again on its ports died ("address already in use") because a
    port of its own had been taken meanwhile. The test server picks ports outside the kernel's ephemeral range
    (tests/helpers.py ``free_ports``) and, when one is taken anyway, starts again with the server's own ports
    picked again, keeping the ones its clients know (S3, Iceberg REST)."""
    import socket

    from s3_server import SeaweedS3

    server = SeaweedS3(tmp_path / "weed").start()
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
        assert all(port < low for port in server.ports.values()), server.ports
        before = dict(server.ports)
        server.create_bucket("wap-kept")
        server.stop()
        with socket.socket() as squatter:  # a listener on the volume server's gRPC port while it is down
            squatter.bind(("127.0.0.1", before["volume_grpc"]))
            squatter.listen(1)
            server.start()
        assert server.ports["s3"] == before["s3"] and server.ports["iceberg"] == before["iceberg"]
        assert server.ports["volume_grpc"] != before["volume_grpc"]
        with server.fs().open_input_stream("wap-probe/probe") as inp:  # the data is still there
            assert inp.read() == b"ok"
        assert server.fs().get_file_info("wap-kept").type.name == "Directory"  # the bucket made before
    finally:
        server.stop()
