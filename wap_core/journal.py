"""The journal: who did what, durably, in the catalog's own SQL database.

Two tables next to Iceberg's own (``iceberg_tables``): ``wap_journal`` (every
ingest, audit, publish, rebase, discard and refusal) and ``wap_audits`` (each
audit's full result, keyed by the audited snapshot). Any SQL client can read them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from sqlalchemy.exc import IntegrityError
from sqlalchemy import (
    BigInteger,
    Column,
    DateTime,
    Engine,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    and_,
    desc,
    func,
    insert,
    select,
)

_meta = MetaData()

journal_table = Table(
    "wap_journal",
    _meta,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("at", DateTime(timezone=True), nullable=False, index=True),
    Column("user_name", String(255), nullable=False),
    Column("action", String(32), nullable=False),
    Column("table_name", String(512), nullable=True, index=True),
    Column("branch", String(255), nullable=True),
    Column("snapshot_before", BigInteger, nullable=True),
    Column("snapshot_after", BigInteger, nullable=True),
    Column("outcome", String(32), nullable=False),
    Column("reason", Text, nullable=True),
    Column("details", Text, nullable=True),
)

audits_table = Table(
    "wap_audits",
    _meta,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("at", DateTime(timezone=True), nullable=False),
    Column("user_name", String(255), nullable=False),
    Column("table_name", String(512), nullable=False, index=True),
    Column("branch", String(255), nullable=False),
    Column("snapshot_id", BigInteger, nullable=True),
    Column("fork_snapshot_id", BigInteger, nullable=True),
    Column("status", String(16), nullable=False),
    Column("result", Text, nullable=False),
)

profiles_table = Table(
    "wap_profiles",
    _meta,
    Column("table_name", String(512), primary_key=True),
    Column("snapshot_id", BigInteger, primary_key=True),
    Column("at", DateTime(timezone=True), nullable=False),
    Column("profile", Text, nullable=False),
)

batch_profiles_table = Table(
    "wap_batch_profiles",
    _meta,
    Column("table_name", String(512), primary_key=True),
    Column("head_snapshot_id", BigInteger, primary_key=True),
    Column("fork_snapshot_id", BigInteger, nullable=False),
    Column("at", DateTime(timezone=True), nullable=False),
    Column("profile", Text, nullable=False),
)

# ----------------------------------------------------------------------------- check engine tables
# (wap_core.checks.store reads and writes them; a migration must create them like the tables above)

# A check's measurement of one batch head, keyed by its fingerprint (type, measured arguments and the
# snapshots it reads, never its thresholds): a re-audit measures only what changed.
check_results_table = Table(
    "wap_check_results",
    _meta,
    Column("table_name", String(512), primary_key=True),
    Column("head_snapshot_id", BigInteger, primary_key=True),
    Column("fingerprint", String(64), primary_key=True),
    Column("at", DateTime(timezone=True), nullable=False),
    Column("measurement", Text, nullable=False),
)

# The metrics of each audited batch (row count, and what the suite's anomaly checks measure), keyed
# by its head snapshot: the history the anomaly check compares a new batch with.
batch_metrics_table = Table(
    "wap_batch_metrics",
    _meta,
    Column("table_name", String(512), primary_key=True),
    Column("head_snapshot_id", BigInteger, primary_key=True),
    Column("fork_snapshot_id", BigInteger, nullable=True),
    Column("at", DateTime(timezone=True), nullable=False),
    Column("metrics", Text, nullable=False),
)
# ----------------------------------------------------------------------------- end of check engine tables

ACTIONS = ("ingest", "audit", "publish", "rebase", "discard", "create")


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


def _aware(dt: datetime) -> datetime:
    return dt if dt.tzinfo is not None else dt.replace(tzinfo=timezone.utc)


@dataclass(frozen=True)
class JournalEntry:
    id: int
    at: datetime
    user: str
    action: str
    table: str | None
    branch: str | None
    snapshot_before: int | None
    snapshot_after: int | None
    outcome: str
    reason: str | None
    details: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "at": self.at.isoformat(),
            "user": self.user,
            "action": self.action,
            "table": self.table,
            "branch": self.branch,
            "snapshot_before": self.snapshot_before,
            "snapshot_after": self.snapshot_after,
            "outcome": self.outcome,
            "reason": self.reason,
            "details": self.details,
        }


@dataclass(frozen=True)
class StoredAudit:
    at: datetime
    user: str
    table: str
    branch: str
    snapshot_id: int | None
    fork_snapshot_id: int | None
    status: str
    result: dict[str, Any]


class Journal:
    """Append-only log over a SQLAlchemy engine (the catalog's)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        _meta.create_all(engine, checkfirst=True)

    def record(
        self,
        *,
        user: str,
        action: str,
        outcome: str,
        table: str | None = None,
        branch: str | None = None,
        snapshot_before: int | None = None,
        snapshot_after: int | None = None,
        reason: str | None = None,
        details: dict[str, Any] | None = None,
    ) -> None:
        with self.engine.begin() as conn:
            conn.execute(
                insert(journal_table).values(
                    at=utcnow(),
                    user_name=user,
                    action=action,
                    table_name=table,
                    branch=branch,
                    snapshot_before=snapshot_before,
                    snapshot_after=snapshot_after,
                    outcome=outcome,
                    reason=reason,
                    details=json.dumps(details or {}, default=str),
                )
            )

    def history(
        self,
        table: str | None = None,
        *,
        branch: str | None = None,
        action: str | None = None,
        limit: int = 500,
    ) -> list[JournalEntry]:
        q = select(journal_table).order_by(desc(journal_table.c.id)).limit(limit)
        if table is not None:
            q = q.where(journal_table.c.table_name == table)
        if branch is not None:
            q = q.where(journal_table.c.branch == branch)
        if action is not None:
            q = q.where(journal_table.c.action == action)
        with self.engine.connect() as conn:
            rows = conn.execute(q).mappings().all()
        return [
            JournalEntry(
                id=r["id"],
                at=_aware(r["at"]),
                user=r["user_name"],
                action=r["action"],
                table=r["table_name"],
                branch=r["branch"],
                snapshot_before=r["snapshot_before"],
                snapshot_after=r["snapshot_after"],
                outcome=r["outcome"],
                reason=r["reason"],
                details=json.loads(r["details"] or "{}"),
            )
            for r in rows
        ]

    def save_audit(
        self,
        *,
        user: str,
        table: str,
        branch: str,
        snapshot_id: int | None,
        fork_snapshot_id: int | None,
        status: str,
        result: dict[str, Any],
        at: datetime,
    ) -> None:
        with self.engine.begin() as conn:
            conn.execute(
                insert(audits_table).values(
                    at=at,
                    user_name=user,
                    table_name=table,
                    branch=branch,
                    snapshot_id=snapshot_id,
                    fork_snapshot_id=fork_snapshot_id,
                    status=status,
                    result=json.dumps(result, default=str),
                )
            )

    def latest_audits(self, table: str | None = None) -> dict[tuple[str, str], StoredAudit]:
        """The newest audit per (table, branch), in one query."""
        newest = select(func.max(audits_table.c.id).label("id")).group_by(
            audits_table.c.table_name, audits_table.c.branch
        )
        if table is not None:
            newest = newest.where(audits_table.c.table_name == table)
        q = select(audits_table).where(audits_table.c.id.in_(newest.scalar_subquery()))
        with self.engine.connect() as conn:
            rows = conn.execute(q).mappings().all()
        return {(r["table_name"], r["branch"]): _stored(r) for r in rows}

    def latest_audit(self, table: str, branch: str) -> StoredAudit | None:
        q = (
            select(audits_table)
            .where(and_(audits_table.c.table_name == table, audits_table.c.branch == branch))
            .order_by(desc(audits_table.c.id))
            .limit(1)
        )
        with self.engine.connect() as conn:
            row = conn.execute(q).mappings().first()
        return _stored(row) if row is not None else None

    def created_times(self, table: str | None = None) -> dict[tuple[str, str], datetime]:
        """When each branch was written by ingest (first successful ingest per table/branch)."""
        q = (
            select(journal_table.c.table_name, journal_table.c.branch, func.min(journal_table.c.at).label("at"))
            .where(and_(journal_table.c.action == "ingest", journal_table.c.outcome == "written"))
            .group_by(journal_table.c.table_name, journal_table.c.branch)
        )
        if table is not None:
            q = q.where(journal_table.c.table_name == table)
        with self.engine.connect() as conn:
            rows = conn.execute(q).all()
        return {(r[0], r[1]): _aware(r[2]) for r in rows if r[2] is not None}

    def load_profile(self, table: str, snapshot_id: int) -> dict[str, Any] | None:
        q = select(profiles_table.c.profile).where(
            and_(profiles_table.c.table_name == table, profiles_table.c.snapshot_id == snapshot_id)
        )
        with self.engine.connect() as conn:
            row = conn.execute(q).first()
        return json.loads(row[0]) if row is not None else None

    def save_profile(self, table: str, snapshot_id: int, profile: dict[str, Any]) -> None:
        """Cache a column profile of an immutable snapshot (first writer wins)."""
        try:
            with self.engine.begin() as conn:
                conn.execute(insert(profiles_table).values(
                    table_name=table, snapshot_id=snapshot_id, at=utcnow(), profile=json.dumps(profile, default=str)))
        except IntegrityError:
            pass

    def save_batch_profile(self, table: str, fork: int, head: int, profile: dict[str, Any]) -> None:
        """Cache the profile of the rows a pure-append branch added in (fork, head]."""
        try:
            with self.engine.begin() as conn:
                conn.execute(insert(batch_profiles_table).values(
                    table_name=table, head_snapshot_id=head, fork_snapshot_id=fork, at=utcnow(),
                    profile=json.dumps(profile, default=str)))
        except IntegrityError:
            pass

    def load_batch_profile(self, table: str, head: int) -> tuple[int, dict[str, Any]] | None:
        q = select(batch_profiles_table.c.fork_snapshot_id, batch_profiles_table.c.profile).where(
            and_(batch_profiles_table.c.table_name == table, batch_profiles_table.c.head_snapshot_id == head)
        )
        with self.engine.connect() as conn:
            row = conn.execute(q).first()
        return (int(row[0]), json.loads(row[1])) if row is not None else None

    def audit_record(self, table: str | None = None, limit: int = 200) -> list[StoredAudit]:
        """Recent audits (newest first), for pass/fail records and charts."""
        q = select(audits_table).order_by(desc(audits_table.c.id)).limit(limit)
        if table is not None:
            q = q.where(audits_table.c.table_name == table)
        with self.engine.connect() as conn:
            rows = conn.execute(q).mappings().all()
        return [_stored(r) for r in rows]


def _stored(r: Any) -> StoredAudit:
    return StoredAudit(
        at=_aware(r["at"]),
        user=r["user_name"],
        table=r["table_name"],
        branch=r["branch"],
        snapshot_id=r["snapshot_id"],
        fork_snapshot_id=r["fork_snapshot_id"],
        status=r["status"],
        result=json.loads(r["result"]),
    )
