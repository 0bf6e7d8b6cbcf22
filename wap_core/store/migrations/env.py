"""Alembic environment of the journal tables (run by :mod:`wap_core.store.migrate`, never from alembic.ini).

The caller passes an open connection inside its own transaction (``config.attributes``), so
every revision of one upgrade commits, or rolls back, together with the version row.
"""

from __future__ import annotations

from alembic import context

config = context.config
connection = config.attributes.get("connection")
if connection is None or context.is_offline_mode():
    raise RuntimeError("wap_core migrations run online through wap_core.store.migrate.upgrade(engine)")

context.configure(
    connection=connection,
    target_metadata=None,
    version_table=config.attributes["version_table"],
    render_as_batch=connection.dialect.name == "sqlite",
)
with context.begin_transaction():
    context.run_migrations()
