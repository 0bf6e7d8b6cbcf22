"""The one door for side effects: a :class:`Session` is a lakehouse and who acts in it.

``Session(lakehouse, identity)`` is the only thing that authorizes, journals, refuses and notifies. Every
workflow action takes one; the layers below ``workflow/`` (``lake/``, ``checks/``, ``notify/``,
``security/``) receive plain values (a table, a catalog, settings, a journal), never the lakehouse nor the
session.

Who acts is an explicit :class:`Identity`, never inside :class:`~wap_core.config.Settings`: the CLI's comes
from ``WAP_TOKEN`` or ``WAP_USER`` / the OS user (:func:`wap_core.workflow.tokens.cli_identity`), the
console's from its sign-in.

One refusal path, :meth:`Session.refuse`: it journals the refusal (outcome ``refused``, the code in
``details``) and notifies it (event ``refused``), except where the refused action's declaration says its
refusals are not notified: rollback and reopen (:attr:`wap_core.workflow.refmove.RefMove.notify_refusal`), a
self-approval and an authentication (nobody proven yet to notify about).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Unpack

from wap_core import notify
from wap_core.exceptions import RefusedError
from wap_core.security.access import AccessPolicy, Decision, Permission, Role, access_policy, decide, denied
from wap_core.states import Action, Outcome
from wap_core.values import JsonObject

if TYPE_CHECKING:
    from wap_core.identifiers import TableId
    from wap_core.lakehouse import Lakehouse
    from wap_core.notify.outgoing import NoticeFields
    from wap_core.store.journal import EntryFields, JournalEntry

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Identity:
    """Who acts: a user name, and the service token it proved, if any (whose role is then its ceiling)."""

    user: str
    token_id: int | None = None  # the verified service token (WAP_TOKEN) the user acts with
    token_role: Role | None = None  # that token's role: the user holds exactly it

    @property
    def token_holder(self) -> tuple[str, Role] | None:
        """(user, role) of a verified service token, for :func:`~wap_core.security.access.access_policy`."""
        return (self.user, self.token_role) if self.token_role is not None else None


@dataclass(frozen=True)
class Session:
    """A lakehouse and who acts in it: authorizes, journals, refuses and notifies."""

    lakehouse: Lakehouse
    identity: Identity

    @property
    def user(self) -> str:
        """The acting user's name."""
        return self.identity.user

    def as_user(self, user: str | None) -> Session:
        """This session, or the same lakehouse acting as ``user`` (a service acting for a named user)."""
        if user is None or user == self.identity.user:
            return self
        return Session(self.lakehouse, Identity(user))

    # ----- authorization ---------------------------------------------------
    def policy(self) -> AccessPolicy:
        """The access policy this identity is judged by (a service token's role is its ceiling)."""
        return access_policy(self.lakehouse.settings, self.identity.token_holder)

    def decide(self, permission: Permission, *, action: str | None = None) -> Decision:
        """May the acting user do ``permission``? Pure: nothing is journaled."""
        return decide(self.policy(), self.user, permission, action=action)

    def authorize(
        self,
        permission: Permission,
        *,
        table: TableId | None = None,
        branch: str | None = None,
        action: str | None = None,
    ) -> None:
        """Refuse (AccessDeniedError, exit 1; journaled and notified) unless the acting user may do
        ``permission``. A broken access file raises AccessFileError (exit 2), never allows."""
        d = self.decide(permission, action=action)
        if d.allowed:
            return
        raise self.refuse(
            Action(d.action),
            denied(d),
            table=table,
            branch=branch,
            summary=f"{d.action} refused: {d.message}",
        )

    # ----- the one refusal path ---------------------------------------------
    def refuse(
        self,
        action: Action | str,
        exc: RefusedError,
        *,
        table: TableId | str | None = None,
        branch: str | None = None,
        before: int | None = None,
        details: JsonObject | None = None,
        notify_it: bool = True,
        summary: str | None = None,
    ) -> RefusedError:
        """Journal the refusal ``exc`` of ``action`` (and notify it unless ``notify_it`` is False); returns
        ``exc`` to raise. The journal's row: the acting user, ``action``, outcome ``refused``, the message as
        reason and ``{"code": exc.reason_code, **details}``."""
        log.info("refused: %s", exc)
        where = str(table) if table is not None else None
        self.lakehouse.journal.record(
            user=self.user,
            action=Action(action),
            outcome=Outcome.REFUSED,
            table=where,
            branch=branch,
            snapshot_before=before,
            reason=str(exc),
            details={"code": exc.reason_code, **(details or {})},
        )
        if notify_it:
            self.notify(
                notify.Event.REFUSED,
                table=where or "",
                branch=branch,
                user=self.user,
                status=exc.reason_code,
                summary=summary if summary is not None else str(exc),
                snapshot_id=before,
            )
        return exc

    # ----- journal and notifications ----------------------------------------
    def record(self, action: Action, outcome: Outcome, **fields: Unpack[EntryFields]) -> None:
        """Journal one entry as the acting user."""
        self.lakehouse.journal.record(user=self.user, action=action, outcome=outcome, **fields)

    def notify(self, event: notify.Event, **fields: Unpack[NoticeFields]) -> None:
        """Queue a notification (never raises, never blocks on the network)."""
        notify.emit(self.lakehouse.journal, self.lakehouse.settings, event, **fields)

    def notify_outcome(self, entry: JournalEntry | None) -> None:
        """Notify an outcome recorded on another path (reconciliation, an action settled after an exception)."""
        notify.emit_outcome(self.lakehouse.journal, self.lakehouse.settings, entry)


def session_of(target: Session | Lakehouse, user: str | None = None) -> Session:
    """The session an action runs in: ``target`` itself (acting as ``user`` if one is named), or, for a bare
    lakehouse (the call shape of the faces before sessions), the lakehouse acting as ``user`` or else the
    environment's user (``WAP_USER`` / the OS user, ``settings.user``)."""
    if isinstance(target, Session):
        return target.as_user(user)
    return Session(target, Identity(user or target.settings.user))
