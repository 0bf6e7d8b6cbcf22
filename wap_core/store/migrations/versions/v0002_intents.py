"""Intent/outcome journaling: ``wap_intents`` and the link from each outcome row to its intent.

* ``wap_intents``: one row per ref-moving action, committed BEFORE the Iceberg commit
  (pending -> done | abandoned). ``lock_key`` (``table/branch``) is set only while pending and
  is unique: at most one action per branch is in flight.
* ``wap_journal.intent_id`` (unique): the outcome row of an intent, exactly one;
  ``wap_journal.reconciled``: the outcome was recorded by reconciliation after a crash.
  Existing rows keep intent_id NULL and reconciled false.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_table(
        "wap_intents",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("user_name", sa.String(255), nullable=False),
        sa.Column("action", sa.String(32), nullable=False),
        sa.Column("table_name", sa.String(512), nullable=False),
        sa.Column("branch", sa.String(255), nullable=False),
        sa.Column("expected_before", sa.BigInteger, nullable=True),
        sa.Column("expected_after", sa.BigInteger, nullable=True),
        sa.Column("reason", sa.Text, nullable=True),
        sa.Column("details", sa.Text, nullable=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("owner", sa.String(255), nullable=False),
        sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("resolved_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("lock_key", sa.String(400), nullable=True),
        sa.UniqueConstraint("lock_key", name="uq_wap_intents_lock_key"),
    )
    op.create_index("ix_wap_intents_status", "wap_intents", ["status"])
    op.create_index("ix_wap_intents_table_name", "wap_intents", ["table_name"])
    with op.batch_alter_table("wap_journal") as batch:
        batch.add_column(sa.Column("intent_id", sa.Integer, nullable=True))
        batch.add_column(sa.Column("reconciled", sa.Boolean, nullable=False, server_default=sa.false()))
    op.create_index("ux_wap_journal_intent_id", "wap_journal", ["intent_id"], unique=True)


def downgrade() -> None:
    op.drop_index("ux_wap_journal_intent_id", table_name="wap_journal")
    with op.batch_alter_table("wap_journal") as batch:
        batch.drop_column("reconciled")
        batch.drop_column("intent_id")
    op.drop_index("ix_wap_intents_table_name", table_name="wap_intents")
    op.drop_index("ix_wap_intents_status", table_name="wap_intents")
    op.drop_table("wap_intents")
