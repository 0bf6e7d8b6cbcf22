"""Publish (or force, or discard) a batch that spans tables: every table's main moves, or none.

``publish_batch`` authorizes PUBLISH on every table (FORCE_PUBLISH too when forced over a refusal, with the
one-table rules: a reason, and a second admin's approval where the table's policy asks for it), reads the
batch's readiness (:func:`~wap_core.workflow.batch_status.batch_readiness`), then, on the ref-move path of a
batch (:class:`~wap_core.workflow.refmove.BatchMove`):

1. announces ONE intent per table (journal word ``publish``, expected before = main, after = the branch
   head; details: the batch, every table's before/after, ``forced``), all in ONE journal transaction
   (:meth:`~wap_core.store.journal.Journal.begin_intents`): one busy branch refuses the whole batch;
2. commits every table's fast-forward (main to its audited head, the branch removed, tag ``batch-<name>``
   at the head) in one multi-table commit (:func:`~wap_core.lake.multitable.commit_tables`: one database
   transaction of compare-and-swaps on the JDBC catalog; the spec's multi-table commit on REST);
3. resolves every intent (``published``/``forced``) and closes the batch's memberships in ONE
   transaction, then sends ONE notification listing the tables.

Every table's metadata is loaded ONCE per publish, with the batch
(:func:`~wap_core.workflow.batch.load_batch_tables`): the readiness reads it and the commit starts from it,
so the commit's compare-and-swap guards everything checked in between. A table whose pointer moved since it
was loaded fails the whole commit: nothing moved, every intent is resolved ``refused`` naming the table that
lost (:class:`~wap_core.exceptions.ConflictError`); only when every main and branch is still where the
readiness saw it (another ref's commit moved a pointer) is the commit tried once more on fresh metadata. A process
killed in between leaves pending intents that :mod:`wap_core.workflow.reconcile` decides per table from
the metadata, under the original user; on the JDBC catalog either every main moved or none did.

The kill points (``WAP_FAULT``) are declared in :mod:`wap_core.actions.publish_batch`. A discard, of one
table's branch or of a batch, is :mod:`wap_core.workflow.discard`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pyiceberg.table import Table
from sqlalchemy import Connection

from wap_core import notify
from wap_core.exceptions import (
    ConflictError,
    NotFoundError,
    RefusedError,
    ValidationError,
)
from wap_core.faults import fault_point
from wap_core.identifiers import MAIN, TableId, validate_branch
from wap_core.lake import catalog as cat
from wap_core.lake.multitable import (
    Atomicity,
    MultiTableConflictError,
    atomicity,
    commit_tables,
    fast_forward,
)
from wap_core.security.access import Permission
from wap_core.session import Session
from wap_core.states import Action, Outcome, PublishOutcome
from wap_core.store import batches as store
from wap_core.store.journal import Intent
from wap_core.values import JsonObject
from wap_core.workflow.batch import Batch, batch_tag, joined_since, load_batch_tables
from wap_core.workflow.batch_status import BatchReadiness, batch_readiness
from wap_core.workflow.publish import PublishResult
from wap_core.workflow.reconcile import reconcile
from wap_core.workflow.refmove import BatchMove, Notice, TableMove
from wap_core.workflow.review import review_state, second_admin_approval

if TYPE_CHECKING:
    from wap_core.lakehouse import Lakehouse

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BatchPublishResult:
    """The outcome of a batch publish: every table's main move (sorted by table), the batch tag."""

    batch: str
    outcome: PublishOutcome
    tables: tuple[PublishResult, ...]
    tag: str | None
    atomicity: Atomicity
    forced: bool = False
    reason: str | None = None


def _already_published(lh: Lakehouse, name: str) -> BatchPublishResult | None:
    """The batch ``name`` was published before (every membership closed ``published``): say so, move nothing."""
    closed = [m for m in store.members(lh.journal.engine, name) if m.closed_as == "published"]
    if not closed or store.open_members(lh.journal.engine, name):
        return None
    results = []
    for table in sorted({m.table for m in closed}):
        main = cat.ref_snapshot_id(lh.table(TableId.parse(table)), MAIN)
        results.append(PublishResult(table, name, PublishOutcome.ALREADY_PUBLISHED, main, main))
    return BatchPublishResult(
        name, PublishOutcome.ALREADY_PUBLISHED, tuple(results), batch_tag(name), atomicity(lh.catalog)
    )


def _open_batch(s: Session, name: str) -> Batch:
    """The batch, its tables' crashed actions reconciled first (a dead process's intent neither blocks a
    branch nor hides a move that already landed)."""
    return _open_batch_tables(s, name)[0]


def _open_batch_tables(s: Session, name: str) -> tuple[Batch, dict[str, Table]]:
    """:func:`_open_batch` and the metadata each table was read from: ONE load per table, which the
    publish's readiness reads and its commit starts from."""
    lh = s.lakehouse
    for m in store.open_members(lh.journal.engine, name):
        reconcile(lh, m.table)
    return load_batch_tables(lh, name)


def _refuse_all(s: Session, batch: Batch, exc: RefusedError) -> RefusedError:
    """Journal ``exc`` as a refused publish of every table of the batch (one notification); ``exc``."""
    move = BatchMove(
        s, Action.PUBLISH, batch.name, tuple(TableMove(t.table, t.main, t.head) for t in batch.tables)
    )
    return move.refuse(exc)


def _forced_or_refused(s: Session, batch: Batch, ready: BatchReadiness, force: bool) -> bool:
    """Whether the batch publish is forced over refusals (refused, journaled for every table, unless it may
    be): the one-table rules (:func:`wap_core.workflow.publish._forced_or_refused`) on every refused table."""
    if ready.allowed:
        return False
    if not (force and ready.forceable):
        tables = ", ".join(t.table for t in ready.refusals)
        raise _refuse_all(
            s,
            batch,
            RefusedError(f"publish of batch {batch.name} refused ({tables}): {ready.message}", ready.code),
        )
    lh = s.lakehouse
    for t in ready.refusals:
        s.authorize(Permission.FORCE_PUBLISH, table=TableId.parse(t.table), branch=batch.name)
    for t in ready.refusals:
        tid = TableId.parse(t.table)
        rs = t.check.review if t.check.review is not None else review_state(lh, tid, batch.name)
        if rs.policy.force_needs_second_admin and second_admin_approval(lh, rs, s.user) is None:
            raise _refuse_all(
                s,
                batch,
                RefusedError(
                    f"forced publish of batch {batch.name} refused: {t.table}'s policy ({rs.policy.source}) needs an"
                    f" approval of the head from an admin other than {s.user}",
                    "second_admin_missing",
                ),
            )
    return True


def _reloaded_bases(lh: Lakehouse, batch: Batch) -> dict[str, Table] | None:
    """Every table's metadata loaded afresh when each main and branch is still where the readiness saw it
    (another commit of a table, e.g. another branch's ingest, moved its pointer: retry on these); else None."""
    out = {}
    for t in batch.tables:
        try:
            tbl = lh.table(t.table)
        except NotFoundError:  # dropped since: the lost race stands (refused, naming the table)
            return None
        if cat.ref_snapshot_id(tbl, MAIN) != t.main or cat.ref_snapshot_id(tbl, batch.name) != t.head:
            return None
        out[str(t.table)] = tbl
    return out


def publish_batch(
    session: Session, name: str, *, force: bool = False, reason: str | None = None
) -> BatchPublishResult:
    """Publish every table of batch ``name`` (main to its audited head, the branch removed, tag
    ``batch-<name>``), all or none; ``force`` overrides forceable refusals and needs a reason."""
    s = session
    lh = s.lakehouse
    validate_branch(name)
    if force and not (reason and reason.strip()):
        raise ValidationError("--force needs a --reason: a forced publish is journaled with its reason")
    try:
        batch, bases = _open_batch_tables(s, name)  # the one load of every table, passed down
    except NotFoundError:
        done = _already_published(lh, name)
        if done is not None:
            return done
        raise
    for t in batch.tables:
        s.authorize(Permission.PUBLISH, table=t.table, branch=name)
    ready = batch_readiness(lh, batch, bases)
    forced = _forced_or_refused(s, batch, ready, force)
    tag = batch_tag(name)
    tables: JsonObject = {str(t.table): {"before": t.main, "after": t.head} for t in batch.tables}
    move = BatchMove(
        s,
        Action.PUBLISH,
        name,
        tuple(TableMove(t.table, t.main, t.head) for t in batch.tables),
        reason,
        {
            "batch": name,
            "tables": tables,
            "forced": forced,
            "refusal_overridden": ready.code if forced else None,
            "tag": tag,
        },
    )

    def attempt(base: dict[str, Table]) -> None:
        commit_tables(
            lh.catalog,
            [
                fast_forward(t.table, base[str(t.table)], to=t.head, branch=name, tag=tag)
                for t in batch.tables
            ],
            after_write=lambda: fault_point("after_publish_batch_write"),
            in_transaction=lambda: fault_point("in_publish_batch_transaction"),
        )

    def commit(_: list[Intent]) -> None:
        # from the metadata the batch and its readiness were read from: each table's compare-and-swap fails
        # if its pointer moved since. A MultiTableConflictError (the table that lost) is a lost race, unless
        # every main and branch is still where the readiness saw it (another branch's commit moved a
        # pointer): then once more from fresh metadata, as a one-table publish retries.
        late = joined_since(lh, batch)  # read after the intents are committed (see refuse_a_join_in_flight)
        if late:
            raise ConflictError(
                f"{', '.join(late)} joined batch {name} after its tables were read: publishing would leave"
                " it behind; audit and publish the batch again"
            )
        try:
            attempt(bases)
        except MultiTableConflictError:
            fresh = _reloaded_bases(lh, batch)
            if fresh is None:
                raise
            log.info("batch %s: a table's metadata moved on another ref; committing again", name)
            attempt(fresh)

    def close(conn: Connection) -> None:
        store.close_members(conn, name, [str(t) for t in batch.table_ids], "published")

    outcome = Outcome.FORCED if forced else Outcome.PUBLISHED
    moves = "; ".join(f"{t.table} main {t.main} -> {t.head}" for t in batch.tables)
    why = f"; forced over '{ready.message}': {reason}" if forced else ""
    summary = (
        f"batch {name} published, all {len(batch.tables)} tables in one commit (tag {tag}): {moves}{why}"
    )
    move.run(commit, outcome, Notice(notify.Event.PUBLISHED, summary, None), also=close)
    results = tuple(
        PublishResult(str(t.table), name, PublishOutcome.PUBLISHED, t.main, t.head, forced, reason)
        for t in batch.tables
    )
    return BatchPublishResult(name, PublishOutcome.PUBLISHED, results, tag, ready.atomicity, forced, reason)
