"""Rebase: replay a batch's appended rows onto each table's current main, all tables or none; a branch is a batch of one.

One path for one table or many (issue 38). ``rebase(table, branch)`` and ``rebase_batch(name)`` both run
:func:`_rebase`, the one ref move of a rebase (:class:`~wap_core.workflow.refmove.BatchMove`):

1. one ``rebase`` intent per table whose main moved (expected before = the branch head; details: its
   temporary branch, old and new fork, rows), all in ONE journal transaction;
2. a temporary branch at each such table's main, the table's batch replayed there (Spark, one table at a
   time, each snapshot stamped with its intent: nothing visible moves), then every temporary branch swapped
   in as the branch in ONE :func:`~wap_core.lake.multitable.commit_tables`, each branch required still at
   the head it was read at;
3. every outcome in ONE transaction (a rebase is not notified); then the audit of the new heads (a
   branch's :func:`~wap_core.workflow.audit.audit_branch`, a batch's
   :func:`~wap_core.workflow.batch_audit.audit_batch`): a failing audit leaves the branches rebased.

A branch holding non-append commits refuses the whole rebase before anything is written (``not_append``);
a branch that moved meanwhile refuses it at the swap (the temporary branches are removed). Tables whose main
did not move are left as they are. A process killed in between leaves pending intents that
:mod:`wap_core.workflow.reconcile` decides per table (does the branch hold the snapshot stamped with the
intent). One set of fault points (``WAP_FAULT``), declared in :mod:`wap_core.actions.rebase`.

:func:`append_and_swap` is the history replacement a quarantine uses (rows appended on a temporary branch,
then swapped in as the branch in one metadata commit).
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pyiceberg.table import Table

from wap_core.exceptions import ConflictError, RefusedError
from wap_core.faults import fault_point
from wap_core.identifiers import TableId, validate_branch
from wap_core.lake import catalog as cat
from wap_core.lake.batch import batch_frame
from wap_core.lake.multitable import commit_tables, ref_changes
from wap_core.lake.refs import commit_conflicts, remove_branch_quietly, remove_branches, with_commit_retry
from wap_core.samples import load_sample, sample_json
from wap_core.security.access import Permission
from wap_core.session import Session, session_of
from wap_core.states import Action, Outcome, RebaseOutcome
from wap_core.store.journal import Intent
from wap_core.workflow.audit import AuditResult, audit_branch
from wap_core.workflow.batch import open_batch_for
from wap_core.workflow.batch_audit import BatchAuditResult, audit_batch
from wap_core.workflow.reconcile import (
    INTENT_PROPERTY,
    reconciled_table,
    temp_branch_name,
    temp_branches_of,
)
from wap_core.workflow.refmove import BatchMove, TableMove

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from wap_core.lakehouse import Lakehouse

log = logging.getLogger(__name__)


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
class BatchRebaseResult:
    """The outcome of a batch rebase: every table's rebase (up to date where its main did not move), and
    the batch's audit after it (None when nothing moved)."""

    batch: str
    outcome: RebaseOutcome
    tables: tuple[RebaseResult, ...]
    audit: BatchAuditResult | None = None


@dataclass(frozen=True)
class _Stale:
    """One table a rebase replays: its branch's lineage as read, and the metadata it was read from."""

    table: TableId
    lin: cat.Lineage
    tbl: Table

    @property
    def rows(self) -> int:
        """The rows the branch appended since its fork (what the replay appends again)."""
        return sum(int(cat.summary_get(s, "added-records") or 0) for s in self.lin.new_snapshots)


def _up_to_date(table: TableId, branch: str, lin: cat.Lineage) -> RebaseResult:
    return RebaseResult(
        str(table), branch, RebaseOutcome.UP_TO_DATE, lin.head, lin.head, lin.fork, lin.fork, 0
    )


def rebase(
    session: Session | Lakehouse, table: TableId, branch: str, *, user: str | None = None
) -> RebaseResult:
    """Replay the branch's appended rows onto current main, then audit the new head (as ingest does): the
    rebase of a batch of one. The old branch stays intact until an atomic swap; a failing audit leaves the
    branch rebased (its result in ``audit``), never unswapped."""
    s = session_of(session, user)
    lh = s.lakehouse
    validate_branch(branch)
    s.authorize(Permission.REBASE, table=table, branch=branch)
    tbl = reconciled_table(lh, table)
    cat.require_branch(tbl, table, branch)
    lin = cat.lineage(tbl, branch)
    if not lin.main_moved:
        return _up_to_date(table, branch, lin)
    heads = _rebase(s, branch, (_Stale(table, lin, tbl),), named=False)
    # like ingest's, the audit of the replayed batch is part of the rebase (authorized above as REBASE):
    # the branch's earlier audit is stale now, and publish needs one on the new head
    audit = audit_branch(lh, table, branch, user=s.user)
    main_head = lin.main_head
    rows = _Stale(table, lin, tbl).rows
    return RebaseResult(
        str(table), branch, RebaseOutcome.REBASED, lin.head, heads[table], lin.fork, main_head, rows, audit
    )


def rebase_batch(session: Session | Lakehouse, name: str, *, user: str | None = None) -> BatchRebaseResult:
    """Replay every table's branch of batch ``name`` onto its current main (temporary branches), then swap
    them all in, in one multi-table commit; all or none. Then re-audit the batch."""
    s = session_of(session, user)
    validate_branch(name)
    batch, loaded = open_batch_for(s, name, Permission.REBASE)
    read = {t: loaded[str(t)] for t in batch.table_ids}
    lins = {t: cat.lineage(tbl, name) for t, tbl in read.items()}
    stale = tuple(_Stale(t, lins[t], read[t]) for t in batch.table_ids if lins[t].main_moved)
    if not stale:
        return BatchRebaseResult(
            name, RebaseOutcome.UP_TO_DATE, tuple(_up_to_date(t, name, lins[t]) for t in batch.table_ids)
        )
    heads = _rebase(s, name, stale, named=True)
    log.info("batch %s rebased: %s", name, ", ".join(map(str, heads)))
    audit = audit_batch(s, name)
    results = []
    for st in (_Stale(t, lins[t], read[t]) for t in batch.table_ids):
        lin = st.lin
        if st.table in heads:
            new = heads[st.table]
            results.append(
                RebaseResult(
                    str(st.table),
                    name,
                    RebaseOutcome.REBASED,
                    lin.head,
                    new,
                    lin.fork,
                    lin.main_head,
                    st.rows,
                )
            )
        else:
            results.append(_up_to_date(st.table, name, lin))
    return BatchRebaseResult(name, RebaseOutcome.REBASED, tuple(results), audit)


def _rebase(s: Session, branch: str, stale: tuple[_Stale, ...], *, named: bool) -> dict[TableId, int]:
    """The one path: replay ``branch`` of every table of ``stale`` onto its main and swap them all in, all or
    none; ``named``: a recorded batch (its journal details and wording). Each table's new head."""
    lh = s.lakehouse
    token = uuid.uuid4().hex[:8]
    tmps = {st.table: temp_branch_name(branch, token) for st in stale}
    move = BatchMove(
        s,
        Action.REBASE,
        branch,
        tuple(
            TableMove(
                st.table,
                st.lin.head,
                None,
                {
                    "tmp": tmps[st.table],
                    "old_fork": st.lin.fork,
                    "new_fork": st.lin.main_head,
                    "rows": st.rows,
                },
            )
            for st in stale
        ),
        None,
        {"batch": branch, "tables": sorted(map(str, tmps))} if named else {},
        subject=None if named else f"{stale[0].table} {branch}",
    )
    for st in stale:
        ops = {cat.snapshot_operation(x) for x in st.lin.new_snapshots}
        if ops - {"append"}:
            whose = f"{st.table}'s branch" if named else "the branch"
            raise move.refuse(
                RefusedError(
                    f"rebase of {move.label} refused: {whose} holds non-append commits ({', '.join(sorted(ops))});"
                    " only appended batches can be replayed" + ("; no table was rebased" if named else ""),
                    "not_append",
                )
            )
    heads: dict[TableId, int] = {}

    def commit(intents: list[Intent]) -> dict[int, int]:
        try:
            return _replay(s, branch, stale, tmps, intents, heads)
        except BaseException:  # a lost race (ConflictError naming the table that lost) or a failure
            for table, tmp in tmps.items():  # nothing swapped: the temporary branches go
                remove_branch_quietly(lh.catalog, table, tmp)
            raise

    move.run(commit, Outcome.REBASED, None)  # a rebase is not notified
    return heads


def _replay(
    s: Session,
    branch: str,
    stale: tuple[_Stale, ...],
    tmps: dict[TableId, str],
    intents: list[Intent],
    heads: dict[TableId, int],
) -> dict[int, int]:
    """A rebase's commit step: a temp branch at each ``stale`` table's main (temp branches that crashed
    rebases of this branch left first removed), its batch replayed there (Spark, stamped with its table's
    intent), then every temp branch swapped in as ``branch`` in ONE multi-table commit; ``heads`` filled per
    table; {intent id: its table's new head}."""
    lh = s.lakehouse
    ids = {TableId.parse(i.table): i.id for i in intents}
    mine = {i.id for i in intents}
    for st in stale:
        # temp branches left by crashed rebases of this branch (we hold the branch: none of its rebases is in flight)
        in_use = {p.details.get("tmp") for p in lh.journal.pending_intents(str(st.table)) if p.id not in mine}
        leftovers = [n for n in temp_branches_of(st.tbl, branch) if n not in in_use]
        if leftovers:
            remove_branches(lh.catalog, str(st.table), leftovers)
        main_head = st.lin.main_head
        assert main_head is not None
        with commit_conflicts():
            lh.table(st.table).manage_snapshots().create_branch(main_head, tmps[st.table]).commit()
    fault_point("after_rebase_batch_temp_branches")
    for st in stale:
        props = {**replayed_properties(st.lin), INTENT_PROPERTY: str(ids[st.table])}
        writer = batch_frame(lh.spark, lh.spark_name(st.table), st.lin).writeTo(
            lh.spark_name(st.table, tmps[st.table])
        )
        for k, v in props.items():
            writer = writer.option(f"snapshot-property.{k}", v)
        with_commit_retry(writer.append)
    commits = []
    for st in stale:
        now = lh.table(st.table)
        head = now.metadata.refs[tmps[st.table]].snapshot_id
        heads[st.table] = head
        commits.append(
            ref_changes(
                st.table,
                now,
                expect={branch: st.lin.head, tmps[st.table]: head},
                set_branches={branch: head},
                remove=(tmps[st.table],),
            )
        )
    commit_tables(
        lh.catalog,
        commits,
        after_write=lambda: fault_point("after_rebase_batch_write"),
        in_transaction=lambda: fault_point("in_rebase_batch_transaction"),
    )
    return {ids[t]: head for t, head in heads.items()}


def replayed_properties(lin: cat.Lineage) -> dict[str, str]:
    """The snapshot properties of a branch's batch replayed onto main by a rebase (one table's, or each table's
    of a batch rebase).

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
