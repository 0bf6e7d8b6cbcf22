"""Batches that span tables: a named set of tables, each on a branch of the batch's name.

A day of flights arrives with the airports it references; an order batch with its line items. A
**batch** groups them: every member table has an open branch named like the batch, forked from its own
main, written by ``wap ingest TABLE SOURCE... --batch NAME`` (which creates the batch on first use). The
members are recorded in ``wap_batches`` (:mod:`wap_core.store.batches`); a member whose branch is gone
(published, discarded, or an ingest that failed before its rows landed) is not part of the open batch.

A branch made by ``--branch`` (or a default name) has no membership row: it is a **one-table batch** and
behaves exactly as a branch always did. When a batch is first used (its first ``--batch`` ingest), every
table that already has an open branch of that name joins it: that is how a steward adds the airports to
the failing week's branch of flights.

This module reads batches (:func:`load_batch`, :func:`batch_of`, :func:`open_batches`) and adds members
(:func:`join`); the actions on a batch (audit, publish, discard...) are their own modules.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pyiceberg.table import Table

from wap_core.exceptions import ConflictError, NotFoundError, RefusedError, ValidationError
from wap_core.identifiers import MAIN, TableId, validate_branch
from wap_core.lake import catalog as cat
from wap_core.security.access import Permission
from wap_core.session import Session
from wap_core.states import Action
from wap_core.store import batches as store
from wap_core.workflow.reconcile import reconcile

if TYPE_CHECKING:
    from wap_core.lakehouse import Lakehouse

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BatchTable:
    """One table of an open batch: its branch (named like the batch) against its own main."""

    table: TableId
    head: int  # the branch's head snapshot
    main: int | None  # main's head now
    fork: int | None  # where the branch forked from main
    added_by: str

    @property
    def main_moved(self) -> bool:
        """True when main has commits the branch does not (the table needs a rebase)."""
        return self.main is not None and self.main != self.fork


@dataclass(frozen=True)
class Batch:
    """An open batch: its name (its branches' name) and its tables, sorted by table."""

    name: str
    tables: tuple[BatchTable, ...]

    @property
    def table_ids(self) -> tuple[TableId, ...]:
        """The member tables, sorted."""
        return tuple(t.table for t in self.tables)

    @property
    def heads(self) -> dict[str, int]:
        """Each member table's branch head (``namespace.table`` -> snapshot id): what approvals bind to."""
        return {str(t.table): t.head for t in self.tables}

    def member(self, table: TableId | str) -> BatchTable | None:
        """The member ``table``, or None when it is not in the batch."""
        key = str(table)
        return next((t for t in self.tables if str(t.table) == key), None)

    def __contains__(self, table: object) -> bool:
        return isinstance(table, (TableId, str)) and self.member(table) is not None


def _member_table(tbl: Table, table: TableId, name: str, added_by: str) -> BatchTable | None:
    if name not in tbl.metadata.refs:
        return None
    lin = cat.lineage(tbl, name)
    return BatchTable(table, lin.head, cat.ref_snapshot_id(tbl, MAIN), lin.fork, added_by)


def _build(
    lh: Lakehouse, name: str, members: Iterable[store.Member], loaded: dict[str, Table] | None = None
) -> Batch:
    """The batch from its members: ONE metadata load per table (a dropped table is left out); each member's
    loaded metadata is put in ``loaded`` when given (what a publish commits from)."""
    out: dict[str, BatchTable] = {}
    for m in members:
        table = TableId.parse(m.table)
        if str(table) in out:
            continue
        try:
            tbl = lh.table(table)
        except NotFoundError:
            continue
        bt = _member_table(tbl, table, name, m.added_by)
        if bt is not None:
            out[str(table)] = bt
            if loaded is not None:
                loaded[str(table)] = tbl
    return Batch(name, tuple(sorted(out.values(), key=lambda t: (t.table.namespace, t.table.name))))


def load_batch(lh: Lakehouse, name: str) -> Batch:
    """The open batch ``name`` (its members that still have their branch); NotFoundError if none has."""
    return load_batch_tables(lh, name)[0]


def load_batch_tables(lh: Lakehouse, name: str) -> tuple[Batch, dict[str, Table]]:
    """:func:`load_batch` and the metadata each member table was read from (``namespace.table`` -> table):
    one load per table, shared by a publish's readiness and its commit."""
    validate_branch(name)
    loaded: dict[str, Table] = {}
    batch = _build(lh, name, store.open_members(lh.journal.engine, name), loaded)
    if not batch.tables:
        raise NotFoundError(f"no open batch {name!r}: no table has an open branch of a batch of that name")
    return batch, loaded


def open_batch_for(s: Session, name: str, permission: Permission) -> tuple[Batch, dict[str, Table]]:
    """The open batch ``name`` for an action on every table of it (publish, discard, rebase): each table's
    crashed actions reconciled first (a dead process's intent neither blocks a branch nor hides a move that
    landed), the batch and the metadata each table was read from loaded once (:func:`load_batch_tables`),
    ``permission`` authorized on every table."""
    lh = s.lakehouse
    for m in store.open_members(lh.journal.engine, name):
        reconcile(lh, m.table)
    batch, loaded = load_batch_tables(lh, name)
    for t in batch.tables:
        s.authorize(permission, table=t.table, branch=name)
    return batch, loaded


def find_batch(lh: Lakehouse, name: str) -> Batch | None:
    """The open batch ``name``, or None."""
    try:
        return load_batch(lh, name)
    except NotFoundError:
        return None


def batch_of(lh: Lakehouse, table: TableId, branch: str) -> Batch | None:
    """The open batch ``table``'s ``branch`` belongs to, or None (a one-table batch: a plain branch)."""
    if all(m.table != str(table) for m in store.open_members(lh.journal.engine, branch)):
        return None
    batch = find_batch(lh, branch)
    return batch if batch is not None and table in batch else None


def is_batch(lh: Lakehouse, name: str) -> bool:
    """True when ``name`` names an open batch of recorded members (not merely a branch)."""
    return find_batch(lh, name) is not None


def open_batches(lh: Lakehouse) -> list[Batch]:
    """Every open batch with at least one member that still has its branch, by name."""
    by_name: dict[str, list[store.Member]] = {}
    for m in store.open_members(lh.journal.engine):
        by_name.setdefault(m.batch, []).append(m)
    out = [_build(lh, name, ms) for name, ms in sorted(by_name.items())]
    return [b for b in out if b.tables]


def batch_tag(name: str) -> str:
    """The tag every table of batch ``name`` gets at its new main: what a consumer reads them at together."""
    return f"batch-{name}"


def branch_for(branch: str | None, batch: str | None) -> str | None:
    """The branch an ingest or a job's open writes: ``batch``'s (a batch's branches are named like it), else
    ``branch`` (None: the caller names one); both validated, and both at once only when equal."""
    if batch is not None:
        validate_branch(batch)
        if branch is not None and branch != batch:
            raise ValidationError("give --branch or --batch, not both: a batch's branches are named like it")
        return batch
    return validate_branch(branch) if branch is not None else None


def refuse_a_published_name(session: Session, action: Action, table: TableId, name: str) -> None:
    """Refuse (journaled, before anything is written) a batch name already published: a table holds its tag
    ``batch-<name>``. Reused, the tag would move on the new batch's tables only and pair a new table with an
    old one. Checked when the batch is not open yet (a batch's first table); an open batch's name is free."""
    lh = session.lakehouse
    if store.open_members(lh.journal.engine, name):
        return
    published = sorted(
        str(tid) for tid, tbl in cat.load_tables(lh.catalog) if batch_tag(name) in tbl.metadata.refs
    )
    if published:
        raise session.refuse(
            action,
            RefusedError(
                f"batch name {name!r} was already published ({', '.join(published)} hold its tag "
                f"{batch_tag(name)}): a published batch's name is not reused, choose another",
                "batch_published",
            ),
            table=table,
            branch=name,
        )


def publish_in_flight(lh: Lakehouse, name: str) -> list[str]:
    """The tables of batch ``name`` whose publish is announced and not resolved (a publish in flight)."""
    return sorted(
        i.table for i in lh.journal.pending_intents() if i.action is Action.PUBLISH and i.branch == name
    )


def joined_since(lh: Lakehouse, batch: Batch) -> list[str]:
    """Tables that joined ``batch`` after it was read and are writing or have written its branch: what a
    publish of ``batch`` would leave behind as open members of a published batch."""
    known = {str(t) for t in batch.table_ids}
    late = []
    for m in store.open_members(lh.journal.engine, batch.name):
        if m.table in known or m.table in late:
            continue
        writing = lh.journal.pending_intent_on(m.table, batch.name) is not None
        try:
            has_branch = batch.name in lh.table(TableId.parse(m.table)).metadata.refs
        except NotFoundError:
            has_branch = False
        if writing or has_branch:
            late.append(m.table)
    return sorted(late)


def refuse_a_join_in_flight(lh: Lakehouse, name: str, table: TableId) -> None:
    """After ``table`` joined batch ``name`` (its membership committed): a ConflictError, the membership closed
    ``refused``, when the batch's publish is in flight. A publish reads its members after its intents are
    committed, and a join looks for those intents after its membership is: one of the two sees the other,
    so a table never joins a batch that publishes without it."""
    busy = publish_in_flight(lh, name)
    if not busy:
        return
    store.close_members(lh.journal.engine, name, [str(table)], "refused")
    raise ConflictError(
        f"{table} cannot join batch {name}: its publish is in flight ({', '.join(busy)}); nothing was written."
        " A published batch's name is not reused: write the table in a batch of another name"
    )


def join(lh: Lakehouse, name: str, table: TableId, user: str) -> list[TableId]:
    """Record ``table`` as a member of batch ``name`` (before its branch is written); the tables that joined.

    On the batch's first use, every other table that already has an open branch ``name`` joins too
    (adopted, under the user who adds this table): the failing week's flights, when its airports are added.
    """
    validate_branch(name)
    engine = lh.journal.engine
    first_use = not store.open_members(engine, name)
    joined: list[TableId] = []
    if first_use:
        loaded = cat.load_tables(lh.catalog)
        joined = [tid for tid, tbl in loaded if tid != table and name in tbl.metadata.refs]
    with engine.begin() as conn:
        for tid in joined:
            store.add_member(conn, name, str(tid), user)
        store.add_member(conn, name, str(table), user)
    if joined:
        log.info("batch %s: adopted the open branches of %s", name, ", ".join(map(str, joined)))
    return [*joined, table]
