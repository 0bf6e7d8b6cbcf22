"""All tables or none: the multi-table pointer swap (wap_core.lake.multitable) on real JDBC catalogs.

PyIceberg only (no Spark): real SQLite and a real PostgreSQL 15 catalog database, real Iceberg metadata
and data files. What is proved: every pointer moves in one commit; one pointer that moved since it was
loaded fails the whole commit (nothing moves, the loser is named); two batches racing over a shared
table: one wins; a process killed after the metadata files are written or inside the transaction moves
nothing; a reader of all pointers in one transaction never sees a mixed state.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from conftest import create_pg_database, make_settings
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table import StaticTable, Table
from sqlalchemy import text

from wap_core.identifiers import TableId
from wap_core.lake import catalog as cat
from wap_core.lake.multitable import (
    Atomicity,
    MultiTableConflictError,
    atomicity,
    commit_tables,
    fast_forward,
)

TABLES = [TableId("b", n) for n in ("airports", "flights", "planes", "weather")]
SCHEMA = pa.schema([pa.field("round", pa.int64())])


@pytest.fixture(params=["sqlite", "postgres"], scope="module")
def catalog_uri(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path_factory.mktemp('mt') / 'catalog.db'}"
    return create_pg_database(request.getfixturevalue("postgres"), f"mt_{os.getpid()}")


@pytest.fixture(scope="module")
def catalog(catalog_uri: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SqlCatalog]:
    home = tmp_path_factory.mktemp("mthome")
    c = cat.open_catalog(make_settings(home, catalog_uri=catalog_uri, warehouse=(home / "wh").as_uri()))
    assert isinstance(c, SqlCatalog)
    c.create_namespace("b")
    for t in TABLES:
        c.create_table(t.tuple, schema=SCHEMA).append(pa.table({"round": [0]}, schema=SCHEMA))
    yield c
    c.engine.dispose()


def pointers(c: SqlCatalog) -> dict[str, str]:
    """Every table's metadata location, read in ONE transaction."""
    with c.engine.connect() as conn:
        rows = conn.execute(
            text("SELECT table_name, metadata_location FROM iceberg_tables WHERE catalog_name = :c"),
            {"c": c.name},
        ).all()
    return {r[0]: r[1] for r in rows}


def stage(c: SqlCatalog, tables: list[TableId], branch: str, value: int) -> dict[TableId, int]:
    """Write one row ``value`` on branch ``branch`` of each table (forked from main): the branch heads."""
    heads = {}
    for t in tables:
        tbl = c.load_table(t.tuple)
        main = tbl.metadata.refs["main"].snapshot_id
        tbl.manage_snapshots().create_branch(main, branch).commit()
        tbl = c.load_table(t.tuple)
        tbl.append(pa.table({"round": [value]}, schema=SCHEMA), branch=branch)
        heads[t] = c.load_table(t.tuple).metadata.refs[branch].snapshot_id
    return heads


def publish(c: SqlCatalog, heads: dict[TableId, int], branch: str, **hooks: Callable[[], None]) -> None:
    commits = [
        fast_forward(t, c.load_table(t.tuple), to=h, branch=branch, tag=f"batch-{branch}")
        for t, h in heads.items()
    ]
    commit_tables(c, commits, **hooks)


def main_of(tbl: Table) -> int:
    return tbl.metadata.refs["main"].snapshot_id


def test_every_main_moves_in_one_commit_with_the_batch_tag(catalog: SqlCatalog) -> None:
    assert atomicity(catalog) is Atomicity.ATOMIC
    heads = stage(catalog, TABLES[:3], "ok1", 1)
    publish(catalog, heads, "ok1")
    for t, head in heads.items():
        tbl = catalog.load_table(t.tuple)
        assert main_of(tbl) == head
        assert "ok1" not in tbl.metadata.refs
        assert tbl.metadata.refs["batch-ok1"].snapshot_id == head
        assert sorted(tbl.scan().to_arrow().column("round").to_pylist()) == [0, 1]


def test_one_moved_pointer_fails_the_whole_batch_and_names_it(catalog: SqlCatalog) -> None:
    heads = stage(catalog, TABLES[:3], "lose1", 2)
    commits = [fast_forward(t, catalog.load_table(t.tuple), to=h, branch="lose1") for t, h in heads.items()]
    catalog.load_table(TABLES[1].tuple).append(
        pa.table({"round": [99]}, schema=SCHEMA)
    )  # flights' main moves
    before = pointers(catalog)
    with pytest.raises(MultiTableConflictError) as err:
        commit_tables(catalog, commits)
    assert err.value.table == TABLES[1]
    assert "b.flights" in str(err.value)
    assert pointers(catalog) == before  # airports and planes did not move either


def test_two_batches_racing_over_a_shared_table_one_wins(catalog: SqlCatalog) -> None:
    a = stage(catalog, [TABLES[0], TABLES[1]], "race_a", 3)
    b = stage(catalog, [TABLES[1], TABLES[2]], "race_b", 4)
    ca = [fast_forward(t, catalog.load_table(t.tuple), to=h, branch="race_a") for t, h in a.items()]
    cb = [fast_forward(t, catalog.load_table(t.tuple), to=h, branch="race_b") for t, h in b.items()]
    results: dict[str, BaseException | None] = {}
    barrier = threading.Barrier(2)

    def run(name: str, commits: list) -> None:  # type: ignore[type-arg]
        barrier.wait()
        try:
            commit_tables(catalog, commits)
            results[name] = None
        except MultiTableConflictError as exc:
            results[name] = exc

    threads = [threading.Thread(target=run, args=(n, c)) for n, c in (("a", ca), ("b", cb))]
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
    assert sorted(v is None for v in results.values()) == [False, True]
    winner, heads = ("a", a) if results["a"] is None else ("b", b)
    loser = b if winner == "a" else a
    for t, h in heads.items():
        assert main_of(catalog.load_table(t.tuple)) == h
    for t, h in loser.items():
        if t not in heads:  # the loser's own table did not move
            assert main_of(catalog.load_table(t.tuple)) != h
    assert results["b" if winner == "a" else "a"].table == TABLES[1]  # type: ignore[union-attr]


_KILLED = """
import os, sys
from wap_core.identifiers import TableId
from wap_core.lake.multitable import commit_tables, fast_forward
from pyiceberg.catalog.sql import SqlCatalog
point, uri, name, branch, tables = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:]
c = SqlCatalog(name, uri=uri)
commits = []
for t in tables:
    tid = TableId.parse(t)
    tbl = c.load_table(tid.tuple)
    commits.append(fast_forward(tid, tbl, to=tbl.metadata.refs[branch].snapshot_id, branch=branch))
die = lambda: os._exit(137)
commit_tables(c, commits, **{point: die})
"""


@pytest.mark.parametrize("point", ["after_write", "in_transaction"])
def test_killed_mid_commit_moves_nothing(catalog: SqlCatalog, catalog_uri: str, point: str) -> None:
    branch = f"kill_{point}"
    stage(catalog, TABLES, branch, 5)
    before = pointers(catalog)
    proc = subprocess.run(
        [sys.executable, "-c", _KILLED, point, catalog_uri, catalog.name, branch, *map(str, TABLES)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).parent.parent,
    )
    assert proc.returncode == 137, proc.stderr
    assert pointers(catalog) == before  # no pointer moved
    for t in TABLES:  # and the batch is still whole on its branches, publishable again
        assert branch in catalog.load_table(t.tuple).metadata.refs
    publish(
        catalog, {t: catalog.load_table(t.tuple).metadata.refs[branch].snapshot_id for t in TABLES}, branch
    )
    assert all(branch not in catalog.load_table(t.tuple).metadata.refs for t in TABLES)


def test_a_reader_of_every_pointer_never_sees_half_a_batch(catalog: SqlCatalog) -> None:
    """Rounds of batches over 2-4 tables; a reader takes every pointer in one transaction, in a loop. Afterwards
    each pointer read is mapped to the round its main shows: within a batch's tables the rounds never differ."""
    rounds: list[list[TableId]] = [TABLES[: 2 + (r % 3)] for r in range(12)]
    reads: list[dict[str, str]] = []
    done = threading.Event()

    def reader() -> None:
        while not done.is_set():
            reads.append(pointers(catalog))

    round_of_head: dict[int, int] = {}
    th = threading.Thread(target=reader)
    th.start()
    try:
        for r, tables in enumerate(rounds, start=100):
            branch = f"round_{r}"
            heads = stage(catalog, tables, branch, r)
            round_of_head.update(dict.fromkeys(heads.values(), r))
            publish(catalog, heads, branch)
    finally:
        done.set()
        th.join(60)
    main_at = {
        loc: main_of(StaticTable.from_metadata(loc)) for loc in {v for rd in reads for v in rd.values()}
    }
    mixed = []
    for rd in reads:
        shown = {name: round_of_head.get(main_at[loc], -1) for name, loc in rd.items()}
        for r, tables in enumerate(rounds, start=100):
            values = [shown[t.name] for t in tables]
            if r in values and any(v < r for v in values):
                mixed.append((r, shown))
    assert len(reads) > 10
    assert mixed == []


def test_rest_catalog_commits_every_table_through_the_spec_endpoint(seaweed, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """SeaweedFS's Iceberg REST catalog: the spec's multi-table commit (atomic against failures, not crashes)."""
    bucket = seaweed.create_table_bucket(f"wapmt-{os.getpid()}")
    settings = make_settings(
        tmp_path / "rest",
        catalog_uri="rest+" + seaweed.rest_uri,
        warehouse=f"s3://{bucket}",
        catalog_properties=(("credential", f"{seaweed.access_key}:{seaweed.secret_key}"),),
        s3_endpoint=seaweed.endpoint,
        s3_access_key=seaweed.access_key,
        s3_secret_key=seaweed.secret_key,
    )
    c = cat.open_catalog(settings)
    assert atomicity(c) is Atomicity.FAILURES_ONLY
    assert Atomicity.FAILURES_ONLY.label == "only against failures, not crashes"
    c.create_namespace("b")
    tables = TABLES[:2]
    heads = {}
    for t in tables:
        tbl = c.create_table(t.tuple, schema=SCHEMA)
        tbl.append(pa.table({"round": [0]}, schema=SCHEMA))
        tbl = c.load_table(t.tuple)
        tbl.manage_snapshots().create_branch(main_of(tbl), "rb").commit()
        c.load_table(t.tuple).append(pa.table({"round": [1]}, schema=SCHEMA), branch="rb")
        heads[t] = c.load_table(t.tuple).metadata.refs["rb"].snapshot_id
    commits = [fast_forward(t, c.load_table(t.tuple), to=h, branch="rb") for t, h in heads.items()]
    c.load_table(tables[1].tuple).append(
        pa.table({"round": [9]}, schema=SCHEMA)
    )  # a race: flights' main moved
    mains = {t: main_of(c.load_table(t.tuple)) for t in tables}
    with pytest.raises(MultiTableConflictError):
        commit_tables(c, commits)
    assert {t: main_of(c.load_table(t.tuple)) for t in tables} == mains  # nothing moved
    commits = [fast_forward(t, c.load_table(t.tuple), to=h, branch="rb") for t, h in heads.items()]
    moved = commit_tables(c, commits)
    assert [m.table for m in moved] == sorted(tables, key=lambda t: t.name)
    for t, h in heads.items():
        tbl = c.load_table(t.tuple)
        assert main_of(tbl) == h and "rb" not in tbl.metadata.refs
