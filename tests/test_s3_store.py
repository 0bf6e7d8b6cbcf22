"""The object store itself, on a real SeaweedFS: collected on the object-store backends only (tests/test_s3.py).

Nothing outside the bucket, gc deletes from the bucket (listed with PyArrow's S3 client, not wap_core's
word), rollback, credentials nowhere in output / journal / logs, and the store's failures (down, wrong
key, missing bucket) as one line naming the endpoint with main untouched and the journal complete.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import backend_env
from helpers import refs, write_csv
from s3_server import SeaweedS3

from wap_core import Lakehouse, TableId
from wap_core.identifiers import MAIN
from wap_core.lake import catalog as cat
from wap_core.workflow.gc import collect_garbage
from wap_core.workflow.ingest import ingest
from wap_core.workflow.publish import publish
from wap_core.workflow.rollback import rollback

ROOT = Path(__file__).resolve().parent.parent
SUITE = "demo.people:\n  checks:\n    - not_null: [name]\n"
HEADER = ["id", "name"]
T = TableId("demo", "people")


def _prefix(lh: Lakehouse) -> str:
    """``bucket/key-prefix`` of the lakehouse's warehouse (the table bucket of a REST catalog)."""
    return lh.settings.warehouse_uri.split("://", 1)[1].rstrip("/")


def _seed(lh: Lakehouse, tmp_path: Path, rows=((1, "ann"), (2, "bob"))) -> int:  # type: ignore[no-untyped-def]
    r = ingest(lh, T, [write_csv(tmp_path / "seed.csv", HEADER, list(rows))], create=True)
    publish(lh, T, r.branch)
    return r.snapshot_id


def _cli(lh: Lakehouse, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``python -m wap_core`` in a subprocess with the lakehouse's settings (and ``env`` on top)."""
    s = lh.settings
    full = {k: v for k, v in os.environ.items() if not k.startswith("WAP_")}
    full.update(
        WAP_HOME=str(s.home),
        WAP_CHECKS=str(s.checks_file),
        WAP_CATALOG_NAME=s.catalog_name,
        WAP_USER="cli-user",
        PYSPARK_PYTHON=sys.executable,
        **backend_env(s),
    )
    full.update(env)
    return subprocess.run(
        [sys.executable, "-m", "wap_core", *args],
        cwd=ROOT,
        env=full,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _one_line_naming(proc: subprocess.CompletedProcess[str], endpoint: str, fragment: str) -> None:
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode in (1, 2), (proc.returncode, proc.stdout, proc.stderr)
    assert len(lines) == 1, proc.stderr  # one line: no Java stack, no Python traceback
    assert lines[0].startswith("error: ") and endpoint in lines[0] and fragment in lines[0], lines[0]
    assert "Traceback" not in proc.stderr and "\tat " not in proc.stderr and "Py4J" not in proc.stderr


# ----- the bucket holds everything --------------------------------------------------------------------
def test_nothing_is_written_outside_the_bucket(make_lakehouse, backend, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    lh = make_lakehouse(SUITE)
    _seed(lh, tmp_path)
    r = ingest(lh, T, [write_csv(tmp_path / "b.csv", HEADER, [(3, "cy")])], branch="next")
    publish(lh, T, "next")
    assert {x.id for x in lh.spark.table(lh.spark_name(T)).select("id").collect()} == {1, 2, 3}
    stored = backend.s3.list_files(_prefix(lh))
    data = [p for p in stored if p.endswith(".parquet")]
    meta = [p for p in stored if p.endswith(".metadata.json")]
    assert len(data) >= 2 and meta, stored  # both batches' data and the table's metadata are in the bucket
    assert all(f.file.file_path.startswith(("s3a://", "s3://")) for f in lh.table(T).scan().plan_files())
    home = lh.settings.home
    local_warehouse = home / "warehouse"
    assert not local_warehouse.exists() or not any(
        local_warehouse.rglob("*")
    )  # the local warehouse stays empty
    written = sorted(str(p.relative_to(home)) for p in home.rglob("*") if p.is_file())
    # only the catalog/journal database (SQLite), checks file and the default folders: no data, no metadata
    assert not [p for p in written if p.endswith((".parquet", ".avro", ".metadata.json"))], written
    if backend.name == "rest-seaweedfs":  # the catalog is the server's; the journal has its own database
        assert "journal.db" in written and "catalog.db" not in written, written
        assert lh.journal.history(str(T))[0].snapshot_after == r.snapshot_id


def test_gc_deletes_the_expired_files_from_the_bucket(make_lakehouse, backend, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    lh = make_lakehouse(SUITE)
    _seed(lh, tmp_path)
    stale = ingest(lh, T, [write_csv(tmp_path / "s.csv", HEADER, [(10, "old")])], branch="stale").snapshot_id
    with lh.table(T).transaction() as tx:
        tx.set_properties({"wap.branch-ttl": "1s"})
    time.sleep(1.2)
    stale_files = {f.file.file_path for f in lh.table(T).scan(snapshot_id=stale).plan_files()}
    main_files = {f.file.file_path for f in lh.table(T).scan().plan_files()}
    stale_only = {p.split("://", 1)[1] for p in stale_files - main_files}
    before = set(backend.s3.list_files(_prefix(lh)))
    assert stale_only and stale_only <= before  # the stale batch's data files are objects in the bucket
    res = collect_garbage(lh, older_than="0s")
    assert [b.branch for b in res.tables[0].expired_branches] == ["stale"]
    after = set(backend.s3.list_files(_prefix(lh)))
    assert not (stale_only & after), stale_only & after  # listed again: gone from the bucket
    assert {p.split("://", 1)[1] for p in main_files} <= after  # main's files stay
    assert {x.id for x in lh.spark.table(lh.spark_name(T)).select("id").collect()} == {1, 2}


def test_rollback_moves_main_back_on_the_store(make_lakehouse, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    lh = make_lakehouse(SUITE)
    first = _seed(lh, tmp_path)
    second = ingest(lh, T, [write_csv(tmp_path / "b.csv", HEADER, [(3, "cy")])], branch="b2")
    publish(lh, T, "b2")
    assert refs(lh, T)[MAIN] == second.snapshot_id
    res = rollback(lh, T, first, reason="bad vendor file", user="admin")
    assert (res.main_before, res.main_after) == (second.snapshot_id, first)
    assert refs(lh, T)[MAIN] == first
    assert {x.id for x in lh.spark.table(lh.spark_name(T)).select("id").collect()} == {1, 2}
    assert not lh.journal.pending_intents(str(T))
    assert lh.journal.history(str(T), action="rollback")[0].outcome == "rolled_back"


# ----- credentials stay secret --------------------------------------------------------------------------
def test_credentials_never_appear_in_cli_output_journal_or_logs(
    make_lakehouse, backend, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    lh = make_lakehouse(SUITE)
    secret, key = lh.settings.s3_secret_key, lh.settings.s3_access_key
    assert secret and key and secret not in repr(lh.settings) and key not in repr(lh.settings)
    src = write_csv(tmp_path / "c.csv", HEADER, [(1, "ann"), (2, None)])
    wrong = {"WAP_S3_SECRET_KEY": secret + "-wrong"}
    if backend.name == "rest-seaweedfs":  # the REST catalog's own credential is refused first
        wrong["WAP_CATALOG_PROPERTIES"] = f"credential={key}:{secret}-wrong"
    runs = [
        _cli(
            lh, "--debug", "ingest", str(T), src, "--create", "--branch", "b1"
        ),  # audit fails: exit 1, logs on
        _cli(lh, "--debug", "history", "--json"),
        _cli(lh, "--debug", "tables", **wrong),  # refused: the error path, with --debug's traceback
    ]
    assert runs[0].returncode == 1 and "b1" in runs[0].stdout, runs[0].stderr
    assert runs[-1].returncode != 0
    for proc in runs:
        for text in (proc.stdout, proc.stderr):
            assert secret not in text and key not in text
    journal_db = lh.settings.home / ("journal.db" if backend.name == "rest-seaweedfs" else "catalog.db")
    dump = "\n".join(sqlite3.connect(journal_db).iterdump())
    assert "b1" in dump and secret not in dump and key not in dump
    logs = [p for p in lh.settings.home.rglob("*") if p.is_file() and p.suffix in (".log", ".jsonl", ".txt")]
    for p in logs:
        text = p.read_text(errors="replace")
        assert secret not in text and key not in text, p


# ----- failures of the store ----------------------------------------------------------------------------
@pytest.fixture
def own_store(tmp_path: Path) -> Iterator[SeaweedS3]:
    """A SeaweedFS of this test's own (it gets stopped), with bucket :func:`_own_bucket`."""
    server = SeaweedS3(tmp_path / "own-seaweedfs").start()
    try:
        server.create_bucket(_own_bucket(server))
        yield server
    finally:
        server.stop()


def _own_bucket(server: SeaweedS3) -> str:
    """A bucket name of its own: Hadoop caches one S3A client per bucket name for the process."""
    return f"wap-own-{server.ports['s3']}"


def _on(make_lakehouse, backend, server: SeaweedS3, **kw: object) -> Lakehouse:  # type: ignore[no-untyped-def]
    """A lakehouse of ``backend``'s kind on ``server``."""
    own = {
        "s3_endpoint": server.endpoint,
        "s3_access_key": server.access_key,
        "s3_secret_key": server.secret_key,
    }
    if backend.name == "rest-seaweedfs":
        bucket = server.create_table_bucket(f"wapt-own-{server.ports['s3']}")
        own.update(
            catalog_uri="rest+" + server.rest_uri,
            warehouse=f"s3://{bucket}",
            catalog_properties=(("credential", f"{server.access_key}:{server.secret_key}"),),
        )
    else:
        own["warehouse"] = f"s3a://{_own_bucket(server)}/own"
    return make_lakehouse(SUITE, **{**own, **kw})


def test_store_down_is_one_line_naming_the_endpoint_and_nothing_half_moved(  # type: ignore[no-untyped-def]
    make_lakehouse, backend, own_store: SeaweedS3, tmp_path: Path
) -> None:
    lh = _on(make_lakehouse, backend, own_store)
    main = _seed(lh, tmp_path)
    ready = ingest(lh, T, [write_csv(tmp_path / "r.csv", HEADER, [(3, "cy")])], branch="ready")
    before = refs(lh, T)
    own_store.stop()
    try:
        for args in (("publish", str(T), "ready"), ("tables",)):
            _one_line_naming(_cli(lh, *args), own_store.endpoint, "unreachable")
    finally:
        own_store.start()
    assert refs(lh, T) == before and before[MAIN] == main and before["ready"] == ready.snapshot_id
    assert not lh.journal.pending_intents(str(T))  # the refused publish left no intent open
    publish(lh, T, "ready")  # the store is back: the same publish goes through
    assert refs(lh, T)[MAIN] == ready.snapshot_id


def test_wrong_credentials_are_one_line_naming_the_endpoint(  # type: ignore[no-untyped-def]
    make_lakehouse, backend, own_store: SeaweedS3, tmp_path: Path
) -> None:
    lh = _on(make_lakehouse, backend, own_store)
    _seed(lh, tmp_path)
    before = refs(lh, T)
    wrong = own_store.secret_key[::-1]
    endpoint = own_store.rest_uri if backend.name == "rest-seaweedfs" else own_store.endpoint
    for args in (("tables",), ("ingest", str(T), write_csv(tmp_path / "w.csv", HEADER, [(4, "di")]))):
        proc = _cli(
            lh,
            *args,
            WAP_S3_SECRET_KEY=wrong,
            **(
                {"WAP_CATALOG_PROPERTIES": f"credential={own_store.access_key}:{wrong}"}
                if backend.name == "rest-seaweedfs"
                else {}
            ),
        )
        _one_line_naming(proc, endpoint, "access denied")
        assert wrong not in proc.stderr and own_store.secret_key not in proc.stderr
    assert refs(lh, T) == before and not lh.journal.pending_intents(str(T))


def test_missing_bucket_is_one_line_naming_the_bucket(
    make_lakehouse, backend, own_store: SeaweedS3, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    if backend.name == "rest-seaweedfs":
        lh = _on(make_lakehouse, backend, own_store, warehouse="s3://wapt-missing")
        fragment = "wapt-missing"
    else:
        lh = _on(make_lakehouse, backend, own_store, warehouse="s3a://wap-missing-bucket/wh")
        fragment = "bucket 'wap-missing-bucket' does not exist"
    src = write_csv(tmp_path / "m.csv", HEADER, [(1, "ann")])
    proc = _cli(lh, "ingest", str(T), src, "--create")
    _one_line_naming(proc, own_store.endpoint if backend.name != "rest-seaweedfs" else "", fragment)
    assert proc.stdout == ""
    if backend.name != "rest-seaweedfs":
        assert not cat.table_exists(lh.catalog, T)  # no table left behind pointing at nothing
