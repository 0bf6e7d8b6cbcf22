"""Retention (``python -m wap_core gc``) on real Iceberg tables: what goes, what stays, what is reclaimed.

Time is real: tiny TTLs through the table property (``wap.branch-ttl = 1s``) plus a short sleep, and
``--older-than 0s`` for snapshots; no clock is mocked.
"""

from __future__ import annotations

import json
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
from helpers import lake_env, refs, use_env, write_csv

from wap_core import TableId
from wap_core.exceptions import ConflictError
from wap_core.faults import PAUSE_ENV
from wap_core.lake import catalog as cat
from wap_core.lake.catalog import file_io_properties
from wap_core.lake.orphans import orphan_metadata_files, referenced_metadata
from wap_core.session import Identity, Session
from wap_core.workflow.discard import discard, discard_batch
from wap_core.workflow.gc import collect_garbage, iceberg_would_remove
from wap_core.workflow.ingest import ingest
from wap_core.workflow.publish import publish, publish_batch

HEADER = ["id", "name"]
SUITE = "demo.people:\n  checks:\n    - not_null: [name]\n"


def _seed(lh, t: TableId, tmp_path: Path, rows=((1, "ann"), (2, "bob"))) -> int:  # type: ignore[no-untyped-def]
    r = ingest(lh, t, [write_csv(tmp_path / f"{t.name}_seed.csv", HEADER, list(rows))], create=True)
    publish(lh, t, r.branch)
    return r.snapshot_id


def _branch(lh, t: TableId, tmp_path: Path, name: str, rows) -> int:  # type: ignore[no-untyped-def]
    return ingest(
        lh, t, [write_csv(tmp_path / f"{t.name}_{name}.csv", HEADER, list(rows))], branch=name
    ).snapshot_id


def _set(lh, t: TableId, **props: str) -> None:  # type: ignore[no-untyped-def]
    with lh.table(t).transaction() as tx:
        tx.set_properties({k.replace("_", "."): v for k, v in props.items()})


def _files(lh, t: TableId, snapshot_id: int) -> set[str]:  # type: ignore[no-untyped-def]
    return {f.file.file_path for f in lh.table(t).scan(snapshot_id=snapshot_id).plan_files()}


def _local(path: str) -> Path:
    return Path(urlparse(path).path if path.startswith("file:") else path)


def _stored(lh, path: str) -> bool:  # type: ignore[no-untyped-def]
    """The file is in the warehouse: on disk, or (object-store backends) an object in the bucket."""
    if path.startswith(("s3a://", "s3://")):
        from pyiceberg.io.pyarrow import PyArrowFileIO

        from wap_core.lake.catalog import file_io_properties

        return PyArrowFileIO(file_io_properties(lh.settings)).new_input(path).exists()
    return _local(path).is_file()


def _ids(lh, t: TableId, branch: str | None = None) -> set[int]:  # type: ignore[no-untyped-def]
    return {r.id for r in lh.spark.table(lh.spark_name(t, branch)).select("id").collect()}


@pytest.fixture
def seeded(make_lakehouse, tmp_path: Path) -> tuple[Any, TableId, int]:  # type: ignore[no-untyped-def]
    """A fresh lakehouse with ``demo.people`` seeded (``_seed``): the lakehouse, the table, the seed's snapshot."""
    lh = make_lakehouse(SUITE)
    t = TableId("demo", "people")
    return lh, t, _seed(lh, t, tmp_path)


def test_dry_run_changes_nothing_then_gc_expires_the_stale_branch_and_reclaims_its_files(
    seeded: tuple[Any, TableId, int], tmp_path: Path
) -> None:
    lh, t, _ = seeded
    stale = _branch(lh, t, tmp_path, "stale", [(10, "old"), (11, "older")])
    _set(lh, t, **{"wap.branch-ttl": "1s"})  # per-table TTL (table property) instead of the 14d default
    time.sleep(1.2)
    fresh = _branch(lh, t, tmp_path, "next", [(3, "cy")])
    publish(lh, t, "next")  # main moves on: the seed snapshot becomes history
    stale_only = _files(lh, t, stale) - _files(lh, t, fresh)
    assert stale_only and all(_stored(lh, p) for p in stale_only)
    before = lh.table(t).metadata
    location = lh.table(t).metadata_location
    journal_before = len(lh.journal.history())

    dry = collect_garbage(lh, older_than="0s", dry_run=True)
    (plan,) = dry.tables
    assert (
        dry.dry_run
        and [b.branch for b in plan.expired_branches] == ["stale"]
        and not plan.expired_branches[0].done
    )
    assert (
        plan.branch_ttl == "1s"
        and plan.branch_ttl_source == "wap.branch-ttl"
        and plan.retention_source == "--older-than"
    )
    assert stale in plan.expired_snapshot_ids and fresh not in plan.expired_snapshot_ids
    assert plan.data_files_deleted == len(stale_only) and plan.bytes_reclaimed > 0
    after_dry = lh.table(t).metadata
    assert after_dry.refs == before.refs and after_dry.snapshots == before.snapshots  # nothing changed
    assert lh.table(t).metadata_location == location and len(lh.journal.history()) == journal_before
    assert all(_stored(lh, p) for p in stale_only)

    res = collect_garbage(lh, older_than="0s")
    (done,) = res.tables
    assert [b.branch for b in done.expired_branches] == ["stale"] and done.expired_branches[0].done
    assert "stale" not in refs(lh, t)
    assert done.expired_snapshot_ids == plan.expired_snapshot_ids  # the dry run predicted exactly this
    assert (
        done.snapshots_expired == len(plan.expired_snapshot_ids)
        and done.manifest_lists_deleted == done.snapshots_expired
    )
    assert done.data_files_deleted == len(stale_only) and done.bytes_reclaimed == plan.bytes_reclaimed > 0
    assert not any(_stored(lh, p) for p in stale_only)  # reclaimed from disk (or the bucket)
    assert {s.snapshot_id for s in lh.table(t).metadata.snapshots} == {fresh}
    assert _ids(lh, t) == {1, 2, 3}  # main readable and correct
    entry = lh.journal.history("demo.people", action="discard")[0]
    assert (entry.branch, entry.outcome, entry.snapshot_before) == ("stale", "expired", stale)
    assert "branch TTL 1s (wap.branch-ttl)" in (entry.reason or "")
    expire = lh.journal.history("demo.people", action="expire")[0]
    assert expire.outcome == "expired" and set(expire.details["snapshot_ids"]) == set(
        done.expired_snapshot_ids
    )
    again = collect_garbage(lh, older_than="0s")  # idempotent
    assert again.tables[0].snapshots_expired == 0 and not again.tables[0].expired_branches


def test_open_branches_keep_their_data_and_their_fork_while_main_history_expires(
    seeded: tuple[Any, TableId, int], tmp_path: Path
) -> None:
    lh, t, fork = seeded
    head = _branch(
        lh, t, tmp_path, "open", [(20, "dee")]
    )  # an open branch (default TTL 14d) forked at the seed
    main1 = _branch(lh, t, tmp_path, "m1", [(3, "cy")])
    publish(lh, t, "m1")
    main2 = _branch(lh, t, tmp_path, "m2", [(4, "eve")])
    publish(lh, t, "m2")  # main: fork -> main1 -> main2; the fork is history of main and the base of 'open'
    tbl = lh.table(t)
    snapshots = {s.snapshot_id: s for s in tbl.metadata.snapshots}
    now_ms = int(time.time() * 1000) + 1
    # Iceberg's own rule would expire the fork: it keeps a branch's ancestors only while younger than older_than
    iceberg_alone, _ = iceberg_would_remove(snapshots, tbl.metadata.refs, tbl.properties, now_ms, 1, now_ms)
    assert fork in iceberg_alone

    res = collect_garbage(lh, older_than="0s")
    (done,) = res.tables
    assert [b.branch for b in done.kept_branches] == ["open"] and not done.expired_branches
    assert done.protected_snapshot_ids == (fork,)
    left = {s.snapshot_id for s in lh.table(t).metadata.snapshots}
    assert {fork, head, main1, main2} <= left  # main kept contiguous down to the fork: lineage still finds it
    lin = cat.lineage(lh.table(t), "open")
    assert (lin.fork, lin.head, lin.main_moved) == (fork, head, True)
    assert _ids(lh, t, "open") == {1, 2, 20}  # the open branch's data survives (Spark read of the branch)
    assert _ids(lh, t) == {1, 2, 3, 4}


def test_young_kept_temp_and_incomplete_leftovers_removed_and_per_table_retention(
    seeded: tuple[Any, TableId, int], tmp_path: Path
) -> None:
    lh, t, seed = seeded
    _branch(lh, t, tmp_path, "young", [(5, "fay")])
    lh.table(t).manage_snapshots().create_branch(
        seed, "young__rebase_0123abcd"
    ).commit()  # a crashed rebase's leftover
    # the default grace keeps a temp branch a rebase may still be using; without grace it goes
    kept = collect_garbage(lh, dry_run=True).tables[0]
    assert {b.branch for b in kept.kept_branches} == {"young", "young__rebase_0123abcd"}
    res = collect_garbage(lh, grace=timedelta(0)).tables[0]
    assert [b.branch for b in res.removed_branches] == ["young__rebase_0123abcd"] and res.removed_branches[
        0
    ].kind == "temp"
    assert (
        [b.branch for b in res.kept_branches] == ["young"]
        and res.branch_ttl == "14d"
        and res.branch_ttl_source == "settings"
    )
    assert set(refs(lh, t)) == {"main", "young"}
    entry = lh.journal.history("demo.people", action="discard")[0]
    assert (entry.branch, entry.outcome) == ("young__rebase_0123abcd", "removed")
    assert (
        res.retention_source == "settings" and res.snapshot_retention == "30d" and res.snapshots_expired == 0
    )
    # Iceberg's retention property is the per-table override; --older-than overrides it for one run
    _branch(lh, t, tmp_path, "m1", [(6, "gus")])
    publish(lh, t, "m1")
    junk = _branch(lh, t, tmp_path, "junk", [(8, "ivy")])
    discard(lh, t, "junk", reason="not wanted")  # its snapshot is history now, kept only by the retention
    _set(lh, t, **{"history.expire.max-snapshot-age-ms": "1"})
    time.sleep(0.05)
    by_prop = collect_garbage(lh, dry_run=True).tables[0]
    assert by_prop.retention_source == "history.expire.max-snapshot-age-ms"
    assert (
        junk in by_prop.expired_snapshot_ids and seed not in by_prop.expired_snapshot_ids
    )  # the seed is young's fork
    assert collect_garbage(lh, dry_run=True, older_than="30d").tables[0].snapshots_expired == 0


def test_cli_gc_exit_codes_json_keys_and_text(seeded, tmp_path: Path, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    from wap_core.cli import main

    lh, t, _ = seeded
    _branch(lh, t, tmp_path, "stale", [(7, "hal")])
    _set(lh, t, **{"wap.branch-ttl": "1s"})
    time.sleep(1.2)
    use_env(monkeypatch, lake_env(lh.settings, "admin"), unset=())
    capsys.readouterr()
    assert main(["gc", "--dry-run", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) == {"dry_run", "older_than_override", "tables", "totals"} and out["dry_run"] is True
    (table,) = out["tables"]
    assert {
        "table",
        "expired_branches",
        "removed_branches",
        "kept_branches",
        "snapshots_expired",
        "data_files_deleted",
        "delete_files_deleted",
        "manifest_files_deleted",
        "manifest_lists_deleted",
        "bytes_reclaimed",
        "protected_snapshot_ids",
        "expired_snapshot_ids",
        "older_than",
        "branch_ttl",
        "snapshot_retention",
        "skipped",
    } <= set(table)
    assert table["table"] == "demo.people" and [b["branch"] for b in table["expired_branches"]] == ["stale"]
    assert "stale" in refs(lh, t)
    assert main(["gc", "--older-than", "0s"]) == 0
    text = capsys.readouterr().out
    assert "stale: discarded: expired" in text and "total: 1 branch(es) expired" in text
    assert "stale" not in refs(lh, t)
    assert lh.journal.history("demo.people", action="discard")[0].user == "admin"
    assert main(["gc", "--older-than", "soon"]) == 2
    assert "invalid --older-than 'soon'" in capsys.readouterr().err


# --------------------------------------------------------------------------- batches (issue 27)

BATCH_SUITE = "".join(f"demo.{n}:\n  checks:\n    - not_null: [name]\n" for n in ("people", "pets"))


def test_gc_removes_a_lost_batch_race_s_metadata_files_and_ages_batch_tags_out(  # type: ignore[no-untyped-def]
    make_lakehouse, tmp_path: Path
) -> None:
    lh = make_lakehouse(BATCH_SUITE)
    a, b = TableId("demo", "people"), TableId("demo", "pets")
    root = Session(lh, Identity("root"))
    props = file_io_properties(lh.settings)
    for t in (a, b):
        _seed(lh, t, tmp_path)
    future = time.time() + 3600

    def unreferenced() -> set[str]:
        when = datetime.fromtimestamp(future, tz=UTC)
        return {
            f.path for t in (a, b) for f in orphan_metadata_files(lh.table(t), props, written_before=when)
        }

    def batch(name: str, value: int) -> None:
        for t in (a, b):
            path = write_csv(tmp_path / f"{t.name}_{name}.csv", HEADER, [(value, f"n{value}")])
            assert ingest(lh, t, [path], batch=name).audit.passed

    batch("b1", 10)
    publish_batch(root, "b1")  # both tables tagged batch-b1
    b1 = {t: lh.table(t).metadata.refs["batch-b1"].snapshot_id for t in (a, b)}
    assert unreferenced() == set()  # a clean lakehouse: every metadata file is referenced
    # lose a race on purpose: batch b2 reads both tables, is held after its intents; a one-table publish of
    # pets wins; b2's commit writes both tables' next metadata files, then its swap fails: two orphans
    batch("b2", 20)
    _branch(lh, b, tmp_path, "solo", [(21, "solo")])
    errors: list[BaseException] = []

    def run() -> None:
        try:
            publish_batch(root, "b2")
        except Exception as exc:
            errors.append(exc)

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(PAUSE_ENV, "after_publish_batch_intents=5")
        th = threading.Thread(target=run)
        th.start()
        deadline = time.monotonic() + 60
        while len([i for i in lh.journal.pending_intents() if i.branch == "b2"]) < 2:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        time.sleep(1.0)  # b2 has reached its pause point (right after its intents) and sleeps there
        mp.delenv(PAUSE_ENV)  # the one-table publish takes the same path: it is not held
        publish(lh, b, "solo")
        th.join(120)
    assert len(errors) == 1 and isinstance(errors[0], ConflictError) and "demo.pets lost" in str(errors[0])
    lost = unreferenced()
    assert len(lost) == 2  # listed: they are stored
    referenced = {t: referenced_metadata(lh.table(t)) for t in (a, b)}

    # within the grace (default 1h) and the default retention: nothing of it goes
    first = collect_garbage(lh)
    assert all(t.orphan_metadata_files == () and t.expired_tags == () for t in first.tables)
    assert unreferenced() == lost
    dry = collect_garbage(lh, dry_run=True, grace=timedelta(0))
    assert {p for t in dry.tables for p in t.orphan_metadata_files} == lost and unreferenced() == lost

    discard_batch(root, "b2", reason="lost its race")  # its branches no longer hold b1's snapshot
    res = collect_garbage(lh, older_than="0s", grace=timedelta(0))
    by = {t.table: t for t in res.tables}
    assert {p for t in res.tables for p in t.orphan_metadata_files} == lost
    assert unreferenced() == set()  # the loser's files went
    for t in (a, b):  # and nothing else: every file the tables reference is still there, both read
        assert referenced[t] <= referenced_metadata(lh.table(t))
        tbl = lh.table(t)
        for entry in [tbl.metadata_location, *(e.metadata_file for e in tbl.metadata.metadata_log)]:
            assert _stored(lh, entry), entry
    assert _ids(lh, a) == {1, 2, 10} and _ids(lh, b) == {1, 2, 10, 21}
    assert res.totals()["orphan_metadata_files"] == 2
    gc_rows = lh.journal.history(action="gc")
    assert {p for e in gc_rows for p in e.details.get("orphan_metadata_files", [])} == lost
    # pets' main moved on past b1: its tag aged out with b1's snapshot; people's main is still b1: kept
    assert by[str(b)].expired_tags == ("batch-b1",) and "batch-b1" not in refs(lh, b)
    assert b1[b] in by[str(b)].expired_snapshot_ids
    assert by[str(a)].expired_tags == () and refs(lh, a)["batch-b1"] == b1[a]
    tag_row = lh.journal.history(str(b), branch="batch-b1", action="discard")[0]
    assert (tag_row.outcome, tag_row.details["kind"], tag_row.snapshot_before) == (
        "expired",
        "batch_tag",
        b1[b],
    )
