"""Guarded publish (fast-forward), rebase and discard.

Publish moves main to the audited branch head and removes the branch in ONE
metadata commit, with optimistic-concurrency requirements on both refs
(main must still be at the fork, the branch still at the audited snapshot).
A concurrent publish or a commit to main in between makes the commit fail;
nothing is half-applied and no write is lost. No data file is written.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from pyiceberg.table import Table

from wap_core import notify
from wap_core.exceptions import (
    CommitConflictError,
    ConflictError,
    NotFoundError,
    RefusedError,
    ValidationError,
)
from wap_core.faults import fault_point
from wap_core.identifiers import MAIN, TableId, validate_branch
from wap_core.lake import catalog as cat
from wap_core.lake.batch import batch_frame
from wap_core.lake.refs import (
    commit_conflicts,
    commit_with_retry,
    point_main,
    remove_branch_quietly,
    remove_branches,
    with_commit_retry,
)
from wap_core.samples import load_sample, sample_json
from wap_core.security.access import Permission
from wap_core.session import Session, session_of
from wap_core.states import Action, BranchStatus, Outcome, PublishOutcome, RebaseOutcome, branch_status
from wap_core.store.journal import Intent
from wap_core.workflow.audit import AuditResult, audit_branch, latest_audit
from wap_core.workflow.batch import Batch, batch_of
from wap_core.workflow.reconcile import INTENT_PROPERTY, reconciled_table, temp_branch_name, temp_branches_of
from wap_core.workflow.refmove import Moved, Notice, RefMove
from wap_core.workflow.review import ReviewStatus, review_state, second_admin_approval

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from wap_core.lakehouse import Lakehouse

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
class RebaseResult:
    """The outcome of a rebase: the branch's old and new head and fork."""

    table: str
    branch: str
    outcome: RebaseOutcome
    old_head: int
    new_head: int
    old_fork: int | None
    new_fork: int | None
    rows: int
    audit: AuditResult | None = (
        None  # the audit of the new head, part of the rebase (None: up to date, nothing moved)
    )


@dataclass(frozen=True)
class PublishCheck:
    """Whether a branch may be published now, and if not, why (for the console's disabled button)."""

    allowed: bool
    code: str  # ok | in_batch | not_audited | stale | audit_failed | main_moved | empty | author_unknown | changes_requested | approvals_missing
    message: str
    forceable: bool
    review: ReviewStatus | None = (
        None  # the head's review status against the table's policy (None: not reached)
    )


def publish_readiness(
    lh: Lakehouse,
    table: TableId,
    branch: str,
    tbl: Table | None = None,
    *,
    alone: bool = True,
    batch: Batch | None = None,
) -> PublishCheck:
    """Whether the branch can be published now and, if not, why (metadata and journal only).

    ``alone`` (a one-table publish): a branch of a batch that spans several tables is refused (``in_batch``,
    not forceable): its tables are published together or not at all (``wap publish --batch``). The batch's
    own readiness asks with ``alone=False`` and its ``batch`` already loaded (``tbl`` too: no reload).
    """
    tbl = tbl if tbl is not None else lh.table(table)
    cat.require_branch(tbl, table, branch)
    if alone and (b := batch_of(lh, table, branch)) is not None and len(b.tables) > 1:
        others = ", ".join(str(t) for t in b.table_ids if t != table)
        return PublishCheck(
            False,
            "in_batch",
            f"branch {branch} of {table} belongs to batch {b.name} with {others}: its tables are published"
            f" together or not at all (publish the batch: wap publish --batch {b.name})",
            False,
        )
    lin = cat.lineage(tbl, branch)
    if lin.published:
        return PublishCheck(False, "empty", "the branch has no commits since main: nothing to publish", False)
    if lin.main_moved:
        return PublishCheck(
            False,
            "main_moved",
            "main moved since this branch forked: rebase the branch, audit it again, then publish",
            False,
        )
    audit = latest_audit(lh, table, branch)
    status = branch_status(lin.head, audit)
    if audit is None or status is BranchStatus.NOT_AUDITED:
        return PublishCheck(False, "not_audited", "the branch has not been audited", True)
    if status is BranchStatus.STALE:
        return PublishCheck(
            False,
            "stale",
            f"the branch moved since its last audit (audited snapshot {audit.snapshot_id}, head {lin.head}): audit it again",
            True,
        )
    rs = review_state(lh, table, branch, tbl, batch=batch)
    if status.blocks_publish:
        bad = audit.failed_checks
        also = f"; {rs.message}" if rs.message else ""
        return PublishCheck(
            False,
            "audit_failed",
            f"the latest audit failed: {', '.join(bad) or 'see the audit'}{also}",
            True,
            rs,
        )
    # the audit passed on the head: the table's review policy must be satisfied on the same head
    if rs.policy.author_cannot_approve and not rs.authors:
        return PublishCheck(
            False,
            "author_unknown",
            f"no author is journaled for {table} {branch} (written by a job that did not open it): four-eyes "
            f"review cannot tell who wrote it; open it or take it over first: wap branch open {table} --branch {branch}",
            True,
            rs,
        )
    if rs.changes_requested:
        return PublishCheck(False, "changes_requested", rs.message, True, rs)
    if rs.missing:
        return PublishCheck(False, "approvals_missing", rs.message, True, rs)
    approved = f"; approved by {', '.join(r.user for r in rs.approvals)}" if rs.approvals else ""
    return PublishCheck(
        True, "ok", f"audit {audit.status} at snapshot {audit.snapshot_id}{approved}", False, rs
    )


def _already_published(lh: Lakehouse, table: TableId, branch: str, tbl: Table) -> int | None:
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


def _forced_or_refused(move: RefMove, ready: PublishCheck, force: bool, tbl: Table) -> bool:
    """Whether the publish is forced over a refusal (refused, journaled, unless it may be); a forced
    publish is the admins' call, and a policy may want a second admin's approval of the head."""
    lh, user, table, branch = move.lh, move.user, move.table, move.branch
    if not ready.allowed and not (force and ready.forceable):
        raise move.refuse(RefusedError(f"publish of {table} {branch} refused: {ready.message}", ready.code))
    if ready.allowed:
        return False
    move.session.authorize(Permission.FORCE_PUBLISH, table=table, branch=branch)
    rs = ready.review if ready.review is not None else review_state(lh, table, branch, tbl)
    if rs.policy.force_needs_second_admin and second_admin_approval(lh, rs, user) is None:
        raise move.refuse(
            RefusedError(
                f"forced publish of {table} {branch} refused: the policy ({rs.policy.source}) needs an approval of the head "
                f"from an admin other than {user}",
                "second_admin_missing",
            )
        )
    return True


def publish(
    session: Session | Lakehouse,
    table: TableId,
    branch: str,
    *,
    force: bool = False,
    reason: str | None = None,
    user: str | None = None,
) -> PublishResult:
    """Publish the audited branch head to main (journaled); ``force`` overrides a forceable refusal and needs a reason."""
    s = session_of(session, user)
    lh, user = s.lakehouse, s.user
    validate_branch(branch)
    if force and not (reason and reason.strip()):
        raise ValidationError("--force needs a --reason: a forced publish is journaled with its reason")
    s.authorize(Permission.PUBLISH, table=table, branch=branch)
    tbl = reconciled_table(lh, table)
    main_before = cat.ref_snapshot_id(tbl, MAIN)
    if branch not in tbl.metadata.refs:
        if _already_published(lh, table, branch, tbl) is not None:
            return PublishResult(
                str(table), branch, PublishOutcome.ALREADY_PUBLISHED, main_before, main_before
            )
        cat.require_branch(tbl, table, branch)  # raises NotFoundError naming the open branches
    ready = publish_readiness(lh, table, branch, tbl)
    head = tbl.metadata.refs[branch].snapshot_id
    move = RefMove(s, Action.PUBLISH, table, branch, main_before, head, reason)
    forced = _forced_or_refused(move, ready, force, tbl)
    move = replace(move, details={"forced": forced, "refusal_overridden": ready.code if forced else None})

    def move_main(t: Table) -> None:
        point_main(t, head, remove=branch)

    def unrelated(t: Table) -> bool:  # another branch of the table committed: retry on fresh metadata
        return cat.ref_snapshot_id(t, MAIN) == main_before and cat.ref_snapshot_id(t, branch) == head

    def commit(_: Intent) -> Moved:
        try:
            commit_with_retry(lh.catalog, table, move_main, retry_if=unrelated, tbl=tbl)
        except CommitConflictError as exc:
            if cat.ref_snapshot_id(lh.table(table), MAIN) == head:
                why = "main already reached the branch head by another commit"
                return Moved(Outcome.ABANDONED, None, done=False, details={"why": why})
            # main or the branch changed under us: nothing was published, nothing is lost (journaled as refused)
            raise ConflictError(
                f"publish of {table} {branch} lost a race: main or the branch changed during publish; nothing was published ({exc})"
            ) from exc
        return Moved(Outcome.FORCED if forced else Outcome.PUBLISHED, head)

    def notice(_: Moved) -> Notice:
        return Notice(
            notify.Event.PUBLISHED,
            f"main of {table} moved from snapshot {main_before} to {head}"
            + (f"; forced over '{ready.message}': {reason}" if forced else f" ({ready.message})"),
            head,
        )

    if not move.run(commit, notice).done:
        return PublishResult(str(table), branch, PublishOutcome.ALREADY_PUBLISHED, main_before, head)
    return PublishResult(str(table), branch, PublishOutcome.PUBLISHED, main_before, head, forced, reason)


def replayed_properties(lin: cat.Lineage) -> dict[str, str]:
    """The snapshot properties of a branch's batch replayed onto main by a rebase (one table's, or each table's
    of a batch rebase, :mod:`wap_core.workflow.batch_moves`).

    ``lin`` is the branch's lineage before the rebase. The replayed snapshot keeps its batch's provenance
    (``wap.source``, ``wap.format``, ``wap.batch-id``, ``wap.branch``, ``wap.user``: the newest of the
    branch's snapshots that carries each), records the head it replaces (``wap.rebased-from``), and sums the
    malformed rows of every replayed snapshot (``wap.malformed-rows``, their samples in
    ``wap.malformed-sample``), so the rebased head's audit and Review read what the ingest recorded.
    """
    props: dict[str, str] = {"wap.rebased-from": str(lin.head)}
    malformed, samples = 0, []
    for s in lin.new_snapshots:
        for key in ("wap.source", "wap.format", "wap.batch-id", "wap.branch", "wap.user"):
            if (val := cat.summary_get(s, key)) is not None:
                props[key] = val
        malformed += int(cat.summary_get(s, "wap.malformed-rows") or 0)
        samples += load_sample(cat.summary_get(s, "wap.malformed-sample"))
    props["wap.malformed-rows"] = str(malformed)
    props["wap.malformed-sample"] = sample_json(samples)
    return props


def rebase(
    session: Session | Lakehouse, table: TableId, branch: str, *, user: str | None = None
) -> RebaseResult:
    """Replay the branch's appended rows onto current main, then audit the new head (as ingest does).

    The old branch stays intact until an atomic swap. The audit runs after the swap: a failing audit
    leaves the branch rebased (its result in ``audit``), never unswapped.
    """
    s = session_of(session, user)
    lh, user = s.lakehouse, s.user
    validate_branch(branch)
    s.authorize(Permission.REBASE, table=table, branch=branch)
    tbl = reconciled_table(lh, table)
    cat.require_branch(tbl, table, branch)
    lin = cat.lineage(tbl, branch)
    if not lin.main_moved:
        return RebaseResult(
            str(table), branch, RebaseOutcome.UP_TO_DATE, lin.head, lin.head, lin.fork, lin.fork, 0
        )
    ops = [cat.snapshot_operation(s) for s in lin.new_snapshots]
    move = RefMove(s, Action.REBASE, table, branch, lin.head)
    if any(op != "append" for op in ops):
        raise move.refuse(
            RefusedError(
                f"rebase of {table} {branch} refused: the branch holds non-append commits ({', '.join(sorted(set(ops)))}); only appended batches can be replayed",
                "not_append",
            )
        )
    main_head = lin.main_head
    assert main_head is not None
    tmp = temp_branch_name(branch, uuid.uuid4().hex[:8])
    props = replayed_properties(lin)
    rows = sum(int(cat.summary_get(s, "added-records") or 0) for s in lin.new_snapshots)
    move = replace(move, details={"tmp": tmp, "old_fork": lin.fork, "new_fork": main_head, "rows": rows})

    def commit(intent: Intent) -> Moved:
        props[INTENT_PROPERTY] = str(intent.id)
        t = tbl
        # temp branches left by crashed rebases of this branch (we hold the branch: none of its rebases is in flight)
        in_use = {p.details.get("tmp") for p in lh.journal.pending_intents(str(table)) if p.id != intent.id}
        leftovers = [n for n in temp_branches_of(t, branch) if n not in in_use]
        if leftovers:
            remove_branches(lh.catalog, str(table), leftovers)
            t = lh.table(table)
        with commit_conflicts():
            t.manage_snapshots().create_branch(main_head, tmp).commit()
        fault_point("after_rebase_temp_branch")
        try:
            new_head = _replay_and_swap(lh, table, branch, lin, tmp, props)
        except CommitConflictError as exc:
            remove_branch_quietly(lh.catalog, table, tmp)
            raise ConflictError(
                f"rebase of {table} {branch} lost a race with another change; the branch is unchanged ({exc})"
            ) from exc
        except Exception:
            remove_branch_quietly(lh.catalog, table, tmp)
            raise
        fault_point("after_rebase_swap")
        return Moved(Outcome.REBASED, new_head)

    new_head = move.run(commit).snapshot_after
    assert new_head is not None
    # like ingest's, the audit of the replayed batch is part of the rebase (authorized above as REBASE):
    # the branch's earlier audit is stale now, and publish needs one on the new head
    audit = audit_branch(lh, table, branch, user=user)
    return RebaseResult(
        str(table), branch, RebaseOutcome.REBASED, lin.head, new_head, lin.fork, main_head, rows, audit
    )


def _replay_and_swap(
    lh: Lakehouse, table: TableId, branch: str, lin: cat.Lineage, tmp: str, props: dict[str, str]
) -> int:
    """Append the branch's batch onto the temp branch ``tmp`` (at main), then swap it in as ``branch``; the new head."""
    batch = batch_frame(lh.spark, lh.spark_name(table), lin)
    return append_and_swap(lh, table, branch, lin.head, tmp, batch, props, "rebase")


def append_and_swap(
    lh: Lakehouse,
    table: TableId,
    branch: str,
    head: int,
    tmp: str,
    rows: DataFrame,
    props: dict[str, str],
    action: str,
) -> int:
    """Append ``rows`` (with snapshot ``props``) onto the temp branch ``tmp``, then swap ``tmp`` in as
    ``branch`` in one metadata commit, provided ``branch`` is still at ``head``; the new head.

    The replacement of a branch's history (rebase, quarantine): fault point ``after_<action>_write``
    between the append and the swap; a branch that moved meanwhile is a :class:`ConflictError`, nothing
    changed (the caller removes ``tmp``)."""
    writer = rows.writeTo(lh.spark_name(table, tmp))
    for k, v in props.items():
        writer = writer.option(f"snapshot-property.{k}", v)
    with_commit_retry(writer.append)
    fault_point(f"after_{action}_write")
    now = lh.table(table)
    if cat.ref_snapshot_id(now, branch) != head:
        raise ConflictError(f"branch {branch} of {table} changed during the {action}; nothing was changed")
    new_head = now.metadata.refs[tmp].snapshot_id
    with commit_conflicts():
        now.manage_snapshots().create_branch(new_head, branch).remove_branch(tmp).commit()
    return new_head


def require_known_table(lh: Lakehouse, table: TableId) -> None:
    """NotFoundError if the catalog has no such table."""
    if not cat.table_exists(lh.catalog, table):
        raise NotFoundError(f"table {table} does not exist")
