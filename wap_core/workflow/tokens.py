"""Service tokens as admin actions, and the CLI's identity.

* :func:`create_token` / :func:`list_tokens` / :func:`revoke_token`: admin only (``authorize``),
  creation and revocation journaled (actions ``create_token`` / ``revoke_token``; never the token).
* :func:`cli_identity`: who the CLI acts as. With ``WAP_TOKEN`` set, the token's user with exactly
  the token's role, a ceiling no grant of the access file raises (an unknown, expired or revoked token is
  refused, exit 1, journaled: an unknown one as :data:`UNAUTHENTICATED`, never as the ``WAP_USER`` it
  would have overridden; an expired or revoked one as its token's user). Without it,
  ``WAP_USER`` / the OS user, unless the access file says ``cli_identity: token``: then the bare
  environment name is refused (exit 1, journaled) — on a shared server anyone can set ``WAP_USER``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from datetime import timedelta
from typing import TYPE_CHECKING

from wap_core.config import register_secret
from wap_core.durations import format_duration, parse_duration
from wap_core.exceptions import NotFoundError, RefusedError, ValidationError
from wap_core.security import tokens as store
from wap_core.security.access import Permission, Role, access_policy
from wap_core.security.tokens import TokenInfo, TokenStatus
from wap_core.session import Identity, Session, session_of
from wap_core.states import Action, Outcome
from wap_core.store.journal import utcnow

if TYPE_CHECKING:
    from wap_core.lakehouse import Lakehouse

log = logging.getLogger(__name__)

MAX_LIFETIME = timedelta(days=366)  # a token always expires, at most a year (and a day) after its creation
TOKEN_ENV = "WAP_TOKEN"
CREATE, REVOKE, LIST, AUTHENTICATE = "create_token", "revoke_token", "list_tokens", "authenticate"
# The journal's user of a refused unknown (forged, mistyped) token: nobody was authenticated, and the
# environment's name (WAP_USER / the OS user), which a token overrides, proves nothing either (it is kept in
# the row's details as ``environment_user``, unverified).
UNAUTHENTICATED = "unauthenticated"


def _valid_user(name: str) -> str:
    if not name or len(name) > 255 or any(ch.isspace() or not ch.isprintable() for ch in name):
        raise ValidationError(
            f"invalid user name {name!r}: 1 to 255 characters, no blanks or control characters"
        )
    return name


def create_token(
    session: Session | Lakehouse, token_user: str, role: str, expires: str = "30d", *, user: str | None = None
) -> tuple[str, TokenInfo]:
    """A new service token acting as ``token_user`` with ``role`` for ``expires`` (admin only).

    Returns the token (show it once: only its SHA-256 is stored) and its stored row.
    """
    s = session_of(session, user)
    lh, actor = s.lakehouse, s.user
    s.authorize(Permission.ADMIN, action=CREATE)
    _valid_user(token_user)
    try:
        granted = Role.parse(role)
    except ValueError as exc:
        raise ValidationError(str(exc)) from exc
    lifetime = parse_duration(expires, "--expires")
    if not timedelta(0) < lifetime <= MAX_LIFETIME:
        raise ValidationError(f"--expires must be more than 0s and at most {format_duration(MAX_LIFETIME)}")
    token, info = store.store_token(
        lh.journal.engine,
        user=token_user,
        role=granted.label,
        expires_at=utcnow() + lifetime,
        created_by=actor,
    )
    register_secret(token)  # from now on masked in logs, the journal and errors of this process
    s.record(
        action=Action.CREATE_TOKEN,
        outcome=Outcome.CREATED,
        reason=f"service token {info.id} for {token_user} ({granted.label}), expires {info.expires_at.isoformat(timespec='seconds')}",
        details={"token_id": info.id, "token_user": token_user, "role": granted.label},
    )
    return token, info


def list_tokens(session: Session | Lakehouse, *, user: str | None = None) -> list[TokenInfo]:
    """Every service token (never the tokens themselves), oldest first (admin only)."""
    s = session_of(session, user)
    s.authorize(Permission.ADMIN, action=LIST)
    return store.list_tokens(s.lakehouse.journal.engine)


def revoke_token(session: Session | Lakehouse, token_id: int, *, user: str | None = None) -> TokenInfo:
    """Revoke a service token at once (admin only); revoking it again changes nothing."""
    s = session_of(session, user)
    lh, actor = s.lakehouse, s.user
    s.authorize(Permission.ADMIN, action=REVOKE)
    if store.token_by_id(lh.journal.engine, token_id) is None:
        raise NotFoundError(f"no service token {token_id}")
    if store.revoke(lh.journal.engine, token_id, actor):
        s.record(
            action=Action.REVOKE_TOKEN,
            outcome=Outcome.REVOKED,
            reason=f"service token {token_id} revoked",
            details={"token_id": token_id},
        )
    info = store.token_by_id(lh.journal.engine, token_id)
    assert info is not None
    return info


def _refuse(
    lh: Lakehouse, user: str, message: str, code: str, token_id: int | None = None, **details: str
) -> RefusedError:
    """An authentication refused, through the one refusal path, as ``user``; not notified: nobody was proven."""
    return Session(lh, Identity(user)).refuse(
        Action(AUTHENTICATE),
        RefusedError(message, code),
        details={**({"token_id": token_id} if token_id is not None else {}), **details},
        notify_it=False,
    )


def cli_identity(lh: Lakehouse, env: Mapping[str, str] | None = None) -> Session:
    """The CLI's session: the lakehouse acting as the token's user (``WAP_TOKEN``, with exactly the token's
    role) or the environment's (``WAP_USER`` / the OS user, ``settings.user``). The identity is the session's,
    never written into the settings.

    Refuses (RefusedError, exit 1, journaled) an unknown, expired or revoked token, and the bare
    environment name when the access file says ``cli_identity: token``.
    """
    env = os.environ if env is None else env
    env_user = lh.settings.user
    token = env.get(TOKEN_ENV, "").strip()
    if token:
        register_secret(token)
        info = store.find_token(lh.journal.engine, token)
        if info is None:
            raise _refuse(
                lh,
                UNAUTHENTICATED,
                f"{TOKEN_ENV} is not a valid service token",
                "invalid_token",
                environment_user=env_user,
            )
        status = info.status()
        if status is TokenStatus.EXPIRED:
            raise _refuse(
                lh,
                info.user,
                f"service token {info.id} ({info.user}) expired at {info.expires_at.isoformat(timespec='seconds')}",
                "token_expired",
                info.id,
            )
        if status is TokenStatus.REVOKED:
            when = info.revoked_at.isoformat(timespec="seconds") if info.revoked_at else "?"
            raise _refuse(
                lh,
                info.user,
                f"service token {info.id} ({info.user}) was revoked at {when} by {info.revoked_by}",
                "token_revoked",
                info.id,
            )
        # the same lakehouse (catalog, journal) acting as the token's user with exactly its role
        return Session(lh, Identity(info.user, token_id=info.id, token_role=Role.parse(info.role)))
    policy = access_policy(lh.settings)
    if policy.cli_identity == "token":
        raise _refuse(
            lh,
            env_user,
            f"the access file {policy.path} sets cli_identity: token: the CLI needs a service token in "
            f"{TOKEN_ENV}; the environment name {env_user!r} (WAP_USER / the OS user) is not accepted",
            "token_required",
        )
    return Session(lh, Identity(env_user))
