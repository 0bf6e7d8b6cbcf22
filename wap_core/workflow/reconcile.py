"""Reconciliation: decide every pending intent from the Iceberg metadata (PyIceberg, no Spark).

A process killed between its Iceberg commit and its outcome row leaves a pending intent
(``wap_intents``). :func:`reconcile` runs before a table is read (``Lakehouse.table``) and
before the journal is read (``Journal.history``), so the next command that touches the table
(``branches``, ``status``, ``history``, ``publish``, ``audit``, the console pages, ...) records
what really happened, under the ORIGINAL user, reason and time of the intent, marked
``reconciled``.

The rule, per pending intent not in flight in this process:

1. **Landed** (the ref move it announced is in the table metadata) -> its success outcome, at
   once, whatever its age: ``published``/``forced`` (the branch is gone and main's history
   contains the announced head), ``discarded`` (the branch is gone), ``rebased`` (the branch's
   history holds the snapshot stamped ``wap.intent-id`` = the intent), ``written`` (the branch
   holds the batch stamped with the intent / batch id). Recording it early is safe even if the
   acting process still runs: the outcome is the same and only one writer wins. ``rolled_back``
   (main is at the rollback's target, or holds it and no longer holds the snapshot it left),
   ``reopened`` (the reopened branch exists).
2. **Not landed** -> ``abandoned`` (an ingest whose branch exists without its batch:
   ``incomplete``, and the branch is listed with status ``incomplete`` until discarded) when
   the intent can no longer land or its process is gone:

   * its precondition broke (publish: main left the expected snapshot or the branch changed;
     discard/rebase: the branch is gone or at another snapshot), or
   * its process is dead: on this host, its pid is gone (or reused by another process); on
     another host, its heartbeat (refreshed every ``HEARTBEAT_SECONDS`` while the action runs)
     is older than ``STALE_AFTER_SECONDS``.

   Otherwise (precondition holds, owner alive or heartbeat fresh) it stays pending: an action
   in flight elsewhere is never declared abandoned prematurely.

A batch publish (:mod:`wap_core.workflow.publish`) announces one publish intent per table (details
``batch``, ``tables``): each is judged as a one-table publish from its own table's metadata (the swap was one
database transaction on the JDBC catalog, so the tables agree: all landed or none), and a landed one closes
its table's batch membership (``published``).

An abandoned rebase's temporary branch is removed. Two reconcilers never both record: the
``pending -> done/abandoned`` transition is a conditional UPDATE (see :mod:`wap_core.store.journal`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from functools import partial
from typing import TYPE_CHECKING

from pyiceberg.table import Table
from sqlalchemy.exc import SQLAlchemyError

from wap_core import actions, notify
from wap_core.exceptions import (
    ConflictError,
    NotFoundError,
    RefusedError,
    ValidationError,
    WapError,
    first_line,
)
from wap_core.identifiers import MAIN, TableId
from wap_core.lake import catalog as cat
from wap_core.lake.catalog import TEMP_MARK, is_temp_branch
from wap_core.lake.refs import remove_branches
from wap_core.states import Action, Outcome
from wap_core.store import batches
from wap_core.store.journal import Intent, JournalEntry, heartbeat_stale, owner_alive, process_owner
from wap_core.values import JsonObject

if TYPE_CHECKING:
    from wap_core.lakehouse import Lakehouse

log = logging.getLogger(__name__)

INTENT_PROPERTY = "wap.intent-id"  # snapshot summary key: the intent that wrote the snapshot
_ANCESTRY_LIMIT = 10_000  # snapshots walked back when looking for a landed commit


def temp_branch_name(branch: str, token: str) -> str:
    """A temporary branch next to ``branch``, unique by ``token`` (an action's random token)."""
    return f"{branch[:100]}{TEMP_MARK}{token}"


def temp_branches_of(tbl: Table, branch: str) -> list[str]:
    """The table's temporary branches of ``branch``, sorted."""
    prefix = f"{branch[:100]}{TEMP_MARK}"
    return sorted(n for n in tbl.metadata.refs if n.startswith(prefix) and is_temp_branch(n))


@dataclass(frozen=True)
class Verdict:
    """What the table metadata says about one intent."""

    landed: bool
    outcome: Outcome  # the success outcome when landed, else abandoned | incomplete
    snapshot_after: int | None
    never: bool  # not landed and can no longer land (its precondition broke)
    why: str
    details: JsonObject = field(default_factory=dict)
    cleanup: tuple[str, ...] = ()  # temp branches to remove when the intent is abandoned


def _marked(tbl: Table, start: int | None, intent: Intent) -> int | None:
    """The snapshot in ``start``'s history written by ``intent`` (stamped with its id or batch id)."""
    batch = intent.details.get("batch_id")
    main_ids = {s.snapshot_id for s in cat.ancestors(tbl, cat.ref_snapshot_id(tbl, MAIN))}
    for n, snap in enumerate(cat.ancestors(tbl, start)):
        if n >= _ANCESTRY_LIMIT or snap.snapshot_id in main_ids:
            return None
        if cat.summary_get(snap, INTENT_PROPERTY) == str(intent.id):
            return snap.snapshot_id
        if batch and intent.action is Action.INGEST and cat.summary_get(snap, "wap.batch-id") == batch:
            return snap.snapshot_id
    return None


def _in_main(tbl: Table, snapshot_id: int | None) -> bool:
    if snapshot_id is None:
        return False
    for n, snap in enumerate(cat.ancestors(tbl, cat.ref_snapshot_id(tbl, MAIN))):
        if n >= _ANCESTRY_LIMIT:
            return False
        if snap.snapshot_id == snapshot_id:
            return True
    return False


def _ended_by(earlier: Intent | None, intent: Intent) -> str | None:
    """Why ``intent`` (a publish or discard) cannot be what removed its branch: an earlier landed move did.

    ``earlier`` is the newest move on the branch that landed before ``intent`` was announced
    (:meth:`~wap_core.store.journal.Journal.done_before`). When it published the branch's head to
    main or discarded the branch at that head, the branch was already gone when ``intent`` began
    (it acted on a stale read and lost the race): its absence is the winner's doing, not ``intent``'s.
    """
    if earlier is None or intent.action not in (Action.PUBLISH, Action.DISCARD):
        return None
    ours = intent.expected_after if intent.action is Action.PUBLISH else intent.expected_before
    if earlier.action is Action.PUBLISH and earlier.expected_after == ours:
        done = "published"
    elif earlier.action is Action.DISCARD and earlier.expected_before == ours:
        done = "discarded"
    else:
        return None
    return f"the branch was already {done} (intent {earlier.id} by {earlier.user}) before this {intent.action} began"


def judge(tbl: Table | None, intent: Intent, earlier: Intent | None = None) -> Verdict:
    """Decide from metadata whether ``intent``'s ref move happened (pure: changes nothing).

    ``earlier``: the newest move on the branch that landed before ``intent`` (see :func:`_ended_by`).
    """
    if tbl is None:
        return Verdict(False, Outcome.ABANDONED, None, True, f"table {intent.table} does not exist")
    if (lost := _ended_by(earlier, intent)) is not None:
        return Verdict(False, Outcome.ABANDONED, None, True, lost)
    if intent.action not in actions.INTENT_WORDS:  # declared: wap_core.actions (``moves_ref``)
        raise ValueError(f"not a ref-moving action: {intent.action!r}")
    rule = JUDGES[intent.action]
    ref = tbl.metadata.refs.get(intent.branch)
    return rule(tbl, intent, ref.snapshot_id if ref is not None else None)


def _judge_publish(tbl: Table, intent: Intent, head: int | None) -> Verdict:
    outcome = Outcome.FORCED if intent.details.get("forced") else Outcome.PUBLISHED
    if head is None and _in_main(tbl, intent.expected_after):
        return Verdict(
            True, outcome, intent.expected_after, False, "main holds the branch head and the branch is gone"
        )
    main_now = cat.ref_snapshot_id(tbl, MAIN)
    never = head is None or head != intent.expected_after or main_now != intent.expected_before
    return Verdict(False, Outcome.ABANDONED, None, never, "main was not moved to the branch head")


def _judge_discard(tbl: Table, intent: Intent, head: int | None) -> Verdict:
    if head is None:
        return Verdict(True, Outcome.DISCARDED, None, False, "the branch is gone")
    return Verdict(
        False, Outcome.ABANDONED, None, head != intent.expected_before, "the branch is still there"
    )


def _judge_rollback(tbl: Table, intent: Intent, head: int | None) -> Verdict:
    main_now = cat.ref_snapshot_id(tbl, MAIN)
    if main_now == intent.expected_after or (
        _in_main(tbl, intent.expected_after) and not _in_main(tbl, intent.expected_before)
    ):
        return Verdict(
            True, Outcome.ROLLED_BACK, intent.expected_after, False, "main is back at the rollback's target"
        )
    return Verdict(
        False, Outcome.ABANDONED, None, main_now != intent.expected_before, "main was not moved back"
    )


def _judge_created(tbl: Table, intent: Intent, head: int | None, *, landed: Outcome) -> Verdict:
    """A move that creates its branch (a reopen, a job's open): landed when the branch exists."""
    if head is not None:
        return Verdict(True, landed, head, False, "the branch exists")
    return Verdict(False, Outcome.ABANDONED, None, False, "the branch was not created")


def _judge_swap(
    tbl: Table, intent: Intent, head: int | None, landed: Outcome, held: str, missed: str
) -> Verdict:
    """A move that swaps a temporary branch (``tmp`` of the intent's details: cleaned up either way) in as the
    branch (rebase, quarantine): ``landed`` when the branch moved to a head stamped with the intent (``held``
    says what it holds), else abandoned (``missed``)."""
    tmp = intent.details.get("tmp")
    cleanup = (tmp,) if isinstance(tmp, str) and tmp in tbl.metadata.refs else ()
    if head is not None and head != intent.expected_before and _marked(tbl, head, intent) is not None:
        return Verdict(True, landed, head, False, held, cleanup=cleanup)
    never = head is None or head != intent.expected_before
    return Verdict(False, Outcome.ABANDONED, None, never, missed, cleanup=cleanup)


def _judge_ingest(tbl: Table, intent: Intent, head: int | None) -> Verdict:
    if head is None:
        return Verdict(False, Outcome.ABANDONED, None, False, "the branch was not created")
    done = _marked(tbl, head, intent)
    if done is None:
        why = "the branch was created but its batch was never committed"
        return Verdict(False, Outcome.INCOMPLETE, None, False, why)
    snap = tbl.metadata.snapshot_by_id(done)
    rows = int(cat.summary_get(snap, "added-records") or 0) if snap is not None else None
    return Verdict(
        True, Outcome.WRITTEN, done, False, "the branch holds the batch", details={"rows_committed": rows}
    )


def undo_kept(lh: Lakehouse, intent: Intent) -> None:
    """A quarantine that did not land: the rows it kept leave the quarantine table's branch again (a retry
    never keeps them twice). Its branch goes back to where the intent found it (removed if it had none)."""
    qname = intent.details.get("quarantine_table")
    if intent.action is not Action.QUARANTINE or not isinstance(qname, str):
        return
    qt = _load(lh, qname)
    ref = qt.metadata.refs.get(intent.branch) if qt is not None else None
    if qt is None or ref is None:
        return
    snap = qt.metadata.snapshot_by_id(ref.snapshot_id)
    if snap is None or cat.summary_get(snap, INTENT_PROPERTY) != str(intent.id):
        return
    before = intent.details.get("kept_before")
    if isinstance(before, int):
        qt.manage_snapshots().create_branch(before, intent.branch).commit()
    else:
        remove_branches(lh.catalog, qname, [intent.branch])
    log.warning("quarantine intent %d did not land: its kept rows were removed from %s", intent.id, qname)


# How each ref-moving action is judged from the metadata: (table, intent, the branch's head or None).
# How a pending intent is judged, by the journal word of each action declared as moving a ref
# (``wap_core.actions``; tests/test_action_registry.py checks every such word has its judge here).
JUDGES: dict[str, Callable[[Table, Intent, int | None], Verdict]] = {
    Action.PUBLISH: _judge_publish,
    Action.DISCARD: _judge_discard,
    Action.ROLLBACK: _judge_rollback,
    Action.REOPEN: partial(_judge_created, landed=Outcome.REOPENED),
    Action.OPEN: partial(_judge_created, landed=Outcome.OPENED),
    Action.REBASE: partial(
        _judge_swap,
        landed=Outcome.REBASED,
        held="the branch holds the replayed batch",
        missed="the branch was not swapped to the replayed batch",
    ),
    Action.INGEST: _judge_ingest,
    Action.QUARANTINE: partial(
        _judge_swap,
        landed=Outcome.QUARANTINED,
        held="the branch holds the kept rows",
        missed="the branch was not swapped to its kept rows",
    ),
}


def _load(lh: Lakehouse, table: str) -> Table | None:
    try:
        return cat.load_table(lh.catalog, TableId.parse(table))
    except (NotFoundError, ValidationError):
        return None


def _gone(intent: Intent) -> bool:
    if intent.owner == process_owner():
        return True  # ours and no longer in flight (its action ended without recording an outcome)
    alive = owner_alive(intent.owner)
    return alive is False or (alive is None and heartbeat_stale(intent))


def _decide(lh: Lakehouse, tbl: Table | None, intent: Intent) -> JournalEntry | None:
    v = judge(tbl, intent, lh.journal.done_before(intent))
    if v.landed:
        if v.cleanup:
            remove_branches(lh.catalog, intent.table, v.cleanup)
        closed_as = actions.CLOSES_MEMBERSHIP.get(intent.action)  # as its declaration says (publish, discard)
        if closed_as is not None:
            # a publish / discard that landed (of a batch, or of a branch: a batch of one): the table's
            # membership of the batch named like its branch, if any, closes as the actor would have closed it
            batches.close_members(lh.journal.engine, intent.branch, [intent.table], closed_as)
        return lh.journal.resolve_intent(
            intent,
            outcome=v.outcome,
            done=True,
            snapshot_after=v.snapshot_after,
            details={**v.details, "reconciled_because": v.why},
            reconciled=True,
            at=intent.at,
        )
    if not (v.never or _gone(intent)):
        return None  # still in flight elsewhere: leave it pending
    if v.cleanup:
        remove_branches(lh.catalog, intent.table, v.cleanup)
    undo_kept(lh, intent)
    why = v.why + ("; it can no longer happen" if v.never else "; the process that announced it is gone")
    return lh.journal.resolve_intent(
        intent,
        outcome=v.outcome,
        done=False,
        details={**v.details, "reconciled_because": why},
        reconciled=True,
        at=intent.at,
    )


def reconcile(
    lh: Lakehouse, table: TableId | str | None = None, *, branch: str | None = None
) -> list[JournalEntry]:
    """Resolve the pending intents of ``table`` (all tables: None), only those on ``branch`` when given (a
    waiting pipeline's look at its own branch); returns the outcome rows recorded."""
    pending = lh.journal.pending_intents(str(table) if table is not None else None)
    if branch is not None:
        pending = [i for i in pending if i.branch == branch]
    out: list[JournalEntry] = []
    loaded: dict[str, Table | None] = {}
    for intent in pending:
        if lh.journal.in_flight_here(intent):
            continue  # this process's own action is still running: it records its own outcome
        if intent.table not in loaded:
            loaded[intent.table] = _load(lh, intent.table)
        try:
            entry = _decide(lh, loaded[intent.table], intent)
        except (
            SQLAlchemyError
        ) as exc:  # e.g. the journal DB stayed locked: the intent stays pending, next read retries
            log.warning(
                "could not reconcile intent %d (%s of %s %s): %s",
                intent.id,
                intent.action,
                intent.table,
                intent.branch,
                exc,
            )
            continue
        if entry is not None:
            log.warning(
                "reconciled %s of %s %s by %s (intent %d): %s",
                intent.action,
                intent.table,
                intent.branch,
                intent.user,
                intent.id,
                entry.outcome,
            )
            notify.emit_outcome(
                lh.journal, lh.settings, entry
            )  # a publish or discard that landed is notified, late but once
            out.append(entry)
            loaded.pop(intent.table, None)  # cleanup may have changed it
    return out


def settle(lh: Lakehouse, intent: Intent, exc: BaseException | None) -> JournalEntry | None:
    """The acting process ends ``intent`` after an exception: record what the metadata says happened."""
    tbl = _load(lh, intent.table)
    v = judge(tbl, intent, lh.journal.done_before(intent))
    if v.landed and isinstance(exc, ConflictError):
        # our commit was refused (a lost race: nothing of ours landed); what the metadata shows is the
        # winner's doing, never journaled as ours
        v = replace(
            v,
            landed=False,
            outcome=Outcome.ABANDONED,
            snapshot_after=None,
            never=True,
            why=f"{v.why}, but not by this {intent.action}: another change won the race",
        )
    if v.landed:
        entry = lh.journal.resolve_intent(
            intent,
            outcome=v.outcome,
            done=True,
            snapshot_after=v.snapshot_after,
            details={**v.details, "after_error": _one_line(exc)},
        )
    else:
        if v.cleanup:
            remove_branches(lh.catalog, intent.table, v.cleanup)
        undo_kept(lh, intent)
        details: JsonObject = {"why": v.why}
        if intent.reason:
            details["intent_reason"] = intent.reason
        if isinstance(exc, RefusedError):
            details["code"] = exc.reason_code
        entry = lh.journal.resolve_intent(
            intent,
            outcome=Outcome.REFUSED if isinstance(exc, RefusedError) else Outcome.ERROR,
            done=False,
            reason=_one_line(exc),
            details=details,
        )
    if isinstance(exc, WapError):
        exc.journaled = True
    notify.emit_outcome(
        lh.journal, lh.settings, entry
    )  # refused (a lost race) or, when the commit landed after all, published/discarded
    return entry


def _one_line(exc: BaseException | None) -> str:
    if exc is None:
        return "interrupted"
    return first_line(exc)[:1000]


@contextmanager
def acting(lh: Lakehouse, intent: Intent) -> Iterator[Intent]:
    """Scope of the work an intent announced. An exception escaping it is settled from the metadata
    (outcome row ``refused``/``error``, or the success outcome if the commit landed after all)."""
    try:
        yield intent
    except BaseException as exc:
        try:
            settle(lh, intent, exc)
        except Exception:
            log.exception("could not record the outcome of intent %d; reconciliation will", intent.id)
        raise
    finally:
        lh.journal.release(intent)


def reconciled_table(lh: Lakehouse, table: TableId) -> Table:
    """The read a ref-moving action starts from: the table's crashed actions reconciled, then a fresh load.

    Reads elsewhere are pure (:meth:`Lakehouse.table`); an action reconciles first so that a dead
    process's pending intent neither blocks the branch nor hides a move that already landed.
    """
    reconcile(lh, table)
    return lh.table(table)


class Ticker:
    """Reconciles every table every ``every`` seconds on a daemon thread (the console's background tick).

    A failed round is logged with its traceback and retried at the next tick; :meth:`stop` ends it.
    """

    def __init__(self, lh: Lakehouse, every: float) -> None:
        self.lh = lh
        self.every = every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="wap-reconcile-tick", daemon=True)

    def start(self) -> Ticker:
        """Start ticking (the first round runs at once); returns self."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop after the current round."""
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                reconcile(self.lh)
            except (WapError, SQLAlchemyError, OSError):
                log.exception("background reconciliation failed; retrying in %.0f s", self.every)
            self._stop.wait(self.every)
