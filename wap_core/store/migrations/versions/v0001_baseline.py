"""Baseline: the journal tables as they were before versioned migrations (wap_core 0.1.0).

An existing lakehouse whose tables predate the version table is stamped at this revision
(nothing is created), then upgraded.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_table(
        "wap_journal",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("user_name", sa.String(255), nullable=False),
        sa.Column("action", sa.String(32), nullable=False),
        sa.Column("table_name", sa.String(512), nullable=True),
        sa.Column("branch", sa.String(255), nullable=True),
        sa.Column("snapshot_before", sa.BigInteger, nullable=True),
        sa.Column("snapshot_after", sa.BigInteger, nullable=True),
        sa.Column("outcome", sa.String(32), nullable=False),
        sa.Column("reason", sa.Text, nullable=True),
        sa.Column("details", sa.Text, nullable=True),
    )
    op.create_index("ix_wap_journal_at", "wap_journal", ["at"])
    op.create_index("ix_wap_journal_table_name", "wap_journal", ["table_name"])
    op.create_table(
        "wap_audits",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("user_name", sa.String(255), nullable=False),
        sa.Column("table_name", sa.String(512), nullable=False),
        sa.Column("branch", sa.String(255), nullable=False),
        sa.Column("snapshot_id", sa.BigInteger, nullable=True),
        sa.Column("fork_snapshot_id", sa.BigInteger, nullable=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("result", sa.Text, nullable=False),
    )
    op.create_index("ix_wap_audits_table_name", "wap_audits", ["table_name"])
    op.create_table(
        "wap_profiles",
        sa.Column("table_name", sa.String(512), primary_key=True),
        sa.Column("snapshot_id", sa.BigInteger, primary_key=True),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("profile", sa.Text, nullable=False),
    )
    op.create_table(
        "wap_batch_profiles",
        sa.Column("table_name", sa.String(512), primary_key=True),
        sa.Column("head_snapshot_id", sa.BigInteger, primary_key=True),
        sa.Column("fork_snapshot_id", sa.BigInteger, nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("profile", sa.Text, nullable=False),
    )


def downgrade() -> None:
    for name in ("wap_batch_profiles", "wap_profiles", "wap_audits", "wap_journal"):
        op.drop_table(name)
