"""The console's own tables in the catalog's database: one ``MetaData`` and the column sets they share.

Each table is defined next to the module that owns it, on :data:`metadata` and from the helpers
below: the journal, the intents and the stored audits in :mod:`wap_core.store.journal`, the profile
caches in :mod:`wap_core.store.profiles`, the check measurements and batch metrics in
:mod:`wap_core.checks.store`, the outbox in :mod:`wap_core.notify.deliverer`, reviews and comments in
:mod:`wap_core.workflow.review`, service tokens in :mod:`wap_core.security.tokens`. The schema itself
is made only by the Alembic revisions in ``migrations/versions`` (a test compares it with these models).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy import BigInteger, Column, DateTime, Integer, MetaData, String, Table, Text

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

metadata = MetaData()


def aware(dt: datetime) -> datetime:
    """``dt`` with UTC attached where the database returned it naive (SQLite)."""
    return dt if dt.tzinfo is not None else dt.replace(tzinfo=UTC)


_D = TypeVar("_D", bound="DataclassInstance")

#: the columns whose field on a dataclass has another name
COLUMN_OF = {"user": "user_name", "table": "table_name", "check": "check_name"}


def from_row(cls: type[_D], row: Mapping[str, object], **converted: object) -> _D:
    """The frozen dataclass ``cls`` from a result ``row``: each field its column's value (``user``,
    ``table`` and ``check`` from ``user_name``, ``table_name`` and ``check_name``; times with UTC
    attached), but the ``converted`` fields (enums, parsed JSON) as given. A field with a default may
    have no column."""
    plain = {}
    for f in fields(cls):
        column = COLUMN_OF.get(f.name, f.name)
        if f.name in converted or column not in row:
            continue
        value = row[column]
        plain[f.name] = aware(value) if isinstance(value, datetime) else value
    return cls(**plain, **converted)


def id_column() -> Column[Any]:
    """The autoincrementing primary key of an event table."""
    return Column("id", Integer, primary_key=True, autoincrement=True)


def at_column(name: str = "at", *, nullable: bool = False, index: bool = False) -> Column[Any]:
    """A timestamp with its time zone."""
    return Column(name, DateTime(timezone=True), nullable=nullable, index=index)


def user_column(name: str = "user_name", *, nullable: bool = False) -> Column[Any]:
    """A user name."""
    return Column(name, String(255), nullable=nullable)


def table_name_column(
    *, nullable: bool = False, index: bool = False, primary_key: bool = False
) -> Column[Any]:
    """The Iceberg table a row is about (``namespace.table``)."""
    if primary_key:
        return Column("table_name", String(512), primary_key=True)
    return Column("table_name", String(512), nullable=nullable, index=index)


def branch_column(*, nullable: bool = False) -> Column[Any]:
    """The branch a row is about."""
    return Column("branch", String(255), nullable=nullable)


def snapshot_column(name: str, *, nullable: bool = True, primary_key: bool = False) -> Column[Any]:
    """An Iceberg snapshot id (64-bit)."""
    if primary_key:
        return Column(name, BigInteger, primary_key=True)
    return Column(name, BigInteger, nullable=nullable)


def event_columns(
    *, nullable: bool = False, index: bool = False, index_at: bool = False, action: bool = False
) -> list[Column[Any]]:
    """What every event row starts with: id, when, who (and the action), which table and branch.

    ``nullable``: the table and branch may be empty; ``index``/``index_at``: ``table_name``/``at``
    have their own index; ``action``: an ``action`` column after the user.
    """
    return [
        id_column(),
        at_column(index=index_at),
        user_column(),
        *([Column("action", String(32), nullable=False)] if action else []),
        table_name_column(nullable=nullable, index=index),
        branch_column(nullable=nullable),
    ]


def cache_table(
    name: str, key: list[Column[Any]], payload: str, *, before_at: tuple[Column[Any], ...] = ()
) -> Table:
    """A cache keyed by table name and ``key`` (primary key columns): ``at`` it was written and a JSON ``payload``."""
    return Table(
        name,
        metadata,
        table_name_column(primary_key=True),
        *key,
        *before_at,
        at_column(),
        Column(payload, Text, nullable=False),
    )
