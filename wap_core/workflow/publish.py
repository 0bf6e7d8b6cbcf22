"""Publish: fast-forward main to the audited head of every table of a batch, all or none; a branch is a batch of one.

One path for one table or many (issue 38). ``publish(table, branch)`` reads the branch's readiness
(:func:`~wap_core.workflow.readiness.publish_readiness`: a branch of a batch that spans tables is refused,
``in_batch``), ``publish_batch(name)`` every table's (:func:`~wap_core.workflow.readiness.batch_readiness`);
both run :func:`_publish`, the one ref move of a publish (:class:`~wap_core.workflow.refmove.BatchMove`):

1. one ``publish`` intent per table (expected before = main, after = the branch head), all in ONE journal
   transaction: one busy branch refuses the whole publish;
2. every table's fast-forward (main to its audited head, the branch removed; a recorded batch's tables also
   get the tag ``batch-<name>``) in ONE :func:`~wap_core.lake.multitable.commit_tables`, from the metadata the
   readiness read, so its compare-and-swap guards everything checked in between (the JDBC catalog: one
   database transaction of compare-and-swaps; REST: the multi-table endpoint, or the table's own commit for
   one table);
3. every outcome (``published``, ``forced``) and the closing of the tables' batch memberships in ONE
   transaction; one notification.

A pointer that moved since it was read fails the whole commit: nothing moved, every intent is ``refused``
naming the table that lost (:class:`~wap_core.exceptions.ConflictError`). Only while every main and branch
is still where the readiness saw it (another ref's commit moved a pointer) is the commit tried again on fresh
metadata (:data:`~wap_core.lake.refs.RETRY`). When every main already reached its head (a concurrent publish
of the same branch won), the intents are ``abandoned`` and the result is ``already_published``. A process
killed in between leaves pending intents that :mod:`wap_core.workflow.reconcile` decides per table from the
metadata. One set of fault points (``WAP_FAULT``), declared in :mod:`wap_core.actions.publish`; a forced
publish (:mod:`wap_core.actions.force`) takes the same path.

A rebase (a branch's appended rows replayed onto a main that moved) is :mod:`wap_core.workflow.rebase`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
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
from wap_core.lake.refs import (
    RETRY,
)
from wap_core.security.access import Permission
from wap_core.session import Session, session_of
from wap_core.states import Action, Outcome, PublishOutcome
from wap_core.store import batches as store
from wap_core.store.journal import Intent
from wap_core.workflow.batch import Batch, batch_of, batch_tag, joined_since, open_batch_for
from wap_core.workflow.readiness import BatchReadiness, batch_readiness, publish_readiness, readiness_of_one
from wap_core.workflow.reconcile import (
    reconciled_table,
)
from wap_core.workflow.refmove import BatchMove, Notice, TableMove, Unneeded
from wap_core.workflow.review import review_state, second_admin_approval

if TYPE_CHECKING:
    from wap_core.lakehouse import Lakehouse

log = logging.getLogger(__name__)

_LINEAGE_SCAN = 1000  # newest main snapshots searched for a published branch


@dataclass(frozen=True)
class PublishResult:
    """The outcome of a publish: main before and after, and whether it was forced."""

    table: str
    branch: str
    outcome: PublishOutcome
    main_before: int | None
    main_after: int | None
    forced: bool = False
    reason: str | None = None

    @property
    def moved_main(self) -> bool:
        """True when the publish moved main (not already published)."""
        return self.outcome is PublishOutcome.PUBLISHED


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


@dataclass(frozen=True)
class _Target:
    """One table a publish moves: its main and branch head as read, and the metadata they were read from."""

    table: TableId
    main: int | None
    head: int
    tbl: Table


def _branch_already_published(lh: Lakehouse, table: TableId, branch: str, tbl: Table) -> int | None:
    """The snapshot a previous publish of ``branch`` moved main to, if it is still in main's history.

    The journal says so; so does main's lineage, whose ingest snapshots carry ``wap.branch``
    (this also covers a concurrent publisher that committed but has not journaled yet).
    """
    main_ids = {s.snapshot_id for s in cat.ancestors(tbl, cat.ref_snapshot_id(tbl, MAIN))}
    for e in lh.journal.history(str(table), branch=branch, action=Action.PUBLISH, limit=50):
        if e.outcome in (Outcome.PUBLISHED, Outcome.FORCED) and e.snapshot_after in main_ids:
            return e.snapshot_after
    for n, snap in enumerate(cat.ancestors(tbl, cat.ref_snapshot_id(tbl, MAIN))):
        if n >= _LINEAGE_SCAN:
            break
        if cat.summary_get(snap, "wap.branch") == branch:
            _record_untracked_publish(lh, table, branch, snap.snapshot_id)
            return snap.snapshot_id
    return None


def _record_untracked_publish(lh: Lakehouse, table: TableId, branch: str, snapshot_id: int) -> None:
    """Main holds the branch yet no journaled publish put it there: say so once, never answer silently.

    Every wap publish announces an intent first, and a crashed one has been reconciled by now
    (``lh.table``); so this is a move made outside wap_core (or one still in flight elsewhere,
    which will record itself): who and why are unknown, and the journal says exactly that.
    """
    if lh.journal.pending_intent_on(str(table), branch) is not None:
        return
    lh.journal.record(
        user="unknown",
        action=Action.PUBLISH,
        table=str(table),
        branch=branch,
        snapshot_after=snapshot_id,
        outcome=Outcome.PUBLISHED,
        reason="found in main's history without a journaled publish: who and why are unknown",
        details={"untracked": True},
    )


def _batch_already_published(lh: Lakehouse, name: str) -> BatchPublishResult | None:
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


def publish(
    session: Session | Lakehouse,
    table: TableId,
    branch: str,
    *,
    force: bool = False,
    reason: str | None = None,
    user: str | None = None,
) -> PublishResult:
    """Publish the audited branch head to main (journaled): the publish of a batch of one. ``force``
    overrides a forceable refusal and needs a reason."""
    s = session_of(session, user)
    lh = s.lakehouse
    validate_branch(branch)
    _require_reason(force, reason)
    s.authorize(Permission.PUBLISH, table=table, branch=branch)
    tbl = reconciled_table(lh, table)
    main_before = cat.ref_snapshot_id(tbl, MAIN)
    if branch not in tbl.metadata.refs:
        if _branch_already_published(lh, table, branch, tbl) is not None:
            return PublishResult(
                str(table), branch, PublishOutcome.ALREADY_PUBLISHED, main_before, main_before
            )
        cat.require_branch(tbl, table, branch)  # raises NotFoundError naming the open branches
    head = tbl.metadata.refs[branch].snapshot_id
    ready = readiness_of_one(lh, table, branch, head, publish_readiness(lh, table, branch, tbl))
    target = _Target(table, main_before, head, tbl)
    (done,) = _publish(s, branch, (target,), ready, force, reason, batch=batch_of(lh, table, branch))
    return done


def publish_batch(
    session: Session, name: str, *, force: bool = False, reason: str | None = None
) -> BatchPublishResult:
    """Publish every table of batch ``name`` (main to its audited head, the branch removed, tag
    ``batch-<name>``), all or none; ``force`` overrides forceable refusals and needs a reason."""
    s = session
    lh = s.lakehouse
    validate_branch(name)
    _require_reason(force, reason)
    try:
        batch, bases = open_batch_for(s, name, Permission.PUBLISH)  # the one load of every table, passed down
    except NotFoundError:
        done = _batch_already_published(lh, name)
        if done is not None:
            return done
        raise
    ready = batch_readiness(lh, batch, bases)
    targets = tuple(_Target(t.table, t.main, t.head, bases[str(t.table)]) for t in batch.tables)
    results = _publish(s, name, targets, ready, force, reason, batch=batch, named=True)
    return BatchPublishResult(
        name, results[0].outcome, results, batch_tag(name), ready.atomicity, results[0].forced, reason
    )


def _require_reason(force: bool, reason: str | None) -> None:
    if force and not (reason and reason.strip()):
        raise ValidationError("--force needs a --reason: a forced publish is journaled with its reason")


def _forced_or_refused(move: BatchMove, ready: BatchReadiness, force: bool, *, named: bool) -> bool:
    """Whether the publish is forced over refusals (refused, journaled for every table, unless it may be): a
    forced publish is the admins' call (FORCE_PUBLISH on every refused table), and a table's policy may want
    a second admin's approval of its head."""
    if ready.allowed:
        return False
    s = move.session
    if not (force and ready.forceable):
        if named:
            tables = ", ".join(t.table for t in ready.refusals)
            why = f"publish of batch {move.branch} refused ({tables}): {ready.message}"
        else:
            why = f"publish of {move.label} refused: {ready.refusals[0].check.message}"
        raise move.refuse(RefusedError(why, ready.code))
    for t in ready.refusals:
        s.authorize(Permission.FORCE_PUBLISH, table=TableId.parse(t.table), branch=move.branch)
    for t in ready.refusals:
        tid = TableId.parse(t.table)
        rs = t.check.review if t.check.review is not None else review_state(s.lakehouse, tid, move.branch)
        if rs.policy.force_needs_second_admin and second_admin_approval(s.lakehouse, rs, s.user) is None:
            whose = f"{t.table}'s policy" if named else "the policy"
            raise move.refuse(
                RefusedError(
                    f"forced publish of {move.label} refused: {whose} ({rs.policy.source}) needs an approval of"
                    f" the head from an admin other than {s.user}",
                    "second_admin_missing",
                )
            )
    return True


def _reloaded(lh: Lakehouse, branch: str, targets: tuple[_Target, ...]) -> dict[TableId, Table] | None:
    """Every table's metadata loaded afresh when each main and branch is still where the readiness saw it
    (another commit of a table, e.g. another branch's ingest, moved its pointer: retry on these); else None."""
    out = {}
    for t in targets:
        try:
            tbl = lh.table(t.table)
        except NotFoundError:  # dropped since: the lost race stands (refused, naming the table)
            return None
        if cat.ref_snapshot_id(tbl, MAIN) != t.main or cat.ref_snapshot_id(tbl, branch) != t.head:
            return None
        out[t.table] = tbl
    return out


def _already_there(lh: Lakehouse, targets: tuple[_Target, ...]) -> bool:
    """True when every table's main is at its head now (another commit published them)."""
    try:
        return all(cat.ref_snapshot_id(lh.table(t.table), MAIN) == t.head for t in targets)
    except NotFoundError:
        return False


def _publish(
    s: Session,
    branch: str,
    targets: tuple[_Target, ...],
    ready: BatchReadiness,
    force: bool,
    reason: str | None,
    *,
    batch: Batch | None,
    named: bool = False,
) -> tuple[PublishResult, ...]:
    """The one path: fast-forward every table of ``targets`` to its head, all or none; ``named``: a recorded
    batch's publish (its tag, journal details and wording); ``batch``: the open batch the tables belong to
    (a table that joined it since it was read refuses the publish)."""
    lh = s.lakehouse
    move = BatchMove(
        s,
        Action.PUBLISH,
        branch,
        tuple(TableMove(t.table, t.main, t.head) for t in targets),
        reason,
        subject=None if named else f"{targets[0].table} {branch}",
    )
    forced = _forced_or_refused(move, ready, force, named=named)
    tag = batch_tag(branch) if named else None
    details: dict[str, object] = {"forced": forced, "refusal_overridden": ready.code if forced else None}
    if named:
        tables = {str(t.table): {"before": t.main, "after": t.head} for t in targets}
        details = {"batch": branch, "tables": tables, **details, "tag": tag}
    move = replace(move, details=details)

    def attempt(base: Mapping[TableId, Table]) -> None:
        commit_tables(
            lh.catalog,
            [fast_forward(t.table, base[t.table], to=t.head, branch=branch, tag=tag) for t in targets],
            after_write=lambda: fault_point("after_publish_batch_write"),
            in_transaction=lambda: fault_point("in_publish_batch_transaction"),
        )

    unneeded: list[Unneeded] = []  # what the commit step found, whoever resolves the intents

    def commit(_: list[Intent]) -> Unneeded | None:
        # from the metadata the readiness read: each table's compare-and-swap fails if its pointer moved since.
        # A MultiTableConflictError (the table that lost) is a lost race, unless every main and branch is still
        # where the readiness saw it (another ref's commit moved a pointer): then again from fresh metadata.
        late = joined_since(lh, batch) if batch is not None else []  # read after the intents are committed
        if late:
            raise ConflictError(
                f"{', '.join(late)} joined batch {branch} after its tables were read: publishing would leave"
                " it behind; audit and publish the batch again"
            )
        base: Mapping[TableId, Table] = {t.table: t.tbl for t in targets}
        for n in range(RETRY.attempts):
            try:
                attempt(base)
                return None
            except MultiTableConflictError:
                fresh = _reloaded(lh, branch, targets)
                if fresh is None or n == RETRY.attempts - 1:
                    if _already_there(lh, targets):
                        unneeded.append(Unneeded("main already reached the branch head by another commit"))
                        return unneeded[0]
                    raise
                log.info(
                    "publish of %s: a table's metadata moved on another ref; committing again", move.label
                )
                time.sleep(RETRY.delay(n))
                base = fresh
        raise AssertionError("unreachable")  # pragma: no cover

    def close(conn: Connection) -> None:  # the tables' memberships of the batch (if any) close as published
        store.close_members(conn, branch, [str(t.table) for t in targets], "published")

    outcome = Outcome.FORCED if forced else Outcome.PUBLISHED
    if named:
        moves = "; ".join(f"{t.table} main {t.main} -> {t.head}" for t in targets)
        why = f"; forced over '{ready.message}': {reason}" if forced else ""
        summary = (
            f"batch {branch} published, all {len(targets)} tables in one commit (tag {tag}): {moves}{why}"
        )
        notice = Notice(notify.Event.PUBLISHED, summary, None)
    else:
        (t,) = targets
        check = ready.tables[0].check
        summary = f"main of {t.table} moved from snapshot {t.main} to {t.head}" + (
            f"; forced over '{check.message}': {reason}" if forced else f" ({check.message})"
        )
        notice = Notice(notify.Event.PUBLISHED, summary, t.head)
    move.run(commit, outcome, notice, also=close)
    if unneeded:  # (not read off the outcome rows: a reconcile tick may have resolved the intents first)
        return tuple(
            PublishResult(str(t.table), branch, PublishOutcome.ALREADY_PUBLISHED, t.main, t.head)
            for t in targets
        )
    return tuple(
        PublishResult(str(t.table), branch, PublishOutcome.PUBLISHED, t.main, t.head, forced, reason)
        for t in targets
    )


def require_known_table(lh: Lakehouse, table: TableId) -> None:
    """NotFoundError if the catalog has no such table."""
    if not cat.table_exists(lh.catalog, table):
        raise NotFoundError(f"table {table} does not exist")
