"""Rollback of main to a snapshot in its own history, of a published batch, and "reopen as branch" of a rolled-back batch.

Both are metadata-only ref moves (PyIceberg ``manage_snapshots``, like publish), journaled with
intent/outcome and reconciled after a crash (:mod:`wap_core.workflow.reconcile`).

* :func:`rollback` (admin) moves main back to an ancestor of main. The commit carries PyIceberg's
  requirement that main is still at the snapshot read before (compare-and-swap): a publish landing
  between the read and the commit makes the rollback fail cleanly (ConflictError), nothing moved.
* :func:`rollback_batch` (admin, ``wap rollback --batch NAME``) moves every table of a PUBLISHED batch back
  to the main it had before that publish, read from the journal (the newest ``publish`` of the batch: its
  details list every table's main before and after), all or none. Refused as a whole when any of those mains
  moved since the publish (``main_moved``, naming the table) or when the batch is already rolled back. Main
  only: the ``batch-<name>`` tag stays (it records what was published; gc ages it out with its snapshots).
  Both rollbacks run :func:`move_mains_back`: one path, a table being a batch of one.
* :func:`reopen` (steward) creates a branch whose head is a snapshot main no longer holds (a
  rolled-back batch). The branch forks from main's old line: when main has moved since the
  rollback, rebase replays the branch's appended batches onto the new main, like any branch.
  A batch is reopened once: while a branch holding it is open (:func:`reopened_as`), another
  reopen is refused (:class:`~wap_core.exceptions.AlreadyReopenedError`, journaled) unless it is
  asked for ``again`` with a reason.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from pyiceberg.table import Table

from wap_core import notify
from wap_core.exceptions import (
    AlreadyReopenedError,
    CommitConflictError,
    ConflictError,
    NotFoundError,
    RefusedError,
    ValidationError,
)
from wap_core.faults import fault_point
from wap_core.identifiers import MAIN, TableId, validate_branch
from wap_core.lake import catalog as cat
from wap_core.lake.multitable import MultiTableConflictError, commit_tables, ref_changes
from wap_core.lake.refs import create_branch_at
from wap_core.notify import Event
from wap_core.security.access import Permission
from wap_core.session import Session, session_of
from wap_core.states import Action, Outcome
from wap_core.store.journal import Intent
from wap_core.values import JsonObject
from wap_core.workflow.reconcile import reconcile, reconciled_table
from wap_core.workflow.refmove import BatchMove, Moved, Notice, RefMove, TableMove
from wap_core.workflow.review import batch_authors

if TYPE_CHECKING:
    from wap_core.lakehouse import Lakehouse

log = logging.getLogger(__name__)

_SCAN = 10_000  # snapshots walked back in main's history


@dataclass(frozen=True)
class RolledBackBatch:
    """A published batch taken off main by a rollback."""

    snapshot_id: int
    branch: str | None  # wap.branch of the snapshot (the published audit branch)
    user: str | None
    rows: int


@dataclass(frozen=True)
class RollbackResult:
    """The outcome of a rollback: main before and after, and the batches taken off."""

    table: str
    main_before: int
    main_after: int
    reason: str
    rolled_back: tuple[RolledBackBatch, ...] = field(default=())


@dataclass(frozen=True)
class ReopenResult:
    """The outcome of a reopen: the new branch at a rolled-back batch."""

    table: str
    branch: str
    head: int
    fork: int | None


def _move(
    session: Session,
    action: Action,
    table: TableId,
    branch: str,
    before: int | None,
    after: int | None = None,
    reason: str | None = None,
    details: JsonObject | None = None,
) -> RefMove:
    """A rollback's or reopen's ref move: its refusals (a busy branch included) are journaled, not notified."""
    return RefMove(session, action, table, branch, before, after, reason, details or {}, notify_refusal=False)


def taken_off(tbl: Table, main_before: int, to_snapshot: int) -> list[RolledBackBatch] | None:
    """The batches main holds above ``to_snapshot`` (main at ``main_before``), newest first: what moving main
    back to ``to_snapshot`` takes off (a table's rollback, and each table's of a batch rollback); None when
    ``to_snapshot`` is not among main's newest ``_SCAN`` ancestors."""
    dropped: list[RolledBackBatch] = []
    for n, snap in enumerate(cat.ancestors(tbl, main_before)):
        if n >= _SCAN:
            return None
        if snap.snapshot_id == to_snapshot:
            return dropped
        dropped.append(
            RolledBackBatch(
                snap.snapshot_id,
                cat.summary_get(snap, "wap.branch"),
                cat.summary_get(snap, "wap.user"),
                int(cat.summary_get(snap, "added-records") or 0),
            )
        )
    return None


def _refuse_stale_or_same(
    move: BatchMove, table: TableId, expected_main: int | None, main_before: int, to_snapshot: int
) -> None:
    """Refuse (journaled) a rollback from a main the caller did not see, or to where main already is."""
    if expected_main is not None and expected_main != main_before:
        raise move.refuse(
            ConflictError(
                f"rollback of {table} refused: main moved since it was read (expected {expected_main}, now {main_before}); look again"
            )
        )
    if to_snapshot == main_before:
        raise move.refuse(
            RefusedError(
                f"rollback of {table} refused: main is already at snapshot {to_snapshot}", "already_there"
            )
        )


@dataclass(frozen=True)
class MainBack:
    """One table's part of a rollback: its main from ``before`` back to ``to``, read from ``base``, and the
    batches that takes off main."""

    table: TableId
    base: Table
    before: int
    to: int
    taken: tuple[RolledBackBatch, ...] = ()


def rollback_move(
    s: Session,
    name: str,
    backs: Sequence[MainBack],
    reason: str,
    details: JsonObject,
    *,
    subject: str | None = None,
) -> BatchMove:
    """The one ref move of a rollback, of one table (``subject``: the table; ``name``: main) or of a batch
    (``name``: the batch): one ``rollback`` intent per table on main, with the snapshots it takes off. A
    one-table rollback's refusals are journaled, not notified (as before the one path)."""
    return BatchMove(
        s,
        Action.ROLLBACK,
        name,
        tuple(
            TableMove(b.table, b.before, b.to, {"rolled_back": [x.snapshot_id for x in b.taken]})
            for b in backs
        ),
        reason,
        details,
        ref=MAIN,
        subject=subject,
        notify_refusal=subject is None,
    )


def move_mains_back(lh: Lakehouse, move: BatchMove, backs: Sequence[MainBack], notice: Notice) -> None:
    """Run ``move``: every table's main back to its ``to`` in ONE multi-table commit, each required still at
    its ``before`` (the one path of a rollback, of one table or many). A commit that lost only because
    another ref of a table moved (main still where it was read) is tried once more on fresh metadata; a
    main that moved refuses them all (:class:`~wap_core.lake.multitable.MultiTableConflictError`)."""

    def attempt(bases: dict[TableId, Table]) -> None:
        commit_tables(
            lh.catalog,
            [
                ref_changes(b.table, bases[b.table], expect={MAIN: b.before}, set_branches={MAIN: b.to})
                for b in backs
            ],
            after_write=lambda: fault_point("after_rollback_batch_write"),
            in_transaction=lambda: fault_point("in_rollback_batch_transaction"),
        )

    def commit(_: list[Intent]) -> None:
        try:
            attempt({b.table: b.base for b in backs})
        except MultiTableConflictError:
            fresh = {b.table: lh.table(b.table) for b in backs}
            if any(cat.ref_snapshot_id(fresh[b.table], MAIN) != b.before for b in backs):
                raise
            attempt(fresh)

    move.run(commit, Outcome.ROLLED_BACK, notice)


def rollback(
    session: Session | Lakehouse,
    table: TableId,
    to_snapshot: int,
    *,
    reason: str,
    user: str | None = None,
    expected_main: int | None = None,
) -> RollbackResult:
    """Move main back to ``to_snapshot`` (an ancestor of main), metadata only. Admin role: the rollback of a
    batch of one (:func:`move_mains_back`, the path of ``rollback --batch``).

    ``expected_main``: the main head the caller saw (the console's timeline); refused when main moved since.
    """
    s = session_of(session, user)
    lh, user = s.lakehouse, s.user
    if not (reason and reason.strip()):
        raise ValidationError("a rollback needs a --reason: it is journaled with its reason")
    s.authorize(Permission.ADMIN, table=table, branch=MAIN, action=Action.ROLLBACK)
    tbl = reconciled_table(lh, table)  # the read: main's head now; the commit below requires main still there
    main_before = cat.ref_snapshot_id(tbl, MAIN)
    if main_before is None:
        raise NotFoundError(f"table {table} has no main snapshot to roll back")
    back = MainBack(table, tbl, main_before, to_snapshot)
    move = rollback_move(s, MAIN, [back], reason, {}, subject=str(table))
    _refuse_stale_or_same(move, table, expected_main, main_before, to_snapshot)
    dropped = taken_off(tbl, main_before, to_snapshot)
    if dropped is None:
        raise move.refuse(
            RefusedError(
                f"rollback of {table} refused: snapshot {to_snapshot} is not an ancestor of main (main is at {main_before}); "
                "only a snapshot in main's own history can be rolled back to",
                "not_ancestor",
            )
        )
    back = replace(back, taken=tuple(dropped))
    move = rollback_move(s, MAIN, [back], reason, {}, subject=str(table))
    summary = f"main rolled back from {main_before} to {to_snapshot}: {reason.strip()}"[:500]
    move_mains_back(lh, move, [back], Notice(Event.ROLLED_BACK, summary, to_snapshot))
    return RollbackResult(str(table), main_before, to_snapshot, reason.strip(), tuple(dropped))


@dataclass(frozen=True)
class RolledBackSnapshot(RolledBackBatch):
    """A batch a rollback took off main and that main still does not hold: when, by whom and why."""

    rolled_back_at: datetime
    rolled_back_by: str
    reason: str | None
    reopened_as: str | None = None  # the open branch that holds the batch again (see reopened_as), if any


def rolled_back_snapshots(lh: Lakehouse, table: TableId) -> list[RolledBackSnapshot]:
    """Snapshots main held once and no longer holds, per the journal's rollbacks (newest rollback first)."""
    tbl = lh.table(table)
    main_ids = {s.snapshot_id for s in cat.ancestors(tbl, cat.ref_snapshot_id(tbl, MAIN))}
    out: list[RolledBackSnapshot] = []
    seen: set[int] = set()
    entries = lh.journal.history(str(table), action=Action.ROLLBACK, limit=100)
    candidates = {
        int(sid)
        for e in entries
        if e.outcome is Outcome.ROLLED_BACK
        for sid in e.details.get("rolled_back", [])
    }
    reopened = reopened_as(lh, table, candidates - main_ids, tbl=tbl, main_ids=main_ids)
    for e in entries:
        if e.outcome is not Outcome.ROLLED_BACK:
            continue
        for sid in e.details.get("rolled_back", []):
            snap = tbl.metadata.snapshot_by_id(int(sid))
            if snap is None or sid in main_ids or sid in seen:
                continue
            seen.add(sid)
            out.append(
                RolledBackSnapshot(
                    snapshot_id=sid,
                    branch=cat.summary_get(snap, "wap.branch"),
                    user=cat.summary_get(snap, "wap.user"),
                    rows=int(cat.summary_get(snap, "added-records") or 0),
                    rolled_back_at=e.at,
                    rolled_back_by=e.user,
                    reason=e.reason,
                    reopened_as=reopened.get(sid),
                )
            )
    return out


def reopened_as(
    lh: Lakehouse,
    table: TableId,
    snapshot_ids: set[int],
    *,
    tbl: Table | None = None,
    main_ids: set[int] | None = None,
) -> dict[int, str]:
    """{snapshot id: the open branch that holds it again} for those of ``snapshot_ids`` reopened and still open.

    An open branch holds a batch when the snapshot is in the branch's own line (the reopened head, or
    fixes appended on it), or when the journal records the batch reopened as that branch and the
    branch has been neither published nor discarded since (a rebase replayed its rows onto main).
    """
    if not snapshot_ids:
        return {}
    tbl = tbl if tbl is not None else lh.table(table)
    if main_ids is None:
        main_ids = {s.snapshot_id for s in cat.ancestors(tbl, cat.ref_snapshot_id(tbl, MAIN))}
    open_names = cat.branch_names(tbl)
    found: dict[int, str] = {}
    for name in sorted(open_names):
        for n, snap in enumerate(cat.ancestors(tbl, cat.ref_snapshot_id(tbl, name))):
            if n >= _SCAN or snap.snapshot_id in main_ids:  # the fork: the rest is main's line
                break
            if snap.snapshot_id in snapshot_ids:
                found.setdefault(snap.snapshot_id, name)
    for e in lh.journal.history(str(table), action=Action.REOPEN, limit=200):
        sid = e.details.get("snapshot_id")
        if (
            e.outcome is Outcome.REOPENED
            and e.branch in open_names
            and sid is not None
            and int(sid) in snapshot_ids
            and int(sid) not in found
            and not _closed_since(lh, table, e.branch, e.id)
        ):
            found[int(sid)] = e.branch
    return found


def _closed_since(lh: Lakehouse, table: TableId, branch: str, entry_id: int) -> bool:
    """The branch name was published or discarded after journal entry ``entry_id`` (a later branch of that name)."""
    return any(
        e.id > entry_id and e.outcome in (Outcome.PUBLISHED, Outcome.FORCED, Outcome.DISCARDED)
        for e in lh.journal.history(str(table), branch=branch, limit=200)
    )


def default_reopen_name(tbl: Any, snapshot_id: int) -> str:
    """A free branch name for reopening a snapshot: ``<its branch>_reopened`` or ``reopen_<id>``."""
    snap = tbl.metadata.snapshot_by_id(snapshot_id)
    base = cat.summary_get(snap, "wap.branch") if snap is not None else None
    stem = f"{base[:100]}_reopened" if base else f"reopen_{snapshot_id}"
    name, n = stem, 2
    while name in tbl.metadata.refs:
        name, n = f"{stem}_{n}", n + 1
    return name


def reopen(
    session: Session | Lakehouse,
    table: TableId,
    snapshot_id: int,
    *,
    branch: str | None = None,
    user: str | None = None,
    again: bool = False,
    reason: str | None = None,
) -> ReopenResult:
    """Create a branch whose head is ``snapshot_id``, a snapshot main no longer holds (a rolled-back batch). Steward role.

    A batch already open again as a branch is refused (:class:`AlreadyReopenedError`, exit 1, journaled;
    its message names the open branch) unless ``again`` with a ``reason`` (journaled with the reopen).
    """
    s = session_of(session, user)
    lh, user = s.lakehouse, s.user
    if again and not (reason and reason.strip()):
        raise ValidationError(
            "reopening a batch that is already open again needs a --reason: it is journaled with its reason"
        )
    reason = reason.strip() if reason and reason.strip() else None
    if branch is not None:
        validate_branch(branch)
    s.authorize(Permission.INGEST, table=table, branch=branch, action=Action.REOPEN)
    tbl = reconciled_table(lh, table)
    if tbl.metadata.snapshot_by_id(snapshot_id) is None:
        raise NotFoundError(f"snapshot {snapshot_id} does not exist in {table} (expired, or never there)")
    name = branch or default_reopen_name(tbl, snapshot_id)
    validate_branch(name)
    # the batch's authors stay its authors on the new branch (author_cannot_approve applies to them)
    move = _move(s, Action.REOPEN, table, name, None, snapshot_id, reason)
    if name in tbl.metadata.refs:
        raise move.refuse(RefusedError(f"reopen refused: {table} already has a ref named {name!r}", "exists"))
    main_ids = {s.snapshot_id for s in cat.ancestors(tbl, cat.ref_snapshot_id(tbl, MAIN))}
    if snapshot_id in main_ids:
        raise move.refuse(
            RefusedError(
                f"reopen refused: snapshot {snapshot_id} is still in main's history; only a rolled-back batch can be reopened",
                "in_main",
            )
        )
    open_as = reopened_as(lh, table, {snapshot_id}, tbl=tbl, main_ids=main_ids).get(snapshot_id)
    if open_as is not None and not again:
        raise move.refuse(
            AlreadyReopenedError(
                f"reopen refused: snapshot {snapshot_id} of {table} is already open again as branch {open_as!r}; "
                "review it there (reopen it once more only with --again and a --reason)",
                table=str(table),
                snapshot_id=snapshot_id,
                branch=open_as,
            )
        )
    authors = list(batch_authors(lh, table, tbl, snapshot_id))
    details: JsonObject = {"snapshot_id": snapshot_id, "authors": authors}
    if open_as is not None:
        details["also_open_as"] = open_as  # reopened once more on purpose (again, with the reason)
    move = replace(move, details=details)

    def commit(_: Intent) -> Moved:
        try:
            create_branch_at(lh.catalog, table, name, snapshot_id, tbl)
        except CommitConflictError as exc:
            raise ConflictError(
                f"reopen of {snapshot_id} as {table} {name} lost a race with another change ({exc})"
            ) from exc
        return Moved(Outcome.REOPENED, snapshot_id)

    move.run(commit)
    lin = cat.lineage(lh.table(table), name)
    return ReopenResult(str(table), name, snapshot_id, lin.fork)


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
