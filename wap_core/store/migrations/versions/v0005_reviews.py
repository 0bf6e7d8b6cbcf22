"""Review workflow: ``wap_reviews`` (each reviewer's verdict on a branch head) and ``wap_comments`` (the thread).

Both are kept after publish or discard: the history of a decision.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_table(
        "wap_reviews",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("user_name", sa.String(255), nullable=False),
        sa.Column("table_name", sa.String(512), nullable=False),
        sa.Column("branch", sa.String(255), nullable=False),
        sa.Column("snapshot_id", sa.BigInteger, nullable=False),
        sa.Column("verdict", sa.String(32), nullable=False),
        sa.Column("role", sa.String(16), nullable=True),
        sa.Column("comment", sa.Text, nullable=True),
    )
    op.create_index("ix_wap_reviews_table_branch", "wap_reviews", ["table_name", "branch"])
    op.create_table(
        "wap_comments",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("user_name", sa.String(255), nullable=False),
        sa.Column("table_name", sa.String(512), nullable=False),
        sa.Column("branch", sa.String(255), nullable=False),
        sa.Column("snapshot_id", sa.BigInteger, nullable=True),
        sa.Column("check_name", sa.String(512), nullable=True),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("text", sa.Text, nullable=False),
    )
    op.create_index("ix_wap_comments_table_branch", "wap_comments", ["table_name", "branch"])


def downgrade() -> None:
    op.drop_index("ix_wap_comments_table_branch", table_name="wap_comments")
    op.drop_table("wap_comments")
    op.drop_index("ix_wap_reviews_table_branch", table_name="wap_reviews")
    op.drop_table("wap_reviews")
