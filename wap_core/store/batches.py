"""Batch membership: which tables belong to a batch that spans tables (``wap_batches``, migration 0007).

A **batch** is a named set of tables; each member table has an open branch of the batch's name. A row is
written when a table joins the batch (``wap ingest TABLE SOURCE... --batch NAME``) and closed when the
batch is published or discarded (``closed_at``, ``closed_as``), so the journal keeps which tables went
together. A branch made by ``--branch`` (or a default name) has no row: it is a one-table batch and
behaves as branches always did.

This module is the store only (no authorization, no Iceberg): :mod:`wap_core.workflow.batch` reads the
members together with their branches.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Column, Connection, Engine, Index, String, Table, and_, insert, select, update

from wap_core.store.journal import utcnow
from wap_core.store.schema import at_column, from_row, id_column, metadata, table_name_column, user_column

batches_table = Table(
    "wap_batches",
    metadata,
    id_column(),
    Column("batch", String(255), nullable=False),
    table_name_column(),
    user_column("added_by"),
    at_column("added_at"),
    at_column("closed_at", nullable=True),
    Column("closed_as", String(16), nullable=True),  # published | discarded | left (the branch went)
    Index("ix_wap_batches_batch", "batch"),
)


def _member(r: Any) -> Member:
    return from_row(Member, r)


@dataclass(frozen=True)
class Member:
    """One table's membership of a batch."""

    id: int
    batch: str
    table: str
    added_by: str
    added_at: datetime
    closed_at: datetime | None = None
    closed_as: str | None = None


def _open(batch: str | None = None) -> object:
    cond = batches_table.c.closed_at.is_(None)
    return cond if batch is None else and_(cond, batches_table.c.batch == batch)


def add_member(engine: Engine | Connection, batch: str, table: str, user: str) -> Member:
    """Record ``table`` as an open member of ``batch`` (once: an open row is returned as it is)."""
    if isinstance(engine, Engine):
        with engine.begin() as conn:
            return add_member(conn, batch, table, user)
    conn = engine
    found = conn.execute(
        select(batches_table).where(_open(batch), batches_table.c.table_name == table)  # type: ignore[arg-type]
    ).first()
    if found is not None:
        return _member(found._mapping)
    row = {"batch": batch, "table_name": table, "added_by": user, "added_at": utcnow()}
    new_id = conn.execute(insert(batches_table).values(**row)).inserted_primary_key
    assert new_id is not None
    return from_row(Member, {**row, "id": new_id[0]})


def open_members(engine: Engine, batch: str | None = None) -> list[Member]:
    """The open memberships (of ``batch``, or of every batch), oldest first."""
    with engine.connect() as conn:
        rows = conn.execute(
            select(batches_table).where(_open(batch)).order_by(batches_table.c.id)  # type: ignore[arg-type]
        ).all()
    return [_member(r._mapping) for r in rows]


def members(engine: Engine, batch: str) -> list[Member]:
    """Every membership ``batch`` ever had, open or closed, oldest first (the journal's view)."""
    with engine.connect() as conn:
        rows = conn.execute(
            select(batches_table).where(batches_table.c.batch == batch).order_by(batches_table.c.id)
        ).all()
    return [_member(r._mapping) for r in rows]


def close_members(engine: Engine | Connection, batch: str, tables: Iterable[str], closed_as: str) -> int:
    """Close the open memberships of ``tables`` in ``batch`` (published, discarded, left); how many."""
    names = list(tables)
    if not names:
        return 0
    stmt = (
        update(batches_table)
        .where(_open(batch), batches_table.c.table_name.in_(names))  # type: ignore[arg-type]
        .values(closed_at=utcnow(), closed_as=closed_as)
    )
    if isinstance(engine, Engine):
        with engine.begin() as conn:
            return conn.execute(stmt).rowcount
    return engine.execute(stmt).rowcount
