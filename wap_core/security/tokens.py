"""Service tokens of the CLI: a high-entropy random secret, stored only as its SHA-256.

``wap token create --user ci-bot --role steward --expires 30d`` (admin; guarded in
:mod:`wap_core.workflow.tokens`) prints a token once: ``wapt_`` + 43 URL-safe characters (256 random
bits from :mod:`secrets`). The catalog's database keeps its SHA-256 (``wap_tokens``, migration 0006),
never the token. The CLI passed ``WAP_TOKEN`` hashes it, finds the row by the hash and compares the
digests in constant time (:func:`hmac.compare_digest`); an unknown, expired or revoked token is refused.
A token is a secret: it is registered with :func:`wap_core.config.register_secret` wherever it is read,
so logs, the journal and error messages mask it; and :func:`wap_core.config.mask_secrets` masks anything of
its shape (``wapt_`` + URL-safe characters) in any text, so a token pasted into a comment or a reason is
never stored (nor shown) in clear.

This module is the store only (no authorization): creating, listing and revoking tokens are admin
actions of :mod:`wap_core.workflow.tokens`.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from typing import Any, ClassVar

from sqlalchemy import Column, Engine, String, Table, UniqueConstraint, and_, insert, select, update

from wap_core.config import SERVICE_TOKEN, SERVICE_TOKEN_PREFIX
from wap_core.store.journal import utcnow
from wap_core.store.schema import at_column, from_row, id_column, metadata, user_column
from wap_core.values import JsonOrder

# Migration 0006: only the SHA-256 of each token is stored; the token itself is shown once, when created.
tokens_table = Table(
    "wap_tokens",
    metadata,
    id_column(),
    Column("token_hash", String(64), nullable=False),
    user_column(),  # the user the token acts as
    Column("role", String(16), nullable=False),  # the role it grants: viewer | steward | approver | admin
    at_column("created_at"),
    user_column("created_by"),
    at_column("expires_at"),
    at_column("revoked_at", nullable=True),
    user_column("revoked_by", nullable=True),
    UniqueConstraint("token_hash", name="ux_wap_tokens_token_hash"),
)

PREFIX = SERVICE_TOKEN_PREFIX
_FORMAT = SERVICE_TOKEN  # PREFIX + secrets.token_urlsafe(32); mask_secrets masks this shape in any text


class TokenStatus(str, Enum):
    """Whether a token still acts."""

    ACTIVE = "active"
    EXPIRED = "expired"
    REVOKED = "revoked"


@dataclass(frozen=True)
class TokenInfo:
    """One stored token (never the token itself): who it acts as, its role and lifetime (its JSON adds
    the ``status`` now)."""

    __json__: ClassVar[JsonOrder] = (..., "status")

    id: int
    user: str
    role: str
    created_at: datetime
    created_by: str
    expires_at: datetime
    revoked_at: datetime | None = None
    revoked_by: str | None = None

    def status(self, now: datetime | None = None) -> TokenStatus:
        """Revoked, expired (at ``now``, default the current time) or active."""
        if self.revoked_at is not None:
            return TokenStatus.REVOKED
        if (now or utcnow()) >= self.expires_at:
            return TokenStatus.EXPIRED
        return TokenStatus.ACTIVE


def new_token() -> str:
    """A fresh token: ``wapt_`` + 256 random bits, URL-safe."""
    return PREFIX + secrets.token_urlsafe(32)


def token_hash(token: str) -> str:
    """The SHA-256 (hex) of a token: what the database keeps."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def _info(r: Any) -> TokenInfo:
    return from_row(TokenInfo, r)


def store_token(
    engine: Engine, *, user: str, role: str, expires_at: datetime, created_by: str
) -> tuple[str, TokenInfo]:
    """Create a token for ``user`` with ``role``; returns the token (shown once) and its stored row."""
    token = new_token()
    now = utcnow()
    with engine.begin() as conn:
        pk = conn.execute(
            insert(tokens_table).values(
                token_hash=token_hash(token),
                user_name=user,
                role=role,
                created_at=now,
                created_by=created_by,
                expires_at=expires_at,
            )
        ).inserted_primary_key
        assert pk is not None
    return token, TokenInfo(int(pk[0]), user, role, now, created_by, expires_at)


def find_token(engine: Engine, token: str) -> TokenInfo | None:
    """The stored row of ``token`` (whatever its status), or None when it is malformed or unknown."""
    if not _FORMAT.fullmatch(token):
        return None
    digest = token_hash(token)
    with engine.connect() as conn:
        row = conn.execute(select(tokens_table).where(tokens_table.c.token_hash == digest)).mappings().first()
    if row is None or not hmac.compare_digest(str(row["token_hash"]), digest):
        return None
    return _info(row)


def token_by_id(engine: Engine, token_id: int) -> TokenInfo | None:
    """The stored row with this id, or None."""
    with engine.connect() as conn:
        row = conn.execute(select(tokens_table).where(tokens_table.c.id == token_id)).mappings().first()
    return _info(row) if row is not None else None


def list_tokens(engine: Engine) -> list[TokenInfo]:
    """Every stored token, oldest first."""
    with engine.connect() as conn:
        rows = conn.execute(select(tokens_table).order_by(tokens_table.c.id)).mappings().all()
    return [_info(r) for r in rows]


def revoke(engine: Engine, token_id: int, by: str) -> bool:
    """Revoke the token (once); True when this call revoked it, False when it was revoked already or is unknown."""
    with engine.begin() as conn:
        res = conn.execute(
            update(tokens_table)
            .where(and_(tokens_table.c.id == token_id, tokens_table.c.revoked_at.is_(None)))
            .values(revoked_at=utcnow(), revoked_by=by)
        )
    return bool(res.rowcount == 1)
