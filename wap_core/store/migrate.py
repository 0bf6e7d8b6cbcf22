"""Versioned schema migrations of the journal tables (Alembic), in the catalog's own database.

The scripts live in ``wap_core/store/migrations`` (``env.py`` + ``versions/``) and Alembic is
configured here in code: no ``alembic.ini`` is needed at run time. The version is kept in
its own table, ``wap_alembic_version``, so it never collides with another Alembic user of the
same database.

:func:`upgrade` (called by ``Journal()``) is a single cheap read when the database is current.
Otherwise it takes a database-wide lock first (SQLite: ``BEGIN IMMEDIATE``; PostgreSQL:
``pg_advisory_xact_lock``), re-reads the version under the lock, and runs every pending
revision in that one transaction, so two processes starting at once never both migrate and a
failed upgrade leaves the previous schema intact. A lakehouse created before versioning (the
tables exist, no version row) is stamped at the baseline revision ``0001`` (which is exactly
that schema) and then upgraded: no row is touched.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Connection, Engine, create_engine, event, inspect, text

from wap_core.exceptions import EnvironmentSetupError

if TYPE_CHECKING:
    from alembic.config import Config

log = logging.getLogger(__name__)

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"
VERSION_TABLE = "wap_alembic_version"
BASELINE = "0001"  # the schema of every lakehouse created before migrations existed
HEAD = "0008"  # keep equal to the newest file in migrations/versions (a test checks it)
_PG_LOCK_KEY = 0x7761705F6A726E6C  # "wap_jrnl": the advisory lock serializing upgraders
_SQLITE_TIMEOUT_S = 60.0


def current_revision(conn: Connection) -> str | None:
    """The revision recorded in ``wap_alembic_version``; None when the table is absent or empty."""
    if not inspect(conn).has_table(VERSION_TABLE):
        return None
    row = conn.execute(text(f"SELECT version_num FROM {VERSION_TABLE}")).first()
    return str(row[0]) if row is not None else None


def _alembic_config(conn: Connection | None = None) -> Config:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    if conn is not None:
        cfg.attributes["connection"] = conn
    cfg.attributes["version_table"] = VERSION_TABLE
    return cfg


def _locking_engine(engine: Engine) -> Engine:
    """A short-lived engine on the same database whose transactions take the write lock up front."""
    if engine.dialect.name != "sqlite":
        return create_engine(engine.url)
    locking = create_engine(engine.url, connect_args={"timeout": _SQLITE_TIMEOUT_S})

    @event.listens_for(locking, "connect")
    def _no_implicit_transactions(dbapi_conn, _record):  # type: ignore[no-untyped-def]
        dbapi_conn.isolation_level = None  # pysqlite: we emit BEGIN ourselves (DDL stays transactional)

    @event.listens_for(locking, "begin")
    def _begin_immediate(conn):  # type: ignore[no-untyped-def]
        conn.exec_driver_sql("BEGIN IMMEDIATE")  # the write lock before reading the version

    return locking


def upgrade(engine: Engine) -> str | None:
    """Bring the journal tables to :data:`HEAD`; returns the revision found before (None: new or unversioned)."""
    with engine.connect() as conn:
        found = current_revision(conn)
    if found == HEAD:
        return found
    from alembic import command
    from alembic.util import CommandError

    locking = _locking_engine(engine)
    try:
        with locking.begin() as conn:
            if conn.dialect.name == "postgresql":
                conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _PG_LOCK_KEY})
            found = current_revision(conn)  # again, under the lock: another process may have done it
            if found == HEAD:
                return found
            cfg = _alembic_config(conn)
            if found is None and inspect(conn).has_table("wap_journal"):
                log.info("journal tables predate versioning: stamping revision %s", BASELINE)
                command.stamp(cfg, BASELINE)
            log.info("upgrading journal tables from %s to %s", found, HEAD)
            try:
                command.upgrade(cfg, "head")
            except CommandError as exc:  # e.g. a revision written by a newer wap_core
                raise EnvironmentSetupError(
                    f"cannot migrate the journal tables from revision {found} to {HEAD}: {exc}"
                ) from exc
    finally:
        locking.dispose()
    return found


def script_head() -> str | None:
    """The newest revision among the shipped scripts (tests compare it with :data:`HEAD`)."""
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(_alembic_config()).get_current_head()
