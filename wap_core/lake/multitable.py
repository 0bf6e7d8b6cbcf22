"""All tables or none: one commit of several tables' metadata (the pointer swap of a batch that spans tables).

Iceberg commits one table at a time; a batch of several tables must move every table's ``main`` or none.
How that is done depends on the catalog, and this module says which guarantee each one gives
(:class:`Atomicity`):

* **JDBC catalog** (SQLite, PostgreSQL; the one Spark and PyIceberg share). A table's pointer is a row of
  ``iceberg_tables``, moved by a compare-and-swap on ``metadata_location`` (what Iceberg's ``JdbcCatalog``
  and PyIceberg's ``SqlCatalog.commit_table`` do for one table). Here: every table's new metadata file is
  written first (nothing points at it yet: a crash leaves an orphan file, never a moved pointer), then all
  the pointers move in ONE database transaction, each by that same compare-and-swap, tables in a fixed order
  (namespace, name), so two batches over shared tables never deadlock. SQLite takes its write lock up front
  (``BEGIN IMMEDIATE``). One pointer that moved since the caller loaded its table fails the whole
  transaction: nothing moves and :class:`MultiTableConflictError` names the table that lost.
  :attr:`Atomicity.ATOMIC`: crash-atomic (the database's own guarantee).
* **REST catalog**: the spec's multi-table commit, ``POST /v1/{prefix}/transactions/commit``, each table with
  its requirements (``assert-ref-snapshot-id``...). Whether the server applies it atomically is the
  server's: SeaweedFS 4.48 checks every requirement, then flips the pointers one by one and rolls back the
  ones it flipped when a later one fails, but a crash in between leaves some moved
  (:attr:`Atomicity.FAILURES_ONLY`). A server without the endpoint is refused before anything is written
  (:class:`~wap_core.exceptions.ValidationError`, one line).

The updates and requirements are declared as data (PyIceberg's ``TableUpdate`` / ``TableRequirement``), as a
single-table commit declares them; :func:`fast_forward` builds the ones of a batch publish.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any

from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import CommitFailedException, NoSuchTableError
from pyiceberg.table.refs import MAIN_BRANCH, SnapshotRefType
from pyiceberg.table.update import (
    AssertRefSnapshotId,
    AssertTableUUID,
    RemoveSnapshotRefUpdate,
    SetSnapshotRefUpdate,
    TableRequirement,
    TableUpdate,
)
from sqlalchemy import text

from wap_core.exceptions import CommitConflictError, ValidationError
from wap_core.identifiers import TableId
from wap_core.lake.backends import catalog_type_of_catalog
from wap_core.values import JsonObject

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table

log = logging.getLogger(__name__)


class Atomicity(str, Enum):
    """What a multi-table commit on a catalog guarantees."""

    ATOMIC = "atomic"
    """Every pointer moves or none, also across a crash (one database transaction)."""
    FAILURES_ONLY = "failures_only"
    """Every pointer or none against a failed requirement; a crash mid-commit can leave some moved."""

    @property
    def label(self) -> str:
        """What the console's batch Review says."""
        return "yes" if self is Atomicity.ATOMIC else "only against failures, not crashes"

    @property
    def meaning(self) -> str:
        """What :attr:`label` means for a publish on this catalog, one sentence."""
        if self is Atomicity.ATOMIC:
            return "every table's main moves in one database transaction, or none does, also across a crash."
        return (
            "the catalog commits the tables together and undoes them when one fails, but a crash in the middle "
            "can leave some tables published (see the README's note on REST catalogs)."
        )


class MultiTableConflictError(CommitConflictError):
    """One table's pointer moved since its metadata was loaded (or a requirement failed): nothing moved."""

    def __init__(self, table: TableId, detail: str) -> None:
        super().__init__(f"{table}: {detail}: no table of the batch moved")
        self.table = table


@dataclass(frozen=True)
class TableCommit:
    """One table's part of a multi-table commit: its metadata as loaded, its requirements and its updates."""

    table: TableId
    base: Table
    requirements: tuple[TableRequirement, ...]
    updates: tuple[TableUpdate, ...]


@dataclass(frozen=True)
class Committed:
    """A table's pointer move: from the metadata file it was at to the one written for the commit."""

    table: TableId
    before: str
    after: str


Hook = Callable[[], None]


def _noop() -> None:
    return None


def fast_forward(table: TableId, base: Table, *, to: int, branch: str, tag: str | None = None) -> TableCommit:
    """Main to ``to`` (the audited head of ``branch``), ``branch`` removed, tag ``tag`` at ``to``; required:
    the same table, main and the branch where ``base`` saw them. Whether ``to`` descends from main (no
    rebase needed) is the caller's precondition, as for a one-table publish."""
    meta = base.metadata
    main = meta.refs.get(MAIN_BRANCH)
    head = meta.refs.get(branch)
    main_ref: JsonObject = {"ref-name": MAIN_BRANCH, "type": SnapshotRefType.BRANCH, "snapshot-id": to}
    if main is not None:  # main keeps its retention settings
        main_ref.update(
            {
                "max-ref-age-ms": main.max_ref_age_ms,
                "max-snapshot-age-ms": main.max_snapshot_age_ms,
                "min-snapshots-to-keep": main.min_snapshots_to_keep,
            }
        )
    updates: list[TableUpdate] = [
        SetSnapshotRefUpdate.model_validate(main_ref),
        RemoveSnapshotRefUpdate.model_validate({"ref-name": branch}),
    ]
    if tag is not None:
        updates.append(
            SetSnapshotRefUpdate.model_validate(
                {"ref-name": tag, "type": SnapshotRefType.TAG, "snapshot-id": to}
            )
        )
    requirements: tuple[TableRequirement, ...] = (
        AssertTableUUID(uuid=meta.table_uuid),
        AssertRefSnapshotId.model_validate(
            {"ref": MAIN_BRANCH, "snapshot-id": main.snapshot_id if main else None}
        ),
        AssertRefSnapshotId.model_validate(
            {"ref": branch, "snapshot-id": head.snapshot_id if head else None}
        ),
    )
    return TableCommit(table=table, base=base, requirements=requirements, updates=tuple(updates))


def atomicity(catalog: Catalog) -> Atomicity:
    """The guarantee :func:`commit_tables` gives on this catalog."""
    kind = catalog_type_of_catalog(catalog)
    return Atomicity.ATOMIC if kind is not None and kind.atomic_multi_table else Atomicity.FAILURES_ONLY


def commit_tables(
    catalog: Catalog,
    commits: Sequence[TableCommit],
    *,
    after_write: Hook = _noop,
    in_transaction: Hook = _noop,
) -> list[Committed]:
    """Commit every table's updates, or none (see the module doc for each catalog's guarantee).

    ``after_write`` runs once every new metadata file is written and no pointer moved yet;
    ``in_transaction`` inside the database transaction after the last pointer's update and before its
    commit (the JDBC catalog only). Both are where the durability tests kill the process.
    Raises :class:`MultiTableConflictError` naming the table that lost; then nothing moved.
    """
    if not commits:
        return []
    names = [c.table for c in commits]
    if len(set(names)) != len(names):
        raise ValidationError(f"a table appears twice in one commit: {', '.join(map(str, names))}")
    ordered = sorted(commits, key=lambda c: (c.table.namespace, c.table.name))
    if isinstance(catalog, SqlCatalog):
        return _commit_jdbc(catalog, ordered, after_write, in_transaction)
    return _commit_rest(catalog, ordered, after_write)


def _staged(catalog: SqlCatalog, c: TableCommit) -> tuple[str, str]:
    """Validate ``c``'s requirements on its base, write its new metadata file: (base location, new location)."""
    try:
        staged = catalog._update_and_stage_table(c.base, c.table.tuple, c.requirements, c.updates)
    except CommitFailedException as exc:  # a requirement failed on the metadata the caller loaded
        raise MultiTableConflictError(c.table, str(exc)) from exc
    catalog._write_metadata(staged.metadata, staged.io, staged.metadata_location)
    return c.base.metadata_location, staged.metadata_location


_CAS = text(
    "UPDATE iceberg_tables SET metadata_location = :after, previous_metadata_location = :before"
    " WHERE catalog_name = :catalog AND table_namespace = :namespace AND table_name = :name"
    " AND metadata_location = :before AND (iceberg_type = 'TABLE' OR iceberg_type IS NULL)"
)


def _commit_jdbc(
    catalog: SqlCatalog, ordered: Sequence[TableCommit], after_write: Hook, in_transaction: Hook
) -> list[Committed]:
    moves = [Committed(c.table, *_staged(catalog, c)) for c in ordered]
    after_write()
    engine = catalog.engine
    with engine.connect() as conn:
        if engine.dialect.name == "sqlite":
            conn.exec_driver_sql("BEGIN IMMEDIATE")  # the write lock now, not at the first UPDATE
        else:
            conn.begin()
        try:
            for m in moves:
                rows = conn.execute(
                    _CAS,
                    {
                        "after": m.after,
                        "before": m.before,
                        "catalog": catalog.name,
                        "namespace": m.table.namespace,
                        "name": m.table.name,
                    },
                ).rowcount
                if rows != 1:
                    raise MultiTableConflictError(m.table, "its pointer moved since it was loaded")
            in_transaction()
        except BaseException:
            conn.rollback()
            raise
        conn.commit()
    log.info(
        "moved %d table pointer(s) in one transaction: %s", len(moves), ", ".join(str(m.table) for m in moves)
    )
    return moves


def _commit_rest(catalog: Catalog, ordered: Sequence[TableCommit], after_write: Hook) -> list[Committed]:
    from pyiceberg.catalog.rest import RestCatalog

    if not isinstance(catalog, RestCatalog):
        raise ValidationError(f"no multi-table commit on a {type(catalog).__name__}")
    if len(ordered) == 1:  # one pointer: the catalog's own table commit (every REST catalog has it)
        return [_commit_one(catalog, ordered[0], after_write)]
    body: JsonObject = {
        "table-changes": [
            {
                "identifier": {"namespace": [c.table.namespace], "name": c.table.name},
                "requirements": [r.model_dump(by_alias=True, mode="json") for r in c.requirements],
                "updates": [u.model_dump(by_alias=True, mode="json", exclude_none=True) for u in c.updates],
            }
            for c in ordered
        ]
    }
    after_write()
    url = catalog.url("transactions/commit", prefixed=True)
    response = catalog._session.post(url, json=body)
    if response.status_code == 404 and (gone := _missing_table(response, ordered)) is not None:
        raise MultiTableConflictError(gone, "the table does not exist on the catalog any more")
    if response.status_code in (404, 405, 501):
        raise ValidationError(
            f"the REST catalog at {catalog.properties.get('uri')} has no multi-table commit (POST {url} answered"
            f" {response.status_code}): a batch of several tables cannot be published there"
        )
    if response.status_code == 409:
        raise MultiTableConflictError(_loser(response.text, ordered), "a requirement failed")
    response.raise_for_status()
    moved = []
    for c in ordered:
        now = catalog.load_table(c.table.tuple)
        moved.append(Committed(c.table, c.base.metadata_location, now.metadata_location))
    return moved


def _commit_one(catalog: Catalog, c: TableCommit, after_write: Hook) -> Committed:
    """One table's updates by the catalog's single-table commit (its requirements checked by the catalog)."""
    after_write()
    try:
        catalog.commit_table(c.base, c.requirements, c.updates)
    except CommitFailedException as exc:
        raise MultiTableConflictError(c.table, str(exc)) from exc
    except NoSuchTableError as exc:
        raise MultiTableConflictError(c.table, "the table does not exist on the catalog any more") from exc
    now = catalog.load_table(c.table.tuple)
    return Committed(c.table, c.base.metadata_location, now.metadata_location)


_MISSING_TYPES = ("NoSuchTableException", "NoSuchNamespaceException", "NoSuchIcebergTableException")


def _missing_table(response: Any, ordered: Sequence[TableCommit]) -> TableId | None:
    """The table a 404 of the endpoint says is missing, or None when the 404 is the endpoint's own (no route).

    The spec's error model (``{"error": {"message", "type", "code"}}``) names a missing table or namespace in
    ``type``; a server without the endpoint answers its router's 404, with no such type.
    """
    try:
        payload = response.json()
    except ValueError:
        return None
    error = payload.get("error") if isinstance(payload, dict) else None
    if not isinstance(error, dict) or str(error.get("type", "")) not in _MISSING_TYPES:
        return None
    return _loser(str(error.get("message", "")), ordered)


def _loser(text_: str, ordered: Sequence[TableCommit]) -> TableId:
    """The table a 409's message names (the first of the batch when it names none)."""
    for c in ordered:
        if str(c.table) in text_ or c.table.name in text_:
            return c.table
    return ordered[0].table


def ref_changes(
    table: TableId,
    base: Table,
    *,
    expect: Mapping[str, int | None],
    set_branches: Mapping[str, int] | None = None,
    remove: Sequence[str] = (),
) -> TableCommit:
    """A table's ref changes in a multi-table commit (a batch's discard, rollback or rebase swap): the
    branches ``set_branches`` pointed at their snapshots (an existing branch keeps its retention settings),
    the refs ``remove`` removed; required: the same table and every ref of ``expect`` where ``base`` saw it
    (``None``: absent). No snapshot is written."""
    meta = base.metadata
    updates: list[TableUpdate] = []
    for name, snapshot_id in (set_branches or {}).items():
        ref: JsonObject = {"ref-name": name, "type": SnapshotRefType.BRANCH, "snapshot-id": snapshot_id}
        if (old := meta.refs.get(name)) is not None:
            ref.update(
                {
                    "max-ref-age-ms": old.max_ref_age_ms,
                    "max-snapshot-age-ms": old.max_snapshot_age_ms,
                    "min-snapshots-to-keep": old.min_snapshots_to_keep,
                }
            )
        updates.append(SetSnapshotRefUpdate.model_validate(ref))
    updates.extend(RemoveSnapshotRefUpdate.model_validate({"ref-name": name}) for name in remove)
    requirements: tuple[TableRequirement, ...] = (
        AssertTableUUID(uuid=meta.table_uuid),
        *(
            AssertRefSnapshotId.model_validate({"ref": name, "snapshot-id": sid})
            for name, sid in expect.items()
        ),
    )
    return TableCommit(table=table, base=base, requirements=requirements, updates=tuple(updates))
