"""Discard: remove a batch's branches without publishing them (mains untouched); a branch is a batch of one.

One path for one table or many (issue 38): ``discard(table, branch)`` and ``discard_batch(name)`` both
declare the tables whose branch goes (:class:`~wap_core.workflow.refmove.TableMove`) and run
:func:`_discard`, the one ref move of a discard (:class:`~wap_core.workflow.refmove.BatchMove`):

1. one ``discard`` intent per table (expected before = the branch head it was read at), all in ONE journal
   transaction; a busy branch refuses them all;
2. every branch removed in ONE :func:`~wap_core.lake.multitable.commit_tables` (each required still at the
   head it was read at: on the JDBC catalog one database transaction of compare-and-swaps; on REST the
   multi-table endpoint, or the table's own commit for one table);
3. every outcome, and the closing of the tables' batch memberships, in ONE transaction; one notification.

A branch that moved since it was read refuses the whole discard (journaled ``refused`` naming the table):
no branch went. One set of fault points (``WAP_FAULT``, declared in :mod:`wap_core.actions.discard`):
``after_discard_batch_intents``, ``after_discard_batch_write``, ``in_discard_batch_transaction``,
``after_discard_batch_commit``, ``before_discard_batch_outcome``; a killed discard is judged per table by
reconcile (the ``discard`` judge).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from pyiceberg.table import Table
from sqlalchemy import Connection

from wap_core import notify
from wap_core.exceptions import ConflictError
from wap_core.faults import fault_point
from wap_core.identifiers import TableId, validate_branch
from wap_core.lake import catalog as cat
from wap_core.lake.multitable import commit_tables, ref_changes
from wap_core.security.access import Permission
from wap_core.session import Session, session_of
from wap_core.states import Action, Outcome
from wap_core.store import batches as store
from wap_core.store.journal import Intent
from wap_core.workflow.batch import open_batch_for
from wap_core.workflow.reconcile import reconciled_table
from wap_core.workflow.refmove import BatchMove, Notice, TableMove

if TYPE_CHECKING:
    from wap_core.lakehouse import Lakehouse


@dataclass(frozen=True)
class DiscardResult:
    """The outcome of a discard: the removed branch and its last head."""

    table: str
    branch: str
    head: int
    reason: str | None


@dataclass(frozen=True)
class BatchDiscardResult:
    """The outcome of a batch discard: every table's removed branch."""

    batch: str
    tables: tuple[DiscardResult, ...]
    reason: str | None = None


def discard(
    session: Session | Lakehouse,
    table: TableId,
    branch: str,
    *,
    reason: str | None = None,
    user: str | None = None,
) -> DiscardResult:
    """Remove ``table``'s ``branch`` without publishing it (journaled): the discard of a batch of one.

    A table's branch of a batch discarded alone leaves the batch (its membership closed ``discarded``): a
    later branch of that name on that table is its own."""
    s = session_of(session, user)
    validate_branch(branch)
    s.authorize(Permission.DISCARD, table=table, branch=branch)
    tbl = reconciled_table(s.lakehouse, table)
    head = cat.require_branch(tbl, table, branch)
    (done,) = _discard(s, branch, {table: (head, tbl)}, reason, named=False)
    return done


def discard_batch(session: Session, name: str, *, reason: str | None = None) -> BatchDiscardResult:
    """Remove every table's branch of batch ``name``, all or none, in one multi-table commit (mains untouched)."""
    s = session
    validate_branch(name)
    batch, loaded = open_batch_for(s, name, Permission.DISCARD)
    read = {t.table: (t.head, loaded[str(t.table)]) for t in batch.tables}
    return BatchDiscardResult(name, _discard(s, name, read, reason, named=True), reason)


def _discard(
    s: Session, branch: str, read: dict[TableId, tuple[int, Table]], reason: str | None, *, named: bool
) -> tuple[DiscardResult, ...]:
    """The one path: remove ``branch`` of every table of ``read`` (table -> the head it was read at and the
    metadata it was read from), all or none; ``named``: a recorded batch (its journal details and wording)."""
    lh = s.lakehouse
    tables = sorted(read, key=lambda t: (t.namespace, t.name))
    details = {"batch": branch, "tables": {str(t): {"head": read[t][0]} for t in tables}} if named else {}
    move = BatchMove(
        s,
        Action.DISCARD,
        branch,
        tuple(TableMove(t, read[t][0], None) for t in tables),
        reason,
        details,
        subject=None if named else f"{tables[0]} {branch}",
    )
    for t in tables:
        if cat.ref_snapshot_id(read[t][1], branch) != read[t][0]:
            raise move.refuse(
                ConflictError(
                    f"discard of {move.label} refused: {t}'s branch moved since it was read; no branch was removed"
                )
            )

    def commit(_: list[Intent]) -> None:  # a MultiTableConflictError (the branch that moved) refuses all
        commit_tables(
            lh.catalog,
            [ref_changes(t, read[t][1], expect={branch: read[t][0]}, remove=(branch,)) for t in tables],
            after_write=lambda: fault_point("after_discard_batch_write"),
            in_transaction=lambda: fault_point("in_discard_batch_transaction"),
        )

    def close(conn: Connection) -> None:  # a table's branch of a batch discarded (alone or with it) leaves it
        store.close_members(conn, branch, [str(t) for t in tables], "discarded")

    why = f": {reason}" if reason else ""
    if named:
        summary = (
            f"batch {branch} discarded, all {len(tables)} tables in one commit: the branches of "
            f"{', '.join(map(str, tables))} removed; mains untouched{why}"
        )
        snapshot = None
    else:
        snapshot = read[tables[0]][0]
        summary = f"branch {branch} of {tables[0]} discarded (head {snapshot}); main untouched{why}"
    move.run(commit, Outcome.DISCARDED, Notice(notify.Event.DISCARDED, summary, snapshot), also=close)
    return tuple(DiscardResult(str(t), branch, read[t][0], reason) for t in tables)
