"""The journal: who did what, durably, in the catalog's own SQL database.

Tables next to Iceberg's own (``iceberg_tables``): ``wap_journal`` (every ingest, audit,
publish, rebase, discard and refusal: the outcomes), ``wap_intents`` (every ref move
announced before its Iceberg commit), ``wap_audits`` (each audit's full result, keyed by the
audited snapshot). The console's other tables are defined next to their owners, on the one
metadata of :mod:`wap_core.store.schema`. Any SQL client can read them. Their schema is versioned with Alembic (:mod:`wap_core.store.migrate`);
``Journal()`` upgrades it.

Intent and outcome
------------------
An action that moves a ref (ingest, publish, rebase, discard) first commits an **intent**
row in ``wap_intents`` (who, what, which branch, the snapshots it expects before and after,
why) in its own transaction, THEN makes its Iceberg commit, THEN records the **outcome**:
one ``wap_journal`` row linked by ``intent_id``, written in the same transaction that turns
the intent from ``pending`` into ``done`` (the ref moved) or ``abandoned`` (it did not).

Why a separate intents table rather than a ``pending`` row in ``wap_journal`` that is later
updated: the journal stays an append-only log of decided outcomes (its readers, and any SQL
client, never see a half-decided row), while ``wap_intents`` is the small, mutable work list
that reconciliation scans (indexed by status). The link is unique (``ux_wap_journal_intent_id``),
so an intent can never get two outcome rows, and ``pending -> done/abandoned`` is a conditional
``UPDATE ... WHERE status = 'pending'``: of two processes resolving the same intent exactly one
sees rowcount 1 and writes the outcome row. ``lock_key`` (``table/branch``, unique, cleared on
resolution) allows one in-flight action per branch, so each pending intent is the only
candidate for whatever happened to its branch.

A process that dies between its Iceberg commit and its outcome leaves a pending intent;
:mod:`wap_core.workflow.reconcile` decides it from the Iceberg metadata the next time the table is read.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import Enum
from typing import Any, TypedDict, Unpack

from sqlalchemy import (
    Boolean,
    Column,
    Connection,
    Engine,
    Index,
    Integer,
    RowMapping,
    Select,
    String,
    Table,
    Text,
    UniqueConstraint,
    and_,
    desc,
    false,
    func,
    insert,
    select,
    update,
)
from sqlalchemy.exc import IntegrityError, SQLAlchemyError

from wap_core.config import MASK, is_secret_key, mask_secrets
from wap_core.exceptions import BranchBusyError
from wap_core.states import MAIN_MOVES, Action, CheckStatus, Outcome
from wap_core.store.migrate import upgrade
from wap_core.store.schema import at_column, aware, event_columns, from_row, metadata, snapshot_column
from wap_core.values import JsonObject, Record

log = logging.getLogger(__name__)


def mask_values(obj: Any) -> Any:
    """``obj`` (JSON-like: dicts, lists, scalars) with secrets masked in every string, keys included."""
    if isinstance(obj, str):
        return mask_secrets(obj)
    if isinstance(obj, dict):
        return {
            (mask_values(k) if isinstance(k, str) else k): (
                MASK if isinstance(k, str) and is_secret_key(k) and v else mask_values(v)
            )
            for k, v in obj.items()
        }
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [mask_values(v) for v in obj]
    return obj if obj is None or isinstance(obj, (bool, int, float)) else mask_secrets(str(obj))


journal_table = Table(
    "wap_journal",
    metadata,
    *event_columns(nullable=True, index=True, index_at=True, action=True),
    snapshot_column("snapshot_before"),
    snapshot_column("snapshot_after"),
    Column("outcome", String(32), nullable=False),
    Column("reason", Text, nullable=True),
    Column("details", Text, nullable=True),
    Column("intent_id", Integer, nullable=True),  # the intent this row is the outcome of (migration 0002)
    Column("reconciled", Boolean, nullable=False, server_default=false()),  # recorded by reconciliation
    Index("ux_wap_journal_intent_id", "intent_id", unique=True),
)

intents_table = Table(
    "wap_intents",
    metadata,
    *event_columns(index=True, action=True),
    snapshot_column("expected_before"),
    snapshot_column("expected_after"),
    Column("reason", Text, nullable=True),
    Column("details", Text, nullable=True),
    Column("status", String(16), nullable=False, index=True),
    Column("owner", String(255), nullable=False),  # host|pid|process start|token of the acting process
    at_column("heartbeat_at"),
    at_column("resolved_at", nullable=True),
    Column("lock_key", String(400), nullable=True),  # table/branch while pending, NULL once resolved
    UniqueConstraint("lock_key", name="uq_wap_intents_lock_key"),
)

audits_table = Table(
    "wap_audits",
    metadata,
    *event_columns(index=True),
    snapshot_column("snapshot_id"),
    snapshot_column("fork_snapshot_id"),
    Column("status", String(16), nullable=False),
    Column("result", Text, nullable=False),
)

ACTIONS = (
    "ingest",
    "audit",
    "publish",
    "rebase",
    "discard",
    "create",
    "expire",
    "notify",
    "rollback",
    "reopen",
    "approve",
    "request_changes",
    "comment",
)


HEARTBEAT_SECONDS = 15.0  # an in-flight intent's heartbeat_at is refreshed this often
STALE_AFTER_SECONDS = 120.0  # a pending intent whose heartbeat is older belongs to a dead process


class IntentStatus(str, Enum):
    """The state of a ref move announced in the journal."""

    PENDING = "pending"  # announced; the Iceberg commit may or may not have happened yet
    DONE = "done"  # the ref moved; the outcome row holds the success outcome
    ABANDONED = "abandoned"  # the ref did not move (refused, error, crash before the commit)


def utcnow() -> datetime:
    """The current time in UTC."""
    return datetime.now(UTC)


@dataclass(frozen=True)
class JournalEntry:
    """One row of the journal: an action, the refs before and after, its outcome and reason."""

    id: int
    at: datetime
    user: str
    action: Action
    table: str | None
    branch: str | None
    snapshot_before: int | None
    snapshot_after: int | None
    outcome: Outcome
    reason: str | None
    details: JsonObject
    intent_id: int | None = None
    reconciled: bool = False


@dataclass(frozen=True)
class Intent:
    """A ref move announced before its Iceberg commit (a row of ``wap_intents``)."""

    id: int
    at: datetime
    user: str
    action: Action
    table: str
    branch: str
    expected_before: int | None
    expected_after: int | None
    reason: str | None
    details: JsonObject = field(default_factory=dict)
    status: IntentStatus = IntentStatus.PENDING
    owner: str = ""
    heartbeat_at: datetime | None = None


@dataclass(frozen=True)
class IntentDraft:
    """A ref move to announce (:meth:`Journal.begin_intents`): the fields of its intent row."""

    user: str
    action: Action
    table: str
    branch: str
    expected_before: int | None = None
    expected_after: int | None = None
    reason: str | None = None
    details: JsonObject | None = None


@dataclass(frozen=True)
class StoredAudit:
    """An audit as stored in the journal database, its result as JSON."""

    at: datetime
    user: str
    table: str
    branch: str
    snapshot_id: int | None
    fork_snapshot_id: int | None
    status: CheckStatus  # the audit's overall status
    result: JsonObject

    @property
    def rows_checked(self) -> int | None:
        """The rows the audit read."""
        rows = self.result.get("rows_checked")
        return int(rows) if rows is not None else None

    @property
    def check_statuses(self) -> dict[str, CheckStatus]:
        """Each check's status by name, in the audit's order."""
        return {str(c["name"]): CheckStatus(c["status"]) for c in self.result.get("checks", [])}

    @property
    def failed_checks(self) -> tuple[str, ...]:
        """The checks that failed or errored (they fail the audit)."""
        return tuple(name for name, status in self.check_statuses.items() if status.blocks_publish)


class Journal:
    """Append-only log over a SQLAlchemy engine (the catalog's). Its reads are pure: recovery of
    crashed actions is :func:`wap_core.workflow.reconcile.reconcile`, run at explicit entry points."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.key = str(engine.url)  # identifies the database (password masked) for the in-flight registry
        upgrade(engine)

    def record(self, *, user: str, action: Action, outcome: Outcome, **fields: Unpack[EntryFields]) -> None:
        """Append one entry; passwords in ``reason`` and ``details`` are masked before they are written."""
        with self.engine.begin() as conn:
            write_entry(conn, at=utcnow(), user=user, action=action, outcome=outcome, **fields)

    def _rows(self, q: Select[Any]) -> Sequence[RowMapping]:
        """The rows of the query ``q``, as mappings, on a connection of their own."""
        with self.engine.connect() as conn:
            return conn.execute(q).mappings().all()

    def _newest(self, t: Table, table: str | None, limit: int, *where: Any) -> Sequence[RowMapping]:
        """The newest rows of ``t`` first (at most ``limit``), of one table or all, matching every ``where``."""
        q = select(t).order_by(desc(t.c.id)).limit(limit)
        if table is not None:
            q = q.where(t.c.table_name == table)
        for clause in where:
            q = q.where(clause)
        return self._rows(q)

    def history(
        self,
        table: str | None = None,
        *,
        branch: str | None = None,
        action: Action | str | None = None,
        limit: int = 500,
    ) -> list[JournalEntry]:
        """Journal entries, newest first (at most ``limit``), optionally of one table, branch or action."""
        where = []
        if branch is not None:
            where.append(journal_table.c.branch == branch)
        if action is not None:
            where.append(journal_table.c.action == Action(action).value)
        return [_entry(r) for r in self._newest(journal_table, table, limit, *where)]

    def save_audit(
        self,
        *,
        user: str,
        table: str,
        branch: str,
        snapshot_id: int | None,
        fork_snapshot_id: int | None,
        status: CheckStatus,
        result: JsonObject,
        at: datetime,
    ) -> None:
        """Store an audit result."""
        with self.engine.begin() as conn:
            conn.execute(
                insert(audits_table).values(
                    at=at,
                    user_name=user,
                    table_name=table,
                    branch=branch,
                    snapshot_id=snapshot_id,
                    fork_snapshot_id=fork_snapshot_id,
                    status=CheckStatus(status).value,
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
        rows = self._rows(q)
        return {(r["table_name"], r["branch"]): _stored(r) for r in rows}

    def latest_audit(self, table: str, branch: str) -> StoredAudit | None:
        """The latest stored audit of ``table``'s ``branch``, or None."""
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
            select(
                journal_table.c.table_name, journal_table.c.branch, func.min(journal_table.c.at).label("at")
            )
            .where(
                and_(
                    journal_table.c.action == Action.INGEST.value,
                    journal_table.c.outcome == Outcome.WRITTEN.value,
                )
            )
            .group_by(journal_table.c.table_name, journal_table.c.branch)
        )
        if table is not None:
            q = q.where(journal_table.c.table_name == table)
        with self.engine.connect() as conn:
            rows = conn.execute(q).all()
        return {(r[0], r[1]): aware(r[2]) for r in rows if r[2] is not None}

    def last_main_moves(self, table: str | None = None) -> dict[str, datetime]:
        """When main last moved per table: the newest publish, forced publish or rollback that landed."""
        q = (
            select(journal_table.c.table_name, func.max(journal_table.c.at).label("at"))
            .where(journal_table.c.outcome.in_(sorted(o.value for o in MAIN_MOVES)))
            .group_by(journal_table.c.table_name)
        )
        if table is not None:
            q = q.where(journal_table.c.table_name == table)
        with self.engine.connect() as conn:
            rows = conn.execute(q).all()
        return {r[0]: aware(r[1]) for r in rows if r[0] is not None and r[1] is not None}

    def audit_record(self, table: str | None = None, limit: int = 200) -> list[StoredAudit]:
        """Recent audits (newest first), for pass/fail records and charts."""
        return [_stored(r) for r in self._newest(audits_table, table, limit)]

    # ----- intents ------------------------------------------------------------
    def begin_intent(
        self,
        *,
        user: str,
        action: Action,
        table: str,
        branch: str,
        expected_before: int | None = None,
        expected_after: int | None = None,
        reason: str | None = None,
        details: JsonObject | None = None,
    ) -> Intent:
        """Commit the intent row of a ref move (before its Iceberg commit) and mark it in flight here.

        Raises BranchBusyError when another action on the same branch is still pending (:meth:`begin_intents`
        of one draft).
        """
        draft = IntentDraft(user, action, table, branch, expected_before, expected_after, reason, details)
        return self.begin_intents([draft])[0]

    def begin_intents(self, drafts: Sequence[IntentDraft]) -> list[Intent]:
        """Commit the intent rows of several ref moves (a batch's tables) in ONE transaction: all or none.

        One busy branch (another action pending on it) refuses every one of them: BranchBusyError naming it,
        and no row is written.
        """
        now = utcnow()
        owner = process_owner()
        rows: list[tuple[IntentDraft, Record]] = []
        for d in drafts:
            action = Action(d.action)
            if not action.moves_ref:
                raise ValueError(f"not a ref-moving action: {action.value!r}")
            rows.append(
                (
                    d,
                    {
                        "at": now,
                        "user_name": d.user,
                        "action": action.value,
                        "table_name": d.table,
                        "branch": d.branch,
                        "expected_before": d.expected_before,
                        "expected_after": d.expected_after,
                        "reason": mask_secrets(d.reason) if d.reason else d.reason,
                        "details": json.dumps(mask_values(d.details or {}), default=str),
                        "status": IntentStatus.PENDING.value,
                        "owner": owner,
                        "heartbeat_at": now,
                        "lock_key": _lock_key(d.table, d.branch),
                    },
                )
            )
        ids: list[int] = []
        try:
            with self.engine.begin() as conn:
                for _, values in rows:
                    pk = conn.execute(insert(intents_table).values(**values)).inserted_primary_key
                    assert pk is not None
                    ids.append(int(pk[0]))
        except IntegrityError as exc:  # rolled back: none of them was announced
            busy = next(
                (d for d, _ in rows if self.pending_intent_on(d.table, d.branch) is not None), rows[0][0]
            )
            raise self._busy(busy.table, busy.branch) from exc
        out = []
        for intent_id, (d, _) in zip(ids, rows, strict=True):
            _in_flight.add(self, intent_id)
            out.append(
                Intent(
                    id=intent_id,
                    at=now,
                    user=d.user,
                    action=Action(d.action),
                    table=d.table,
                    branch=d.branch,
                    expected_before=d.expected_before,
                    expected_after=d.expected_after,
                    reason=d.reason,
                    details=dict(d.details or {}),
                    owner=owner,
                    heartbeat_at=now,
                )
            )
        return out

    def resolve_intents(
        self,
        resolutions: Sequence[tuple[Intent, int | None]],
        *,
        outcome: Outcome,
        done: bool,
        reason: str | None = None,
        details: JsonObject | None = None,
        also: Callable[[Connection], object] | None = None,
    ) -> list[JournalEntry]:
        """Resolve several pending intents (a batch's tables: each with its ``snapshot_after``) with one outcome,
        in ONE transaction, with ``also(conn)`` (e.g. closing the batch's memberships) in it; the outcome rows
        written (an intent another resolver was first to is skipped)."""
        now = utcnow()
        outcome = Outcome(outcome)
        status = IntentStatus.DONE if done else IntentStatus.ABANDONED
        out: list[JournalEntry] = []
        with self.engine.begin() as conn:
            for intent, snapshot_after in resolutions:
                entry = _resolve(conn, intent, status, now, now, outcome, snapshot_after, reason, details)
                if entry is not None:
                    out.append(entry)
            if also is not None:
                also(conn)
        return out

    def _busy(self, table: str, branch: str) -> BranchBusyError:
        """The refusal of a ref move on a branch whose lock another pending intent holds, naming that one."""
        holder = self.pending_intent_on(table, branch)
        who = (
            f"a {holder.action} by {holder.user} since {holder.at.isoformat(timespec='seconds')}"
            if holder
            else "another action"
        )
        return BranchBusyError(
            f"branch {branch} of {table} is busy: {who} is in flight; try again when it ends"
        )

    def resolve_intent(
        self,
        intent: Intent,
        *,
        outcome: Outcome,
        done: bool,
        snapshot_after: int | None = None,
        reason: str | None = None,
        details: JsonObject | None = None,
        reconciled: bool = False,
        at: datetime | None = None,
    ) -> JournalEntry | None:
        """Turn a pending intent into ``done``/``abandoned`` and write its one outcome row, atomically.

        Returns the outcome entry, or None when the intent was already resolved (by its owner
        or by another reconciler): then nothing is written. ``reason`` defaults to the intent's.
        """
        now = utcnow()
        outcome = Outcome(outcome)
        status = IntentStatus.DONE if done else IntentStatus.ABANDONED
        with self.engine.begin() as conn:
            return _resolve(
                conn, intent, status, now, at or now, outcome, snapshot_after, reason, details, reconciled
            )

    def release(self, intent: Intent) -> None:
        """The acting process is done with ``intent`` (resolved or not): no longer in flight here."""
        _in_flight.release(self, intent.id)

    def in_flight_here(self, intent: Intent) -> bool:
        """True when ``intent`` belongs to this process and its action has not ended (been released) yet."""
        return intent.owner == process_owner() and not _in_flight.released(self, intent.id)

    def pending_intents(self, table: str | None = None) -> list[Intent]:
        """Pending intents (oldest first), of one table or all."""
        q = (
            select(intents_table)
            .where(intents_table.c.status == IntentStatus.PENDING.value)
            .order_by(intents_table.c.id)
        )
        if table is not None:
            q = q.where(intents_table.c.table_name == table)
        rows = self._rows(q)
        return [_intent(r) for r in rows]

    def pending_intent_on(self, table: str, branch: str) -> Intent | None:
        """The intent pending on ``table``'s ``branch`` (it holds the branch's lock), or None."""
        q = select(intents_table).where(intents_table.c.lock_key == _lock_key(table, branch))
        with self.engine.connect() as conn:
            row = conn.execute(q).mappings().first()
        return _intent(row) if row is not None else None

    def intent(self, intent_id: int) -> Intent | None:
        """The intent with this id, or None."""
        with self.engine.connect() as conn:
            row = (
                conn.execute(select(intents_table).where(intents_table.c.id == intent_id)).mappings().first()
            )
        return _intent(row) if row is not None else None

    def done_before(self, intent: Intent) -> Intent | None:
        """The newest ref move on ``intent``'s branch that landed (``done``) before ``intent`` was announced.

        The branch lock admits one pending intent per branch, so this is the move ``intent`` followed.
        """
        q = (
            select(intents_table)
            .where(
                and_(
                    intents_table.c.table_name == intent.table,
                    intents_table.c.branch == intent.branch,
                    intents_table.c.id < intent.id,
                    intents_table.c.status == IntentStatus.DONE.value,
                )
            )
            .order_by(desc(intents_table.c.id))
            .limit(1)
        )
        with self.engine.connect() as conn:
            row = conn.execute(q).mappings().first()
        return _intent(row) if row is not None else None

    def intents(self, table: str | None = None, limit: int = 500) -> list[Intent]:
        """Recent intents, newest first (any status)."""
        return [_intent(r) for r in self._newest(intents_table, table, limit)]

    def incomplete_branches(self, table: str | None = None) -> set[tuple[str, str]]:
        """(table, branch) whose latest ingest did not finish writing its batch (pending or abandoned)."""
        newest = (
            select(func.max(intents_table.c.id))
            .where(intents_table.c.action == Action.INGEST.value)
            .group_by(intents_table.c.table_name, intents_table.c.branch)
        )
        if table is not None:
            newest = newest.where(intents_table.c.table_name == table)
        q = select(intents_table.c.table_name, intents_table.c.branch).where(
            and_(
                intents_table.c.id.in_(newest.scalar_subquery()),
                intents_table.c.status != IntentStatus.DONE.value,
            )
        )
        with self.engine.connect() as conn:
            return {(r[0], r[1]) for r in conn.execute(q).all()}

    def touch_intents(self, ids: list[int]) -> None:
        """Refresh the heartbeat of this process's in-flight intents."""
        if not ids:
            return
        with self.engine.begin() as conn:
            conn.execute(
                update(intents_table)
                .where(
                    and_(intents_table.c.id.in_(ids), intents_table.c.status == IntentStatus.PENDING.value)
                )
                .values(heartbeat_at=utcnow())
            )


def _close_intent(conn: Connection, intent_id: int, status: IntentStatus, at: datetime) -> bool:
    """``pending -> status`` (its branch lock released) unless another resolver was first: whether it was ours."""
    res = conn.execute(
        update(intents_table)
        .where(and_(intents_table.c.id == intent_id, intents_table.c.status == IntentStatus.PENDING.value))
        .values(status=status.value, resolved_at=at, lock_key=None)
    )
    return bool(res.rowcount == 1)


def _resolve(
    conn: Connection,
    intent: Intent,
    status: IntentStatus,
    now: datetime,
    at: datetime,
    outcome: Outcome,
    snapshot_after: int | None,
    reason: str | None,
    details: JsonObject | None,
    reconciled: bool = False,
) -> JournalEntry | None:
    """Close ``intent`` (``pending -> status`` at ``now``) and write its one outcome row (at ``at``), in the
    caller's transaction; None when another resolver was first (nothing written). ``reason`` defaults to the
    intent's, ``details`` are merged over its."""
    if not _close_intent(conn, intent.id, status, now):
        return None
    row: Record = {
        "at": at,
        "user": intent.user,
        "action": intent.action,
        "outcome": outcome,
        "table": intent.table,
        "branch": intent.branch,
        "snapshot_before": intent.expected_before,
        "snapshot_after": snapshot_after,
        "reason": intent.reason if reason is None else (mask_secrets(reason) if reason else reason),
        "details": {**intent.details, **(details or {})},
        "intent_id": intent.id,
        "reconciled": reconciled,
    }
    return JournalEntry(id=write_entry(conn, **row), **row)


class EntryFields(TypedDict, total=False):
    """The optional fields of a journal entry (absent: NULL, details ``{}``)."""

    table: str | None
    branch: str | None
    snapshot_before: int | None
    snapshot_after: int | None
    reason: str | None
    details: JsonObject | None


def write_entry(
    conn: Connection,
    *,
    at: datetime,
    user: str,
    action: Action,
    outcome: Outcome,
    intent_id: int | None = None,
    reconciled: bool = False,
    **fields: Unpack[EntryFields],
) -> int:
    """Insert one journal row in the caller's transaction (secrets in ``reason`` and ``details`` masked); its id."""
    reason = fields.get("reason")
    pk = conn.execute(
        insert(journal_table).values(
            at=at,
            user_name=user,
            action=Action(action).value,
            table_name=fields.get("table"),
            branch=fields.get("branch"),
            snapshot_before=fields.get("snapshot_before"),
            snapshot_after=fields.get("snapshot_after"),
            outcome=Outcome(outcome).value,
            reason=mask_secrets(reason) if reason else reason,
            details=json.dumps(mask_values(fields.get("details") or {}), default=str),
            intent_id=intent_id,
            reconciled=reconciled,
        )
    ).inserted_primary_key
    assert pk is not None
    return int(pk[0])


def _lock_key(table: str, branch: str) -> str:
    return f"{table}/{branch}"


def _entry(r: Any) -> JournalEntry:
    return from_row(
        JournalEntry,
        r,
        action=Action(r["action"]),
        outcome=Outcome(r["outcome"]),
        details=json.loads(r["details"] or "{}"),
        reconciled=bool(r["reconciled"]),
    )


def _intent(r: Any) -> Intent:
    return from_row(
        Intent,
        r,
        action=Action(r["action"]),
        details=json.loads(r["details"] or "{}"),
        status=IntentStatus(r["status"]),
    )


# --------------------------------------------------------------------------- the acting process


def _process_stat(pid: int) -> tuple[str, str] | None:
    """(state, start time in clock ticks) of a process from /proc; None where /proc is unavailable."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (fields[0], fields[19]) if len(fields) > 19 else None


_owner: tuple[int, str] | None = None


def _machine() -> str:
    """Where pids are meaningful: the host name plus the pid namespace (containers sharing a host name differ)."""
    try:
        ns = os.readlink("/proc/self/ns/pid").strip("pid:[]")
    except OSError:
        ns = ""
    return f"{socket.gethostname()}/{ns}" if ns else socket.gethostname()


def process_owner() -> str:
    """``machine|pid|start|token`` of this process (recomputed after a fork)."""
    global _owner
    pid = os.getpid()
    if _owner is None or _owner[0] != pid:
        stat = _process_stat(pid)
        _owner = (pid, f"{_machine()}|{pid}|{stat[1] if stat else 0}|{uuid.uuid4().hex[:8]}")
    return _owner[1]


def owner_alive(owner: str) -> bool | None:
    """Whether the process that wrote an intent still runs: True/False on this machine, None elsewhere."""
    parts = owner.split("|")
    if len(parts) != 4 or not parts[1].isdigit():
        return None
    machine, pid_text, start, _token = parts
    if machine != _machine():
        return None
    if owner == process_owner():
        return True
    pid = int(pid_text)
    if pid == os.getpid():
        return False  # our pid, another token: a previous process (a restarted container reuses pids)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, owned by another user
    stat = _process_stat(pid)
    if stat is None:
        return True
    state, started = stat
    return state not in ("Z", "X") and (start in ("0", started))


def heartbeat_stale(intent: Intent, now: datetime | None = None) -> bool:
    """True when the intent's last heartbeat (or start) is older than ``STALE_AFTER_SECONDS``."""
    beat = intent.heartbeat_at or intent.at
    return (now or utcnow()) - beat > timedelta(seconds=STALE_AFTER_SECONDS)


class _InFlight:
    """This process's intents: which are still running (heartbeat kept fresh by a daemon thread) or released.

    An intent of this process counts as in flight until its action releases it, including the
    instant between its row's commit and :meth:`add`, so a reconciler in another thread of this
    process never judges it early.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._beating: dict[tuple[str, int], Journal] = {}
        self._released: set[tuple[str, int]] = set()
        self._thread: threading.Thread | None = None

    def add(self, journal: Journal, intent_id: int) -> None:
        with self._lock:
            self._beating[(journal.key, intent_id)] = journal
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._beat, name="wap-intent-heartbeat", daemon=True)
                self._thread.start()

    def release(self, journal: Journal, intent_id: int) -> None:
        with self._lock:
            self._beating.pop((journal.key, intent_id), None)
            self._released.add((journal.key, intent_id))

    def released(self, journal: Journal, intent_id: int) -> bool:
        with self._lock:
            return (journal.key, intent_id) in self._released

    def beat_once(self) -> None:
        """Refresh heartbeat_at of every running intent of this process (one UPDATE per database)."""
        with self._lock:
            groups: dict[str, tuple[Journal, list[int]]] = {}
            for (key, intent_id), journal in self._beating.items():
                groups.setdefault(key, (journal, []))[1].append(intent_id)
        for journal, ids in groups.values():
            try:
                journal.touch_intents(ids)
            except SQLAlchemyError as exc:  # the next beat retries; a dead DB shows up in the action itself
                log.warning("could not refresh the heartbeat of intents %s: %s", ids, exc)

    def _beat(self) -> None:
        while True:
            time.sleep(HEARTBEAT_SECONDS)
            self.beat_once()


_in_flight = _InFlight()


def _stored(r: Any) -> StoredAudit:
    return from_row(StoredAudit, r, status=CheckStatus(r["status"]), result=json.loads(r["result"]))
