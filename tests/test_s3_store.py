"""The object store itself, on a real SeaweedFS: collected on the object-store backends only (tests/test_s3.py).

Nothing outside the bucket, gc deletes from the bucket (listed with PyArrow's S3 client, not wap_core's
word), rollback, credentials nowhere in output / journal / logs, ingest sources as s3a:// / s3:// URLs
under an object-store ingest root (and a regression table of URLs refused), and the store's failures
(down, down in the middle of a publish, wrong key, missing bucket) as one line naming the endpoint,
in the CLI and on a console page, with main untouched and the journal complete.
"""

from __future__ import annotations

import os
import re
import sqlite3
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import S3_BUCKET, backend_env
from helpers import refs, write_csv
from s3_server import SeaweedS3

from wap_core import Lakehouse, TableId
from wap_core.analysis import explore, sandbox
from wap_core.exceptions import PathNotAllowedError, SourceError
from wap_core.identifiers import MAIN
from wap_core.lake import catalog as cat
from wap_core.security.paths import SourcePolicy
from wap_core.states import Action, Outcome
from wap_core.values import to_jsonable
from wap_core.workflow.gc import collect_garbage
from wap_core.workflow.ingest import ingest
from wap_core.workflow.publish import publish
from wap_core.workflow.reconcile import reconcile
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


def _cli_env(lh: Lakehouse, **env: str) -> dict[str, str]:
    """The environment of a CLI run on the lakehouse's settings (and ``env`` on top)."""
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
    return full


def _cli(lh: Lakehouse, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``python -m wap_core`` in a subprocess with the lakehouse's settings (and ``env`` on top)."""
    return subprocess.run(
        [sys.executable, "-m", "wap_core", *args],
        cwd=ROOT,
        env=_cli_env(lh, **env),
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


def test_the_sql_box_worker_reads_the_table_on_the_store(make_lakehouse, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A SQL-box worker process (its own Spark driver) reaches the store and the catalog with the console's
    settings (S3A jars and keys, the REST catalog's credential), then ends with its JVM when told to."""
    lh = make_lakehouse(SUITE)
    first = _seed(lh, tmp_path)
    handle = explore.submit_query(
        lh, T, first, "SELECT count(*) AS n, max(name) AS top FROM ref_view", user="ann"
    )
    assert isinstance(handle, sandbox.SandboxQuery)
    got = handle.result(300)
    assert (got["n"].tolist(), got["top"].tolist()) == ([2], ["bob"])
    pid = handle.worker_pid
    assert pid is not None and sandbox.group_members(pid)
    sandbox.close_all()
    assert sandbox.group_members(pid) == []


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


# ----- ingest sources on the object store ------------------------------------------------------------------
def _put(server: SeaweedS3, path: str, rows: list[tuple[int, str | None]]) -> str:
    """Upload a CSV of ``rows`` to ``bucket/key`` (PyArrow's S3 client, not wap_core's)."""
    body = "\n".join([",".join(HEADER)] + [f"{i},{'' if n is None else n}" for i, n in rows]) + "\n"
    with server.fs().open_output_stream(path) as out:
        out.write(body.encode())
    return path


def test_a_url_source_under_an_object_store_root_is_ingested_confined_and_audited(  # type: ignore[no-untyped-def]
    make_lakehouse, backend, tmp_path: Path
) -> None:
    land = f"landing-{uuid.uuid4().hex[:8]}"
    root = f"s3a://{S3_BUCKET}/{land}/"
    lh = make_lakehouse(SUITE, ingest_roots=(tmp_path, root))
    _put(backend.s3, f"{S3_BUCKET}/{land}/in/people.csv", [(1, "ann"), (2, "bob")])
    _put(backend.s3, f"{S3_BUCKET}/{land}/more/a.csv", [(3, "cy")])
    _put(backend.s3, f"{S3_BUCKET}/{land}/more/b.csv", [(4, None)])  # fails not_null
    _put(backend.s3, f"{S3_BUCKET}/{land}/more/deeper/c.csv", [(5, "not matched: * stops at /")])
    # the console's path: the default policy, confined to the roots; s3:// names the same object as s3a://
    first = ingest(lh, T, [f"s3://{S3_BUCKET}/{land}/in/people.csv"], create=True, branch="from_s3")
    want = f"s3a://{S3_BUCKET}/{land}/in/people.csv"
    assert first.rows_written == 2 and first.audit.status == "passed", to_jsonable(first.audit)
    assert first.sources == [want]  # the provenance is the object's URL, not the local copy
    assert cat.summary_get(lh.table(T).snapshot_by_id(first.snapshot_id), "wap.source") == want
    entry = lh.journal.history(str(T), action=Action.INGEST)[0]
    assert entry.outcome == Outcome.WRITTEN and entry.details["sources"] == [want], entry
    audit = lh.journal.history(str(T), action=Action.AUDIT)[0]
    assert audit.branch == "from_s3" and audit.snapshot_after == first.snapshot_id
    # a glob: listed from the store, a wildcard never crossing '/', every match confined again
    batch = ingest(lh, T, [f"s3a://{S3_BUCKET}/{land}/more/*.csv"], branch="globbed")
    assert batch.sources == [f"s3a://{S3_BUCKET}/{land}/more/{n}.csv" for n in "ab"]
    assert batch.rows_written == 2 and batch.audit.status == "failed"  # b.csv's NULL name, audited
    # local roots still work next to the object-store root, under the same confined policy
    local = ingest(lh, T, [write_csv(tmp_path / "local.csv", HEADER, [(6, "di")])], branch="local")
    assert local.rows_written == 1 and local.sources == [str((tmp_path / "local.csv").resolve())]
    publish(lh, T, "from_s3")
    assert {x.id for x in lh.spark.table(lh.spark_name(T)).select("id").collect()} == {1, 2}
    key, secret = lh.settings.s3_access_key, lh.settings.s3_secret_key
    assert key and secret
    dump = repr([e.details for e in lh.journal.history(str(T))])
    assert key not in dump and secret not in dump


# One row per URL a confined ingest must refuse, whatever is stored there (every object exists).
REFUSED_URLS = {
    "outside the root's prefix": "s3a://{bucket}/other-{n}/x.csv",
    "sibling prefix": "s3a://{bucket}/landing-{n}-evil/x.csv",
    "dot-dot segment": "s3a://{bucket}/landing-{n}/../other-{n}/x.csv",
    "percent-encoded dots": "s3a://{bucket}/landing-{n}/%2e%2e/other-{n}/x.csv",
    "empty segment": "s3a://{bucket}/landing-{n}//x.csv",
    "dot segment": "s3a://{bucket}/landing-{n}/./x.csv",
    "another bucket": "s3a://{other}/landing-{n}/x.csv",
    "credentials in the URL": "s3a://{key}:{secret}@{bucket}/landing-{n}/x.csv",
    "glob widening the prefix": "s3a://{bucket}/landing-{n}*/x.csv",
    "http scheme": "{endpoint}/{bucket}/landing-{n}/x.csv",
    "file scheme": "file://{local}",
    "s3n scheme": "s3n://{bucket}/landing-{n}/x.csv",
}


@pytest.mark.parametrize("row", sorted(REFUSED_URLS))
def test_url_sources_outside_the_roots_are_refused(  # type: ignore[no-untyped-def]
    make_lakehouse, backend, tmp_path: Path, row: str
) -> None:
    server: SeaweedS3 = backend.s3
    n = uuid.uuid4().hex[:8]
    other = server.create_bucket(f"wap-other-{n}")
    for path in (f"landing-{n}/x.csv", f"other-{n}/x.csv", f"landing-{n}-evil/x.csv"):
        _put(server, f"{S3_BUCKET}/{path}", [(1, "ann")])
    _put(server, f"{other}/landing-{n}/x.csv", [(1, "ann")])
    local = write_csv(tmp_path / "in" / "x.csv", HEADER, [(1, "ann")])  # under a local root, yet file://
    lh = make_lakehouse(SUITE, ingest_roots=(tmp_path, f"s3a://{S3_BUCKET}/landing-{n}"))
    url = REFUSED_URLS[row].format(
        bucket=S3_BUCKET,
        other=other,
        n=n,
        endpoint=server.endpoint,
        local=local,
        key=server.access_key,
        secret=server.secret_key,
    )
    ingest(lh, T, [f"s3a://{S3_BUCKET}/landing-{n}/x.csv"], create=True, branch="allowed")  # the root works
    before = refs(lh, T)
    with pytest.raises(PathNotAllowedError) as info:
        ingest(lh, T, [url], branch="refused")  # the console's (confined) policy
    message = str(info.value)
    assert "outside the allowed ingest roots" in message and f"s3a://{S3_BUCKET}/landing-{n}" in message
    assert server.secret_key not in message and server.access_key not in message
    assert refs(lh, T) == before and "refused" not in before  # nothing written
    entry = lh.journal.history(str(T), action=Action.INGEST)[0]
    assert entry.outcome == Outcome.ERROR and entry.branch == "refused"  # the attempt is journaled
    assert server.secret_key not in repr(entry) and server.access_key not in repr(entry)
    # the CLI's policy (ANY) reads any well-formed s3 URL the credentials can read, never a malformed one
    readable = {"outside the root's prefix": 1, "sibling prefix": 1, "another bucket": 1}
    readable["glob widening the prefix"] = 2  # landing-n/x.csv and landing-n-evil/x.csv
    if row in readable:
        assert (
            ingest(lh, T, [url], branch="any", source_policy=SourcePolicy.ANY).rows_written == readable[row]
        )
    else:
        with pytest.raises(SourceError, match=r"^source ") as anyinfo:
            ingest(lh, T, [url], branch="any", source_policy=SourcePolicy.ANY)
        assert server.secret_key not in str(anyinfo.value)


def test_a_url_glob_over_keys_holding_a_colon_ingests_them_all(  # type: ignore[no-untyped-def]
    make_lakehouse, backend, tmp_path: Path
) -> None:
    """Issue 25 item 6: ``:`` is legal in a key; one match holding it no longer fails the whole glob as "outside
    the allowed ingest roots", and such a key is ingested alone too. A key the structure does refuse fails the
    glob naming that key, never as outside the roots."""
    land = f"landing-{uuid.uuid4().hex[:8]}"
    lh = make_lakehouse(SUITE, ingest_roots=(tmp_path, f"s3a://{S3_BUCKET}/{land}"))
    stamped = f"s3a://{S3_BUCKET}/{land}/c/2024-01-01T00:00:00.csv"
    _put(backend.s3, f"{S3_BUCKET}/{land}/c/2024-01-01T00:00:00.csv", [(1, "ann")])
    _put(backend.s3, f"{S3_BUCKET}/{land}/c/plain.csv", [(2, "bob")])
    batch = ingest(lh, T, [f"s3a://{S3_BUCKET}/{land}/c/*.csv"], create=True, branch="globbed")
    assert batch.rows_written == 2 and batch.sources == [stamped, f"s3a://{S3_BUCKET}/{land}/c/plain.csv"]
    assert ingest(lh, T, [stamped], branch="alone").sources == [stamped]
    _put(backend.s3, f"{S3_BUCKET}/{land}/odd/x{{1}}.csv", [(3, "cy")])
    with pytest.raises(
        SourceError, match=r"matches an object that cannot be read as a source: .*x\{1\}"
    ) as info:
        ingest(lh, T, [f"s3a://{S3_BUCKET}/{land}/odd/*.csv"], branch="odd")
    assert "outside the allowed ingest roots" not in str(info.value)


def test_a_url_root_must_be_readable_at_start(make_lakehouse, backend, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    lh = make_lakehouse(SUITE)
    endpoint = backend.s3.endpoint
    for root, fragment in (
        (
            "s3a://wap-no-such-bucket/landing",
            f"names bucket 'wap-no-such-bucket', which does not exist on {endpoint}",
        ),
        (f"s3a://{S3_BUCKET}/landing", None),
    ):
        proc = _cli(lh, "tables", WAP_INGEST_ROOTS=f"{tmp_path}:{root}")
        if fragment is None:
            assert proc.returncode == 0, proc.stderr
            continue
        _one_line_naming(proc, root, fragment)
        assert "the ingest root (WAP_INGEST_ROOTS)" in proc.stderr
    wrong = _cli(
        lh, "tables", WAP_INGEST_ROOTS=f"s3a://{S3_BUCKET}/landing", WAP_S3_SECRET_KEY="wrong-secret-1234"
    )
    _one_line_naming(wrong, f"s3a://{S3_BUCKET}/landing", "access denied")
    assert "wrong-secret-1234" not in wrong.stderr


def test_the_endpoint_given_the_generic_way_is_the_one_store(  # type: ignore[no-untyped-def]
    make_lakehouse, backend, tmp_path: Path
) -> None:
    """Issue 26 item 4: ``s3.endpoint`` in WAP_CATALOG_PROPERTIES with the S3A keys in WAP_SPARK_CONF (the way
    before WAP_S3_*) names the store everywhere: the start-up probe of an ingest root, PyArrow's read of a URL
    source and Spark's write (main's start-up check asked AWS S3 instead); a different WAP_S3_ENDPOINT next to
    it is refused in one line naming the setting to use."""
    if backend.name != "s3-seaweedfs":
        pytest.skip("the generic keys of a JDBC catalog with an s3a:// warehouse")
    server, land = backend.s3, f"generic-{uuid.uuid4().hex[:8]}"
    lh = make_lakehouse(SUITE)
    _put(server, f"{S3_BUCKET}/{land}/people.csv", [(1, "ann"), (2, "bob")])
    generic = {
        "WAP_S3_ENDPOINT": "",  # empty: unset
        "WAP_S3_ACCESS_KEY": "",
        "WAP_S3_SECRET_KEY": "",
        "WAP_CATALOG_PROPERTIES": f"s3.endpoint={server.endpoint} s3.access-key-id={server.access_key} "
        f"s3.secret-access-key={server.secret_key}",
        "WAP_SPARK_CONF": f"spark.hadoop.fs.s3a.endpoint={server.endpoint} "
        f"spark.hadoop.fs.s3a.access.key={server.access_key} spark.hadoop.fs.s3a.secret.key={server.secret_key} "
        "spark.hadoop.fs.s3a.path.style.access=true",
        "WAP_INGEST_ROOTS": f"s3a://{S3_BUCKET}/{land}",
    }
    source = f"s3a://{S3_BUCKET}/{land}/people.csv"
    proc = _cli(lh, "ingest", str(T), source, "--create", "--branch", "generic", "--json", **generic)
    assert proc.returncode == 0, proc.stderr
    assert refs(lh, T).get("generic") is not None
    mixed = _cli(lh, "tables", **{**generic, "WAP_S3_ENDPOINT": "http://127.0.0.1:9"})
    lines = [ln for ln in mixed.stderr.splitlines() if ln.strip()]
    assert mixed.returncode == 2 and len(lines) == 1, mixed.stderr
    assert (
        "the S3 endpoint is given differently" in lines[0] and "give it once, in WAP_S3_ENDPOINT" in lines[0]
    )


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


def _console_errors(lh: Lakehouse) -> list[str]:
    """The error boxes of the console's first page (Overview, under AppTest), as read on screen."""
    from streamlit.testing.v1 import AppTest

    with pytest.MonkeyPatch.context() as mp:
        for k in [k for k in os.environ if k.startswith("WAP_")]:
            mp.delenv(k)
        for k, v in _cli_env(lh, WAP_SPARK_EAGER="0").items():
            mp.setenv(k, v)
        at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=180)
        at.run()
    assert not at.exception, [e.value for e in at.exception]  # no traceback on the page
    # the console escapes text for Markdown (``http\://``, a word joiner after ``//``): read it back plain
    return [re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", str(e.value)).replace("\u2060", "") for e in at.error]


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
        # the console's pages show the same one line (pages/_common.py, wap_core.lake.errors.store_failure)
        shown = _console_errors(lh)
        assert f"object store {own_store.endpoint}: unreachable or unavailable" in shown, shown
    finally:
        own_store.start()
    assert refs(lh, T) == before and before[MAIN] == main and before["ready"] == ready.snapshot_id
    assert not lh.journal.pending_intents(str(T))  # the refused publish left no intent open
    publish(lh, T, "ready")  # the store is back: the same publish goes through
    assert refs(lh, T)[MAIN] == ready.snapshot_id

    # down in the middle of a publish: its intent journaled, the store stops before the ref move commits
    mid = ingest(lh, T, [write_csv(tmp_path / "m.csv", HEADER, [(4, "di")])], branch="mid")
    main_before = refs(lh, T)[MAIN]
    proc = subprocess.Popen(
        [sys.executable, "-m", "wap_core", "publish", str(T), "mid"],
        cwd=ROOT,
        env=_cli_env(lh, WAP_PAUSE="after_publish_batch_intents=15"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 240
        while not lh.journal.pending_intents(str(T)):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.2)
        intent = lh.journal.pending_intents(str(T))[0]
        assert (intent.action, intent.branch, intent.expected_before) == (Action.PUBLISH, "mid", main_before)
        own_store.stop()  # the publish's commit now meets a store that is gone
        out, err = proc.communicate(timeout=300)
        # its outcome could not be read from a store that is down: the intent waits for reconciliation
        assert [i.id for i in lh.journal.pending_intents(str(T))] == [intent.id]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        own_store.start()
    # one line for the error, naming the endpoint; before it at most the notice that the outcome is left to
    # reconciliation (one line too): no Python or Java stack
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert proc.returncode == 2 and lines, (proc.returncode, out, err)
    _one_line_naming(
        subprocess.CompletedProcess(proc.args, 2, out, lines[-1]), own_store.endpoint, "unreachable"
    )
    assert lines[:-1] in ([], [f"could not record the outcome of intent {intent.id}; reconciliation will"]), (
        err
    )
    assert "Traceback" not in err and "\tat " not in err and "Py4J" not in err
    after = refs(lh, T)  # read back with the store up again: main before, never in between
    assert after[MAIN] == main_before and after["mid"] == mid.snapshot_id, after
    reconcile(lh)  # the store is back: the pending intent is settled (or already was, by the console's tick)
    assert not lh.journal.pending_intents(str(T))
    rows = [e for e in lh.journal.history(str(T)) if e.intent_id == intent.id]
    assert len(rows) == 1 and rows[0].outcome != Outcome.PUBLISHED and rows[0].snapshot_after is None, rows
    publish(lh, T, "mid")  # the journal is complete and the branch intact: the publish goes through
    assert refs(lh, T)[MAIN] == mid.snapshot_id


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


def test_store_dying_mid_ingest_is_one_line_naming_the_endpoint(  # type: ignore[no-untyped-def]
    make_lakehouse, backend, own_store: SeaweedS3, tmp_path: Path
) -> None:
    """Issue 25 item 6: the store stops after the ingest created its branch, before the rows are written: the
    CLI prints the same one line as for a store down at start (no Java stack, no TABLE_OR_VIEW_NOT_FOUND of the
    branch), exit 2; main untouched, and the journal settles once the store is back."""
    lh = _on(make_lakehouse, backend, own_store)
    main = _seed(lh, tmp_path)
    src = write_csv(tmp_path / "k.csv", HEADER, [(3, "cy")])
    proc = subprocess.Popen(
        [sys.executable, "-m", "wap_core", "ingest", str(T), src, "--branch", "kill_ingest"],
        cwd=ROOT,
        env=_cli_env(lh, WAP_PAUSE="after_create_branch=30"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 300
        while "kill_ingest" not in refs(lh, T):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.3)
        own_store.stop()  # the write now meets a store that is gone
        out, err = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        own_store.start()
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert proc.returncode == 2 and lines, (proc.returncode, out, err)
    assert lines[-1] == f"error: object store {own_store.endpoint}: unreachable or unavailable", err
    # before it at most the one-line notices of what is left to reconciliation: no Python or Java stack
    notices = (
        "could not remove branch kill_ingest of demo.people during cleanup",
        "could not record the outcome",
    )
    assert all(ln.startswith(notices) for ln in lines[:-1]), err
    assert "Traceback" not in err and "\tat " not in err and "Caused by" not in err and "NOT_FOUND" not in err
    reconcile(lh)  # the store is back: the ingest's intent is settled, main never moved
    assert not lh.journal.pending_intents(str(T)) and refs(lh, T)[MAIN] == main
