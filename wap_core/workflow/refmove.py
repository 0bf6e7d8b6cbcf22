"""The one path every ref move takes, in the spirit of PyIceberg's transaction -> ``commit()``.

An action (publish, force publish, discard, rebase, rollback, reopen, ...) validates, authorizes
and reads its precondition, then declares a :class:`RefMove` (who moves which ref of which table,
the snapshots its intent expects before and after, its reason and details) and runs it with its
commit step. Everything else lives here, once:

* the **intent** row, committed before any Iceberg commit; a branch another action holds is a
  journaled refusal (:meth:`wap_core.session.Session.refuse`, notified unless the declaration says not to);
* the **fault points** ``after_<action>_intent`` / ``after_<action>_commit`` (the kill tests) and
  the pause points ``before_<action>_intent`` (the race tests) and ``after_publish_intent`` (the
  object store stopped in the middle of a publish);
* the **outcome** row: the commit step's :class:`Moved` (success outcome, or a move that turned out
  unnecessary); an exception from the step is settled from the metadata
  (:func:`wap_core.workflow.reconcile.acting`): a lost race (:class:`ConflictError`) is journaled
  ``refused`` with the reason it lost, never with the winner's outcome;
* the **notification** of a move that landed (:class:`Notice`), after the outcome row.

Retries of the Iceberg commit itself are :mod:`wap_core.lake.refs`' one policy, used by the steps.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from wap_core import notify
from wap_core.exceptions import BranchBusyError, RefusedError
from wap_core.faults import FAULT_POINTS, PAUSE_POINTS, fault_point, pause_point
from wap_core.identifiers import TableId
from wap_core.states import Action, Outcome
from wap_core.store.journal import Intent
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
