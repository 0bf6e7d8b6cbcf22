"""Roll back or rebase a batch that spans tables: every table's ref moves, or none (issue 27, item 4).

Both take the path of a batch publish (:class:`~wap_core.workflow.refmove.BatchMove`): one intent per table
in ONE journal transaction, every table's ref change in ONE multi-table commit
(:func:`~wap_core.lake.multitable.commit_tables`: one database transaction of compare-and-swaps on the JDBC
catalog), every outcome in one transaction, ONE notification. A table that lost a race refuses the whole
move (every intent ``refused``, naming the table); a process killed in between leaves pending intents that
:mod:`wap_core.workflow.reconcile` decides per table from the metadata (rollback: is main at its target;
rebase: does the branch hold the snapshot stamped with the intent).

* :func:`rollback_batch` (``wap rollback --batch NAME``, admin) moves every table of a PUBLISHED batch back
  to the main it had before that publish, read from the journal (the newest ``publish`` of the batch: its
  details list every table's main before and after). Refused as a whole when any of those mains moved since
  the publish (``main_moved``, naming the table) or when the batch is already rolled back. Main only: the
  ``batch-<name>`` tag stays (it records what was published; gc ages it out with the batch's snapshots).
* :func:`rebase_batch` (``wap rebase --batch NAME``, steward) replays each table's appended rows onto its
  current main on a temporary branch (Spark, one table at a time: nothing visible moves), then swaps every
  temporary branch in as the batch's branch in one multi-table commit, each required still at the head the
  batch was read at; then re-audits the batch. A table whose branch holds non-append commits refuses the
  whole rebase before anything is written; a branch that moved meanwhile refuses it at the swap (the
  temporary branches are removed). Tables whose main did not move are left as they are.

The kill points (``WAP_FAULT``) are declared in :mod:`wap_core.actions.rollback_batch` and
:mod:`wap_core.actions.rebase_batch`.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

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
from wap_core.lake.batch import batch_frame
from wap_core.lake.multitable import commit_tables, ref_changes
from wap_core.lake.refs import commit_conflicts, remove_branch_quietly, with_commit_retry
from wap_core.security.access import Permission
from wap_core.session import Session, session_of
from wap_core.states import Action, Outcome, RebaseOutcome
from wap_core.store import batches as store
from wap_core.store.journal import Intent, JournalEntry
from wap_core.values import JsonObject
from wap_core.workflow.batch import Batch, BatchTable, load_batch
from wap_core.workflow.batch_audit import BatchAuditResult, audit_batch
from wap_core.workflow.publish import RebaseResult, replayed_properties
from wap_core.workflow.reconcile import INTENT_PROPERTY, reconcile, temp_branch_name
from wap_core.workflow.refmove import BatchMove, Notice, TableMove
from wap_core.workflow.rollback import (
    MainBack,
    RollbackResult,
    RolledBackBatch,
    move_mains_back,
    rollback_move,
    taken_off,
)

if TYPE_CHECKING:
    from pyiceberg.table import Table

    from wap_core.lakehouse import Lakehouse

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------- rollback


@dataclass(frozen=True)
class BatchRollbackResult:
    """The outcome of a batch rollback: every table's main moved back (sorted by table)."""

    batch: str
    tables: tuple[RollbackResult, ...]
    reason: str


@dataclass(frozen=True)
class PublishedBatch:
    """A batch's newest publish, from the journal: every table's main before and after it."""

    batch: str
    at: str
    user: str
    mains: dict[str, tuple[int | None, int]]  # table -> (main before the publish, main after it)


def published_batch(lh: Lakehouse, name: str) -> PublishedBatch:
    """The newest publish of batch ``name`` (published or forced), from its journal rows; NotFoundError."""
    entries = [
        e
        for e in lh.journal.history(branch=name, action=Action.PUBLISH, limit=2000)
        if e.outcome in (Outcome.PUBLISHED, Outcome.FORCED)
        and e.details.get("batch") == name
        and isinstance(e.details.get("tables"), dict)
    ]
    if not entries:
        raise NotFoundError(f"batch {name} was never published (no publish of it in the journal)")
    newest = entries[0]
    mains: dict[str, tuple[int | None, int]] = {}
    for table, moved in sorted(newest.details["tables"].items()):
        before, after = moved.get("before"), moved.get("after")
        if not isinstance(after, int):
            raise ValidationError(f"the journal's publish of batch {name} lacks {table}'s head")
        mains[str(table)] = (before if isinstance(before, int) else None, after)
    return PublishedBatch(name, newest.at.isoformat(timespec="seconds"), newest.user, mains)


def _rollback_refusal(
    name: str,
    pub: PublishedBatch,
    now: dict[str, int | None],
    taken: dict[str, list[RolledBackBatch]],
) -> RefusedError | None:
    """Why the rollback of the published batch ``pub`` is refused with every main at ``now`` (None: it may
    run): every main already back (``already_there``), a table with no main before the publish
    (``no_main_before``), a main that moved since the publish (a ConflictError naming the table)."""
    if all(now[t] == before for t, (before, _) in pub.mains.items()):
        return RefusedError(
            f"rollback of batch {name} refused: every main is already where it was before the batch's publish",
            "already_there",
        )
    for t, (before, after) in pub.mains.items():
        if before is None:
            return RefusedError(
                f"rollback of batch {name} refused: {t} had no main before the batch's publish; nothing to go back to",
                "no_main_before",
            )
        if now[t] != after or t not in taken:
            return ConflictError(
                f"rollback of batch {name} refused: {t}'s main moved since the batch's publish (expected"
                f" {after}, now {now[t]}); no table of the batch moved"
            )
    return None


def _rollback_plan(
    lh: Lakehouse, pub: PublishedBatch
) -> tuple[dict[str, Table], dict[str, int | None], dict[str, list[RolledBackBatch]]]:
    """Every table of the published batch: its metadata, its main now and the snapshots a rollback takes off."""
    bases = {t: lh.table(TableId.parse(t)) for t in pub.mains}
    now = {key: cat.ref_snapshot_id(tbl, MAIN) for key, tbl in bases.items()}
    taken: dict[str, list[RolledBackBatch]] = {}
    for t, (before, after) in pub.mains.items():
        if before is not None and now[t] == after:
            taken[t] = taken_off(bases[t], after, before) or []
    return bases, now, taken


@dataclass(frozen=True)
class BatchRollbackState:
    """Whether the published batch may be rolled back now, for the console: what :func:`rollback_batch` would
    refuse, read without journaling (the rollback itself decides again, authorization included)."""

    published: PublishedBatch
    mains: tuple[tuple[str, int | None], ...]  # every table's main now, sorted by table
    allowed: bool
    code: str | None  # the refusal's reason code (``already_there``, ``no_main_before``, ``conflict``)
    message: str

    @property
    def rolled_back(self) -> bool:
        """Every main is back where it was before the batch's publish."""
        return self.code == "already_there"


def batch_rollback_state(lh: Lakehouse, name: str) -> BatchRollbackState | None:
    """The newest publish of batch ``name`` and whether it may be rolled back now; None: never published."""
    validate_branch(name)
    try:
        pub = published_batch(lh, name)
    except NotFoundError:
        return None
    _, now, taken = _rollback_plan(lh, pub)
    refusal = _rollback_refusal(name, pub, now, taken)
    mains = tuple(sorted(now.items()))
    if refusal is None:
        moves = ", ".join(f"{t} {pub.mains[t][1]} -> {pub.mains[t][0]}" for t in sorted(pub.mains))
        return BatchRollbackState(pub, mains, True, None, f"every main moves back: {moves}")
    return BatchRollbackState(pub, mains, False, refusal.reason_code, str(refusal))


def batches_taken_off(lh: Lakehouse, table: TableId, to_snapshot: int) -> list[BatchRollbackState]:
    """The batches spanning several tables whose publish moving ``table``'s main back to ``to_snapshot`` would
    undo on this table alone (newest first), each with whether the batch itself may be rolled back now: what
    History says before a one-table rollback leaves the batch's other tables where they are."""
    tbl = lh.table(table)
    main = cat.ref_snapshot_id(tbl, MAIN)
    dropped = taken_off(tbl, main, to_snapshot) if main is not None else None
    if not dropped:
        return []
    ids = {d.snapshot_id for d in dropped}
    names: list[str] = []
    for e in lh.journal.history(str(table), action=Action.PUBLISH, limit=200):
        name = e.details.get("batch") if isinstance(e.details, dict) else None
        tables = e.details.get("tables") if isinstance(e.details, dict) else None
        if (
            isinstance(name, str)
            and isinstance(tables, dict)
            and len(tables) > 1
            and e.outcome in (Outcome.PUBLISHED, Outcome.FORCED)
            and e.snapshot_after in ids
            and name not in names
        ):
            names.append(name)
    states = [batch_rollback_state(lh, n) for n in names]
    return [st for st in states if st is not None]


def rollback_batch(
    session: Session | Lakehouse, name: str, *, reason: str, user: str | None = None
) -> BatchRollbackResult:
    """Move every table of the published batch ``name`` back to its main before that publish, all or none
    (admin; a reason is required). Refused as a whole when any of those mains moved since the publish."""
    s = session_of(session, user)
    lh = s.lakehouse
    validate_branch(name)
    if not (reason and reason.strip()):
        raise ValidationError("a rollback needs a --reason: it is journaled with its reason")
    reason = reason.strip()
    pub = published_batch(lh, name)
    tables = [TableId.parse(key) for key in pub.mains]
    for tid in tables:
        s.authorize(Permission.ADMIN, table=tid, branch=MAIN, action=Action.ROLLBACK)
    for tid in tables:
        reconcile(lh, tid)
    bases, now, taken = _rollback_plan(lh, pub)
    details: JsonObject = {
        "batch": name,
        "tables": {t: {"before": a, "after": b} for t, (b, a) in pub.mains.items()},
        "published_at": pub.at,
        "published_by": pub.user,
    }
    # every table back to its main before the publish (a table with none is refused below, as a whole)
    backs = [
        MainBack(TableId.parse(t), bases[t], now[t] or after, before or after, tuple(taken.get(t, [])))
        for t, (before, after) in pub.mains.items()
    ]
    move = rollback_move(s, name, backs, reason, details)
    move = replace(
        move,
        tables=tuple(
            replace(m, before=now[str(m.table)], after=pub.mains[str(m.table)][0]) for m in move.tables
        ),
    )  # the intents expect main as it is now and as it was before the publish (None where it had none)
    if (refusal := _rollback_refusal(name, pub, now, taken)) is not None:
        raise move.refuse(refusal)
    moves = "; ".join(f"{t} main {a} -> {b}" for t, (b, a) in pub.mains.items())
    summary = f"batch {name} rolled back, all {len(pub.mains)} tables in one commit: {moves}: {reason}"[:500]
    move_mains_back(lh, move, backs, Notice(notify.Event.ROLLED_BACK, summary, None))
    results = tuple(
        RollbackResult(t, after, before, reason, tuple(taken[t]))
        for t, (before, after) in pub.mains.items()
        if before is not None
    )
    return BatchRollbackResult(name, results, reason)


# --------------------------------------------------------------------------- rebase


@dataclass(frozen=True)
class BatchRebaseResult:
    """The outcome of a batch rebase: every table's rebase (up to date where its main did not move), and
    the batch's audit after it (None when nothing moved)."""

    batch: str
    outcome: RebaseOutcome
    tables: tuple[RebaseResult, ...]
    audit: BatchAuditResult | None = None


def _open_batch(lh: Lakehouse, name: str) -> Batch:
    for m in store.open_members(lh.journal.engine, name):
        reconcile(lh, m.table)
    return load_batch(lh, name)


def rebase_batch(session: Session | Lakehouse, name: str, *, user: str | None = None) -> BatchRebaseResult:
    """Replay every table's branch of batch ``name`` onto its current main (temporary branches), then swap
    them all in, in one multi-table commit; all or none. Then re-audit the batch."""
    s = session_of(session, user)
    lh = s.lakehouse
    validate_branch(name)
    batch = _open_batch(lh, name)
    for t in batch.tables:
        s.authorize(Permission.REBASE, table=t.table, branch=name)
    tbls = {str(t.table): lh.table(t.table) for t in batch.tables}
    lins = {key: cat.lineage(tbl, name) for key, tbl in tbls.items()}
    stale = [t for t in batch.tables if lins[str(t.table)].main_moved]
    if not stale:
        same = tuple(
            RebaseResult(str(t.table), name, RebaseOutcome.UP_TO_DATE, t.head, t.head, t.fork, t.fork, 0)
            for t in batch.tables
        )
        return BatchRebaseResult(name, RebaseOutcome.UP_TO_DATE, same)
    token = uuid.uuid4().hex[:8]
    tmps = {str(t.table): temp_branch_name(name, token) for t in stale}
    rows = {
        str(t.table): sum(
            int(cat.summary_get(x, "added-records") or 0) for x in lins[str(t.table)].new_snapshots
        )
        for t in stale
    }
    move = BatchMove(
        s,
        Action.REBASE,
        name,
        tuple(
            TableMove(
                t.table,
                t.head,
                None,
                {
                    "tmp": tmps[str(t.table)],
                    "old_fork": lins[str(t.table)].fork,
                    "new_fork": lins[str(t.table)].main_head,
                    "rows": rows[str(t.table)],
                },
            )
            for t in stale
        ),
        None,
        {"batch": name, "tables": sorted(tmps)},
    )
    for t in stale:
        ops = {cat.snapshot_operation(x) for x in lins[str(t.table)].new_snapshots}
        if ops - {"append"}:
            raise move.refuse(
                RefusedError(
                    f"rebase of batch {name} refused: {t.table}'s branch holds non-append commits"
                    f" ({', '.join(sorted(ops))}); only appended batches can be replayed; no table was rebased",
                    "not_append",
                )
            )
    new_heads: dict[str, int] = {}

    def commit(intents: list[Intent]) -> dict[int, int]:
        try:
            return _replay(lh, name, stale, lins, tmps, intents, new_heads)
        except BaseException:  # a lost race (ConflictError naming the table that lost) or a failure
            _drop_temps(lh, tmps)  # nothing swapped: the temporary branches go
            raise

    entries: list[JournalEntry] = move.run(commit, Outcome.REBASED, None)  # a rebase is not notified
    log.info("batch %s rebased: %s", name, ", ".join(e.table or "" for e in entries))
    audit = audit_batch(s, name)
    results = []
    for t in batch.tables:
        key = str(t.table)
        lin = lins[key]
        if key in new_heads:
            results.append(
                RebaseResult(
                    key,
                    name,
                    RebaseOutcome.REBASED,
                    t.head,
                    new_heads[key],
                    lin.fork,
                    lin.main_head,
                    rows[key],
                )
            )
        else:
            results.append(
                RebaseResult(key, name, RebaseOutcome.UP_TO_DATE, t.head, t.head, t.fork, t.fork, 0)
            )
    return BatchRebaseResult(name, RebaseOutcome.REBASED, tuple(results), audit)


def _replay(
    lh: Lakehouse,
    name: str,
    stale: list[BatchTable],
    lins: dict[str, cat.Lineage],
    tmps: dict[str, str],
    intents: list[Intent],
    new_heads: dict[str, int],
) -> dict[int, int]:
    """A batch rebase's commit step: a temp branch at each ``stale`` table's main, its batch replayed there
    (Spark, stamped with its table's intent), then every temp branch swapped in as the batch's branch in ONE
    multi-table commit; ``new_heads`` filled per table; {intent id: its table's new head}."""
    ids = {i.table: i.id for i in intents}
    for t in stale:
        key = str(t.table)
        main_head = lins[key].main_head
        assert main_head is not None
        with commit_conflicts():
            lh.table(t.table).manage_snapshots().create_branch(main_head, tmps[key]).commit()
    fault_point("after_rebase_batch_temp_branches")
    for t in stale:
        key = str(t.table)
        props = {**replayed_properties(lins[key]), INTENT_PROPERTY: str(ids[key])}
        writer = batch_frame(lh.spark, lh.spark_name(t.table), lins[key]).writeTo(
            lh.spark_name(t.table, tmps[key])
        )
        for k, v in props.items():
            writer = writer.option(f"snapshot-property.{k}", v)
        with_commit_retry(writer.append)
    commits = []
    for t in stale:
        key = str(t.table)
        now = lh.table(t.table)
        head = now.metadata.refs[tmps[key]].snapshot_id
        new_heads[key] = head
        commits.append(
            ref_changes(
                t.table,
                now,
                expect={name: t.head, tmps[key]: head},
                set_branches={name: head},
                remove=(tmps[key],),
            )
        )
    commit_tables(
        lh.catalog,
        commits,
        after_write=lambda: fault_point("after_rebase_batch_write"),
        in_transaction=lambda: fault_point("in_rebase_batch_transaction"),
    )
    return {ids[key]: head for key, head in new_heads.items()}


def _drop_temps(lh: Lakehouse, tmps: dict[str, str]) -> None:
    """Remove the temporary branches of a rebase that did not land (those that exist)."""
    for table, tmp in tmps.items():
        remove_branch_quietly(lh.catalog, TableId.parse(table), tmp)
