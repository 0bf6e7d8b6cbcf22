"""Batches that span tables: ``wap_batches`` (which tables belong to which batch; closed on publish/discard).

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_table(
        "wap_batches",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("batch", sa.String(255), nullable=False),
        sa.Column("table_name", sa.String(512), nullable=False),
        sa.Column("added_by", sa.String(255), nullable=False),
        sa.Column("added_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("closed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("closed_as", sa.String(16), nullable=True),
    )
    op.create_index("ix_wap_batches_batch", "wap_batches", ["batch"])


def downgrade() -> None:
    op.drop_index("ix_wap_batches_batch", table_name="wap_batches")
    op.drop_table("wap_batches")
