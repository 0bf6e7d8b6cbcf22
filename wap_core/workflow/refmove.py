"""The one path every ref move takes, in the spirit of PyIceberg's transaction -> ``commit()``.

An action validates, authorizes and reads its precondition, then declares its move and runs it with its
commit step. Everything else lives here, once. Publish (forced or not), discard, rebase and rollback move
a **batch**: a set of (table, branch), a branch being a batch of one (issue 38); they declare a
:class:`BatchMove` (one :class:`TableMove` per table: its ref before and after):

* the **intents**, one per table, committed in ONE journal transaction before any Iceberg commit; a branch
  another action holds refuses them all, journaled (:meth:`wap_core.session.Session.refuse`, notified unless
  the declaration says not to);
* the **fault points** ``after_<action>_batch_intents`` / ``after_<action>_batch_commit`` /
  ``before_<action>_batch_outcome`` (the kill tests; the commit step has its own between) and the pause
  points ``before_<action>_batch_intents`` (the race tests) and ``after_publish_batch_intents`` (the object
  store stopped in the middle of a publish);
* the **outcome** rows, in ONE transaction: a lost race (:class:`ConflictError`, e.g. a
  :class:`~wap_core.lake.multitable.MultiTableConflictError` naming the table that lost) is journaled
  ``refused`` with the reason it lost, never with the winner's outcome; a move another commit already made
  (:class:`Unneeded`) ``abandoned``; any other exception is settled from the metadata
  (:func:`wap_core.workflow.reconcile.acting`);
* ONE **notification** of a move that landed (:class:`Notice`), after the outcome rows.

Actions that move one ref of one table and no batch (ingest, reopen, a job's open, quarantine) declare a
:class:`RefMove`: the same steps for one intent, with the points ``after_<action>_intent`` /
``after_<action>_commit`` and ``before_<action>_intent``.

Retries of the Iceberg commit itself are :mod:`wap_core.lake.refs`' one policy, used by the steps.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sqlalchemy import Connection

from wap_core import notify
from wap_core.exceptions import BranchBusyError, ConflictError, RefusedError
from wap_core.faults import FAULT_POINTS, PAUSE_POINTS, fault_point, pause_point
from wap_core.identifiers import TableId
from wap_core.lake.multitable import MultiTableConflictError
from wap_core.states import Action, Outcome
from wap_core.store.journal import Intent, IntentDraft, JournalEntry
from wap_core.values import JsonObject
from wap_core.workflow.reconcile import acting

if TYPE_CHECKING:
    from wap_core.lakehouse import Lakehouse
    from wap_core.session import Session


@dataclass(frozen=True)
class Moved:
    """What a ref move's commit step did: its outcome row (``done``: the ref moved)."""

    outcome: Outcome
    snapshot_after: int | None = None
    done: bool = True
    details: JsonObject | None = None


@dataclass(frozen=True)
class Notice:
    """The notification of a move that landed (sent after its outcome row; its status is the move's outcome)."""

    event: notify.Event
    summary: str
    snapshot_id: int | None
    branch: str | None = None


@dataclass(frozen=True)
class RefMove:
    """A declared ref move: the intent's fields. :meth:`run` announces it, commits, journals, notifies."""

    session: Session  # who moves it, in which lakehouse
    action: Action
    table: TableId
    branch: str
    before: int | None  # the intent's expected_before (the precondition's snapshot)
    after: int | None = None  # the intent's expected_after
    reason: str | None = None
    details: JsonObject = field(default_factory=dict)
    notify_refusal: bool = True  # a busy branch's refusal is notified (rollback/reopen: not)

    @property
    def lh(self) -> Lakehouse:
        """The session's lakehouse."""
        return self.session.lakehouse

    @property
    def user(self) -> str:
        """Who moves the ref."""
        return self.session.user

    def refuse(self, exc: RefusedError, before: int | None = None) -> RefusedError:
        """Journal (and notify, per the declaration) a refusal of this move before it is announced: the
        session's one refusal path."""
        return self.session.refuse(
            self.action,
            exc,
            table=self.table,
            branch=self.branch,
            before=self.before if before is None else before,
            notify_it=self.notify_refusal,
        )

    def begin(self, *, journal_busy: bool = True) -> Intent:
        """Commit the intent row (before any Iceberg commit); a busy branch is a journaled refusal.

        ``journal_busy=False``: a busy branch raises :class:`BranchBusyError` unjournaled (gc skips it).
        """
        self._point(PAUSE_POINTS, f"before_{self.action}_intent", pause_point)
        if not journal_busy:
            return self._announce()
        try:
            return self._announce()
        except BranchBusyError as exc:
            raise self.refuse(exc) from exc

    def _announce(self) -> Intent:
        return self.lh.journal.begin_intent(
            user=self.user,
            action=self.action,
            table=str(self.table),
            branch=self.branch,
            expected_before=self.before,
            expected_after=self.after,
            reason=self.reason,
            details=self.details,
        )

    def run(
        self,
        commit: Callable[[Intent], Moved],
        notice: Callable[[Moved], Notice | None] | None = None,
        *,
        intent: Intent | None = None,
    ) -> Moved:
        """Announce (unless ``intent`` is already announced), commit, record the outcome, notify.

        ``commit`` performs the Iceberg commit(s) and says what happened; raising (a
        :class:`~wap_core.exceptions.ConflictError` for a lost race) leaves the outcome to
        :func:`~wap_core.workflow.reconcile.acting`.
        """
        intent = intent if intent is not None else self.begin()
        with acting(self.lh, intent):
            self._point(FAULT_POINTS, f"after_{self.action}_intent", fault_point)
            self._point(PAUSE_POINTS, f"after_{self.action}_intent", pause_point)
            moved = commit(intent)
            if moved.done:
                self._point(FAULT_POINTS, f"after_{self.action}_commit", fault_point)
            self.lh.journal.resolve_intent(
                intent,
                outcome=moved.outcome,
                done=moved.done,
                snapshot_after=moved.snapshot_after,
                details=moved.details,
            )
        n = notice(moved) if notice is not None and moved.done else None
        if n is not None:
            self.session.notify(
                n.event,
                table=str(self.table),
                branch=self.branch if n.branch is None else n.branch,
                user=self.user,
                status=moved.outcome.value,
                summary=n.summary,
                snapshot_id=n.snapshot_id,
            )
        return moved

    @staticmethod
    def _point(known: tuple[str, ...], name: str, hit: Callable[[str], None]) -> None:
        if name in known:  # not every action has every point (wap_core.actions declares them)
            hit(name)


@dataclass(frozen=True)
class Unneeded:
    """What a :class:`BatchMove`'s commit step returns when another commit already made its move (a concurrent
    publish of the same heads): nothing to do, every intent ``abandoned`` with ``why``."""

    why: str


@dataclass(frozen=True)
class TableMove:
    """One table's part of a :class:`BatchMove`: its ref before and after (the intent's expected snapshots)."""

    table: TableId
    before: int | None
    after: int | None
    details: JsonObject = field(
        default_factory=dict
    )  # this table's own intent details (merged over the batch's)


@dataclass(frozen=True)
class BatchMove:
    """Several tables' ref moves that land together (a batch that spans tables, on its branch ``branch``).

    :meth:`run` announces one intent per table in ONE journal transaction, commits, records every outcome in
    ONE transaction and sends ONE notification. A lost race (a :class:`ConflictError` from the commit step,
    e.g. :class:`~wap_core.lake.multitable.MultiTableConflictError` naming the table that lost) resolves every
    intent ``refused``; any other exception is settled per table from the metadata
    (:func:`~wap_core.workflow.reconcile.acting`).
    """

    session: Session
    action: Action
    branch: str  # the batch's name: every table's branch
    tables: tuple[TableMove, ...]
    reason: str | None = None
    details: JsonObject = field(default_factory=dict)
    ref: str | None = None  # the ref each table's intent moves (and locks), when not the batch's branch: main
    subject: str | None = None  # how messages name the move (a branch, a batch of one): else "batch <branch>"
    notify_refusal: bool = True  # a refusal before the intents is notified (a one-table rollback's: not)

    @property
    def label(self) -> str:
        """What the move acts on, in messages: ``subject``, else ``batch <branch>``."""
        return self.subject if self.subject is not None else f"batch {self.branch}"

    @property
    def lh(self) -> Lakehouse:
        """The session's lakehouse."""
        return self.session.lakehouse

    @property
    def moved_ref(self) -> str:
        """The ref every table's intent names: ``ref``, else the batch's branch."""
        return self.ref if self.ref is not None else self.branch

    @property
    def where(self) -> str:
        """The batch's tables, for a notification's ``table``."""
        return ", ".join(str(t.table) for t in self.tables)

    def refuse(self, exc: RefusedError) -> RefusedError:
        """Journal ``exc`` as a refusal of every table's move (the session's one refusal path; one notification)."""
        for n, t in enumerate(self.tables):
            self.session.refuse(
                self.action,
                exc,
                table=t.table,
                branch=self.moved_ref,
                before=t.before,
                notify_it=n == 0 and self.notify_refusal,
            )
        return exc

    def begin(self) -> list[Intent]:
        """Commit every table's intent row in ONE transaction; a busy branch refuses them all (journaled)."""
        RefMove._point(PAUSE_POINTS, f"before_{self.action}_batch_intents", pause_point)
        drafts = [
            IntentDraft(
                self.session.user,
                self.action,
                str(t.table),
                self.moved_ref,
                t.before,
                t.after,
                self.reason,
                {**self.details, **t.details},
            )
            for t in self.tables
        ]
        try:
            return self.lh.journal.begin_intents(drafts)
        except BranchBusyError as exc:
            raise self.refuse(
                BranchBusyError(f"{self.action} of {self.label} refused (nothing announced): {exc}")
            ) from exc

    def run(
        self,
        commit: Callable[[list[Intent]], dict[int, int] | Unneeded | None],
        outcome: Outcome,
        notice: Notice | None,
        *,
        also: Callable[[Connection], object] | None = None,
    ) -> list[JournalEntry]:
        """Announce, commit (``commit`` moves every ref or raises), record ``outcome`` for every table with
        ``also(conn)`` in the same transaction, notify ``notice`` (None: not notified); the outcome rows.

        A commit step that finds the move already made by another commit returns :class:`Unneeded`: every
        intent is resolved ``abandoned`` (not done, its ``why`` in the details), nothing is notified."""
        intents = self.begin()
        with ExitStack() as stack:
            for intent in intents:
                stack.enter_context(acting(self.lh, intent))
            self._points(f"after_{self.action}_batch_intents")
            try:
                landed = commit(intents) or {}  # intent id -> the snapshot it moved to, when not its expected
            except ConflictError as exc:
                raise self._lost(intents, exc) from exc
            if isinstance(landed, Unneeded):
                return self.lh.journal.resolve_intents(
                    [(i, None) for i in intents],
                    outcome=Outcome.ABANDONED,
                    done=False,
                    details={"why": landed.why},
                )
            self._points(f"after_{self.action}_batch_commit")
            self._points(f"before_{self.action}_batch_outcome")
            entries = self.lh.journal.resolve_intents(
                [(i, landed.get(i.id, i.expected_after)) for i in intents],
                outcome=outcome,
                done=True,
                also=also,
            )
        if notice is None:  # a move that is not notified (a rebase)
            return entries
        self.session.notify(
            notice.event,
            table=self.where,
            branch=self.branch if notice.branch is None else notice.branch,
            user=self.session.user,
            status=outcome.value,
            summary=notice.summary,
            snapshot_id=notice.snapshot_id,
        )
        return entries

    def _lost(self, intents: list[Intent], exc: ConflictError) -> ConflictError:
        """A lost race: nothing moved; every intent resolved ``refused`` naming the table that lost, one notification."""
        loser = str(exc.table) if isinstance(exc, MultiTableConflictError) else None
        err = ConflictError(
            f"{self.action} of {self.label} lost a race"
            + (f" ({loser} lost: its ref changed since it was loaded)" if loser else "")
            + ("; nothing moved" if self.subject is not None else "; no table of the batch moved")
            + f" ({exc})"
        )
        entries = self.lh.journal.resolve_intents(
            [(i, None) for i in intents],
            outcome=Outcome.REFUSED,
            done=False,
            reason=str(err),
            details={"code": err.reason_code, "lost": loser},
        )
        err.journaled = True
        if entries:
            self.session.notify(
                notify.Event.REFUSED,
                table=self.where,
                branch=self.branch,
                user=self.session.user,
                status=err.reason_code,
                summary=str(err),
                snapshot_id=None,
            )
        return err

    @staticmethod
    def _points(name: str) -> None:
        RefMove._point(FAULT_POINTS, name, fault_point)
        RefMove._point(PAUSE_POINTS, name, pause_point)
