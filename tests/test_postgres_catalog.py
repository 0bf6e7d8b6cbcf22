"""The same core against a real PostgreSQL catalog (the production set-up), not SQLite.

A PostgreSQL 15 server is started with initdb + pg_ctl in a temp dir on a free local port
(the session-scoped ``postgres`` fixture in conftest.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import refs, write_csv

from wap_core import Lakehouse, Settings, TableId
from wap_core.exceptions import RefusedError
from wap_core.workflow.discard import discard
from wap_core.workflow.ingest import ingest
from wap_core.workflow.publish import publish

pytestmark = pytest.mark.postgres


def test_lifecycle_on_a_postgres_catalog(postgres: str, tmp_path: Path, spark_session: None) -> None:
    home = tmp_path / "lh"
    home.mkdir()
    (home / "checks.yml").write_text("pg.people:\n  checks:\n    - not_null: [name]\n")
    settings = Settings(
        home=home,
        catalog_uri=postgres,
        catalog_name="pgcat",
        user="pg-user",
        shuffle_partitions=2,
        ingest_roots=(tmp_path,),
    )
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
        n = conn.execute(
            sqlalchemy.text("select count(*) from wap_journal where table_name = 'pg.people'")
        ).scalar_one()
        kinds = conn.execute(
            sqlalchemy.text("select count(*) from iceberg_tables where catalog_name = 'pgcat'")
        ).scalar_one()
    assert n >= 6 and kinds == 1
    assert lh.spark.table(lh.spark_name(t)).count() == 2
