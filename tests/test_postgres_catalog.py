"""The same core against a real PostgreSQL catalog (the production set-up), not SQLite.

A PostgreSQL 15 server is started with initdb + pg_ctl in a temp dir on a free local port.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path
from typing import Iterator

import pytest

from helpers import refs, write_csv
from wap_core import Lakehouse, Settings, TableId
from wap_core.exceptions import RefusedError
from wap_core.ingest import ingest
from wap_core.publish import discard, publish

PG_BIN = Path(os.environ.get("WAP_PG_BIN", "/usr/lib/postgresql/15/bin"))
pytestmark = pytest.mark.postgres


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _as_pg_user(cmd: list[str]) -> list[str]:
    # initdb refuses to run as root: run the server as the 'postgres' system user.
    if os.geteuid() == 0:
        return ["runuser", "-u", "postgres", "--", *cmd]
    return cmd


@pytest.fixture(scope="module")
def postgres() -> Iterator[str]:
    if not (PG_BIN / "initdb").exists():
        pytest.fail(f"PostgreSQL server binaries not found in {PG_BIN} (make test installs postgresql-15; or set WAP_PG_BIN)")
    # not under pytest's tmp dir: that one is private to root, and the server runs as 'postgres'
    base = Path(tempfile.mkdtemp(prefix="wap-pg-"))
    data = base / "data"
    if os.geteuid() == 0:
        shutil.chown(base, "postgres", "postgres")
    port = _free_port()
    subprocess.run(_as_pg_user([str(PG_BIN / "initdb"), "-D", str(data), "-U", "wap", "--auth=trust", "-E", "UTF8"]), check=True, capture_output=True)
    subprocess.run(_as_pg_user([str(PG_BIN / "pg_ctl"), "-D", str(data), "-o", f"-p {port} -k {base} -c listen_addresses=127.0.0.1",
                                "-l", str(base / "log"), "-w", "start"]), check=True, capture_output=True)
    try:
        subprocess.run([str(PG_BIN / "createdb") if (PG_BIN / "createdb").exists() else "createdb", "-h", "127.0.0.1", "-p", str(port), "-U", "wap", "catalog"],
                       check=True, capture_output=True)
        yield f"postgresql+psycopg2://wap@127.0.0.1:{port}/catalog"
    finally:
        subprocess.run(_as_pg_user([str(PG_BIN / "pg_ctl"), "-D", str(data), "-m", "fast", "stop"]), capture_output=True)
        shutil.rmtree(base, ignore_errors=True)


def test_lifecycle_on_a_postgres_catalog(postgres: str, tmp_path: Path, spark_session: None) -> None:
    home = tmp_path / "lh"
    home.mkdir()
    (home / "checks.yml").write_text("pg.people:\n  checks:\n    - not_null: [name]\n")
    settings = Settings(home=home, catalog_uri=postgres, catalog_name="pgcat", user="pg-user", shuffle_partitions=2, ingest_roots=(tmp_path,))
    assert settings.jdbc_uri.startswith("jdbc:postgresql://127.0.0.1:")
    lh = Lakehouse(settings)
    t = TableId("pg", "people")
    r = ingest(lh, t, [write_csv(tmp_path / "a.csv", ["id", "name"], [(1, "ann"), (2, "bob")])], create=True)
    assert r.audit.status == "passed"
    publish(lh, t, r.branch)
    bad = ingest(lh, t, [write_csv(tmp_path / "b.csv", ["id", "name"], [(3, None)])], branch="bad")
    assert bad.audit.status == "failed"
    main = refs(lh, t)["main"]
    with pytest.raises(RefusedError):
        publish(lh, t, "bad")
    discard(lh, t, "bad", reason="null name")
    assert refs(lh, t) == {"main": main}
    # a second reader (fresh PyIceberg catalog) sees the same state; the journal lives in PostgreSQL
    fresh = Lakehouse(settings)
    assert refs(fresh, t) == {"main": main}
    assert [e.action for e in fresh.journal.history("pg.people")][:3] == ["discard", "publish", "audit"]
    import sqlalchemy

    with sqlalchemy.create_engine(postgres).connect() as conn:
        n = conn.execute(sqlalchemy.text("select count(*) from wap_journal where table_name = 'pg.people'")).scalar_one()
        kinds = conn.execute(sqlalchemy.text("select count(*) from iceberg_tables where catalog_name = 'pgcat'")).scalar_one()
    assert n >= 6 and kinds == 1
    assert lh.spark.table(lh.spark_name(t)).count() == 2
