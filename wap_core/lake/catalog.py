"""Catalog metadata through PyIceberg (no Spark): tables, refs, snapshots, lineage.

Everything here reads metadata JSON and the catalog's SQL rows only, so it is
cheap enough for a page load.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass

from pyiceberg.catalog import Catalog
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot
from sqlalchemy import Engine

from wap_core.config import Settings
from wap_core.exceptions import NotFoundError
from wap_core.identifiers import MAIN, TableId, validate_branch
from wap_core.lake.backends import catalog_type_of, store_of
from wap_core.lake.backends.sql import sqlite_engine_pragmas


def rest_endpoint(settings: Settings) -> str | None:
    """The catalog's endpoint an error line names (the REST catalog's URI as given), or None when the catalog's
    failures are the object store's: what :func:`wap_core.lake.errors.store_error` names."""
    return catalog_type_of(settings).failure_endpoint(settings)


def file_io_properties(settings: Settings) -> dict[str, str]:
    """PyIceberg's FileIO properties: the S3 settings' ``s3.*``, then WAP_CATALOG_PROPERTIES (which win)."""
    base = store_of(settings).file_io_properties(settings)
    return {**base, **dict(settings.catalog_properties)}


def open_catalog(settings: Settings) -> Catalog:
    """The PyIceberg catalog Spark also uses, opened by the catalog type ``settings`` name
    (:func:`wap_core.lake.backends.catalog_type_of`): the SqlCatalog over the same database (and catalog
    name), or the REST catalog at ``WAP_CATALOG_URI``."""
    return catalog_type_of(settings).open(settings, file_io_properties(settings))


def journal_uri(settings: Settings) -> str:
    """The journal's database with a REST catalog: ``WAP_JOURNAL_URI`` or SQLite at ``$WAP_HOME/journal.db``."""
    if settings.journal_uri:
        return settings.journal_uri
    return f"sqlite:///{(settings.home / 'journal.db').resolve()}"


def journal_engine(settings: Settings, catalog: Catalog) -> Engine:
    """Where the journal, intents, reviews and profiles live: the SQL catalog's own database, or (REST
    catalog, which has no database of ours) :func:`journal_uri`."""
    if isinstance(catalog, SqlCatalog):
        return catalog.engine
    from sqlalchemy import create_engine

    uri = journal_uri(settings)
    engine = create_engine(uri)
    if uri.startswith("sqlite"):
        sqlite_engine_pragmas(engine)
    return engine


def load_table(catalog: Catalog, table: TableId) -> Table:
    """The table's metadata from the catalog; NotFoundError if it does not exist."""
    try:
        return catalog.load_table(table.tuple)
    except (NoSuchTableError, NoSuchNamespaceError) as exc:
        raise NotFoundError(f"table {table} does not exist") from exc


def table_exists(catalog: Catalog, table: TableId) -> bool:
    """True if the catalog has the table."""
    return catalog.table_exists(table.tuple)


_SHARED_TABLES: OrderedDict[str, Table] = OrderedDict()  # metadata location -> parsed table (read-only use)
_SHARED_MAX = 2048
_SHARED_LOCK = threading.Lock()


def load_tables(catalog: Catalog) -> list[tuple[TableId, Table]]:
    """Every table of the catalog at its current metadata, for read-only overviews (sorted by id).

    One SQL query gives every table's current metadata location. A metadata file is immutable
    (each commit writes a new one), so a table parsed from it is kept by its location and reused
    until the table moves on: a page listing 500 tables parses only the ones that changed. The
    returned tables are shared between callers: read them, never commit through them.
    """
    from sqlalchemy import text

    if not isinstance(catalog, SqlCatalog):  # a REST catalog: no table of ours to query, one load each
        out_rest: list[tuple[TableId, Table]] = []
        for tid in list_table_ids(catalog):
            try:
                out_rest.append((tid, load_table(catalog, tid)))
            except NotFoundError:
                continue  # dropped since the listing
        return out_rest
    with catalog.engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT table_namespace, table_name, metadata_location FROM iceberg_tables "
                "WHERE catalog_name = :c AND (iceberg_type IS NULL OR iceberg_type = 'TABLE')"
            ),
            {"c": catalog.name},
        ).all()
    out: list[tuple[TableId, Table]] = []
    for row in sorted(tuple(r) for r in rows):
        tid, location = TableId(str(row[0]), str(row[1])), str(row[2] or "")
        with _SHARED_LOCK:
            tbl = _SHARED_TABLES.get(location) if location else None
            if tbl is not None:
                _SHARED_TABLES.move_to_end(location)
        if tbl is None:
            tbl = _table_at(catalog, tid, location) if location else None
            if tbl is None:
                continue
            with _SHARED_LOCK:
                _SHARED_TABLES[tbl.metadata_location] = tbl
                while len(_SHARED_TABLES) > _SHARED_MAX:
                    _SHARED_TABLES.popitem(last=False)
        out.append((tid, tbl))
    return out


def _table_at(catalog: Catalog, table: TableId, location: str) -> Table | None:
    """``table`` parsed from its metadata file at ``location`` (what the catalog's load_table does, minus its query)."""
    from pyiceberg.io import load_file_io
    from pyiceberg.serializers import FromInputFile

    try:
        metadata = FromInputFile.table_metadata(
            load_file_io(catalog.properties, location).new_input(location)
        )
    except FileNotFoundError:  # the table moved on since the query and its old metadata file is gone
        try:
            return load_table(catalog, table)
        except NotFoundError:
            return None  # dropped since the query
    io = load_file_io({**catalog.properties, **metadata.properties}, location)
    return Table(
        identifier=table.tuple, metadata=metadata, metadata_location=location, io=io, catalog=catalog
    )


def list_table_ids(catalog: Catalog) -> list[TableId]:
    """Every table of every namespace, sorted."""
    out: list[TableId] = []
    for ns in catalog.list_namespaces():
        for ident in catalog.list_tables(ns):
            out.append(TableId(".".join(ident[:-1]), ident[-1]))
    return sorted(out)


def ref_snapshot_id(tbl: Table, ref: str) -> int | None:
    """The snapshot id a branch or tag points at, or None if there is no such ref."""
    r = tbl.metadata.refs.get(ref)
    return r.snapshot_id if r is not None else None


def schema_at(tbl: Table, snapshot_id: int | None) -> Schema:
    """The schema in force at ``snapshot_id`` (its snapshot's schema id), from metadata.

    The table's current schema when the snapshot is unknown (None, expired) or records no schema id.
    """
    snap = tbl.metadata.snapshot_by_id(snapshot_id) if snapshot_id is not None else None
    if snap is not None and snap.schema_id is not None:
        schema = tbl.metadata.schema_by_id(snap.schema_id)
        if schema is not None:
            return schema
    return tbl.schema()


TEMP_MARK = "__rebase_"
_TEMP_BRANCH = re.compile(r"[A-Za-z_][A-Za-z0-9_]*__rebase_[0-9a-f]{8}")


def is_temp_branch(name: str) -> bool:
    """A rebase's temporary branch (``<branch>__rebase_<8 hex>``): internal, never an open audit branch."""
    return _TEMP_BRANCH.fullmatch(name) is not None


def branch_names(tbl: Table) -> list[str]:
    """The open audit branches: every branch except main and rebase temp branches."""
    return sorted(
        n
        for n, r in tbl.metadata.refs.items()
        if r.snapshot_ref_type == "branch" and n != MAIN and not is_temp_branch(n)
    )


def tag_names(tbl: Table) -> list[str]:
    """The table's tag names, sorted."""
    return sorted(n for n, r in tbl.metadata.refs.items() if r.snapshot_ref_type == "tag")


def require_branch(tbl: Table, table: TableId, branch: str) -> int:
    """The head snapshot id of ``branch``; NotFoundError naming the open branches otherwise."""
    validate_branch(branch)
    ref = tbl.metadata.refs.get(branch)
    if ref is None or ref.snapshot_ref_type != "branch" or is_temp_branch(branch):
        known = ", ".join(branch_names(tbl)) or "none"
        staged = staged_wap_snapshots(tbl)
        also = (
            f"; {len(staged)} snapshot(s) staged under spark.wap.id ({', '.join(sorted(staged.values()))}) are"
            " not batches here: write with spark.wap.branch instead (wap branch open), see docs/workflow.md"
            if staged
            else ""
        )
        raise NotFoundError(f"branch {branch!r} does not exist on {table} (open branches: {known}){also}")
    return ref.snapshot_id


def staged_wap_snapshots(tbl: Table) -> dict[int, str]:
    """{snapshot id: its wap.id} of the snapshots Iceberg's other WAP mode staged (``spark.wap.id`` on a table
    with ``write.wap.enabled=true``: a snapshot on no ref, published by ``cherrypick_snapshot``) that no ref
    holds. Not batches here (docs/workflow.md says why); named so that a user who looks for one is told."""
    held: set[int] = set()
    for ref in tbl.metadata.refs.values():
        held.update(s.snapshot_id for s in ancestors(tbl, ref.snapshot_id))
    return {
        s.snapshot_id: str(wap_id)
        for s in tbl.metadata.snapshots
        if s.snapshot_id not in held and (wap_id := summary_get(s, "wap.id")) is not None
    }


def ancestors(tbl: Table, snapshot_id: int | None) -> Iterator[Snapshot]:
    """Snapshots from ``snapshot_id`` back to the root, newest first."""
    while snapshot_id is not None:
        snap = tbl.metadata.snapshot_by_id(snapshot_id)
        if snap is None:
            return
        yield snap
        snapshot_id = snap.parent_snapshot_id


@dataclass(frozen=True)
class Lineage:
    """Where a branch stands relative to main, from metadata alone."""

    head: int
    main_head: int | None
    fork: int | None  # newest common ancestor of branch and main; None if they share none
    new_snapshots: tuple[Snapshot, ...]  # on the branch since the fork, oldest first

    @property
    def main_moved(self) -> bool:
        """True when main has commits the branch does not (fast-forward impossible)."""
        return self.main_head is not None and self.main_head != self.fork

    @property
    def published(self) -> bool:
        """True when main's head is the branch's head (nothing left to publish)."""
        return self.main_head == self.head


def lineage(tbl: Table, branch: str) -> Lineage:
    """The branch's lineage against main: its head, main's head, the fork and the snapshots since."""
    head = tbl.metadata.refs[branch].snapshot_id
    main_head = ref_snapshot_id(tbl, MAIN)
    main_ids = {s.snapshot_id for s in ancestors(tbl, main_head)}
    new: list[Snapshot] = []
    fork: int | None = None
    for snap in ancestors(tbl, head):
        if snap.snapshot_id in main_ids:
            fork = snap.snapshot_id
            break
        new.append(snap)
    new.reverse()
    return Lineage(head=head, main_head=main_head, fork=fork, new_snapshots=tuple(new))


def _summary_int(snap: Snapshot, key: str) -> int:
    if snap.summary is None:
        return 0
    try:
        return int(snap.summary.additional_properties.get(key, 0) or 0)
    except (TypeError, ValueError):
        return 0


def summary_get(snap: Snapshot, key: str) -> str | None:
    """A property of the snapshot's summary (e.g. ``wap.branch``), or None."""
    if snap.summary is None:
        return None
    return snap.summary.additional_properties.get(key)


def snapshot_rows(tbl: Table, snapshot_id: int | None) -> int:
    """The table's rows at a snapshot, from its summary (0 for none)."""
    snap = tbl.metadata.snapshot_by_id(snapshot_id) if snapshot_id is not None else None
    return int(summary_get(snap, "total-records") or 0) if snap is not None else 0


def snapshot_operation(snap: Snapshot) -> str:
    """The snapshot's operation (append, overwrite, ...), "unknown" without a summary."""
    return snap.summary.operation.value if snap.summary is not None else "unknown"


@dataclass(frozen=True)
class MetadataDiff:
    """Branch vs main from snapshot summaries only: no data read, no Spark job."""

    table: str
    branch: str
    fork_snapshot_id: int | None
    head_snapshot_id: int
    main_snapshot_id: int | None
    main_moved: bool
    snapshots: int
    rows_added: int
    rows_deleted: int
    files_added: int
    files_deleted: int
    bytes_added: int
    bytes_deleted: int
    pure_append: bool
    operations: tuple[str, ...]


def metadata_diff(tbl: Table, table: TableId, branch: str) -> MetadataDiff:
    """What the branch changed since its fork, from snapshot summaries only (no data is read)."""
    lin = lineage(tbl, branch)
    snaps = [s for s in lin.new_snapshots if s.summary is not None]
    ops = tuple(snapshot_operation(s) for s in snaps)
    return MetadataDiff(
        table=str(table),
        branch=branch,
        fork_snapshot_id=lin.fork,
        head_snapshot_id=lin.head,
        main_snapshot_id=lin.main_head,
        main_moved=lin.main_moved,
        snapshots=len(snaps),
        rows_added=sum(_summary_int(s, "added-records") for s in snaps),
        rows_deleted=sum(_summary_int(s, "deleted-records") for s in snaps),
        files_added=sum(_summary_int(s, "added-data-files") for s in snaps),
        files_deleted=sum(_summary_int(s, "deleted-data-files") for s in snaps),
        bytes_added=sum(_summary_int(s, "added-files-size") for s in snaps),
        bytes_deleted=sum(_summary_int(s, "removed-files-size") for s in snaps),
        pure_append=all(op == "append" for op in ops),
        operations=ops,
    )
