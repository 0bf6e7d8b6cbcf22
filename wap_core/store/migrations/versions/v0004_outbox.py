"""Notification outbox: ``wap_outbox``, the notifications waiting for delivery (wap_core.notify).

``emit`` inserts one row per matching webhook (status ``pending``); a deliverer claims a row
with a conditional UPDATE (``pending`` and due, or ``delivering`` with an expired lease), so two
processes never deliver the same row twice, and ends it ``delivered`` or ``failed`` (journaled),
or back to ``pending`` with its next attempt time. The webhook URL is not stored (it may be a
secret): ``target`` is a hash identifying it in the notify file, ``target_label`` its masked form.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_table(
        "wap_outbox",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("event", sa.String(32), nullable=False),
        sa.Column("table_name", sa.String(512), nullable=True),
        sa.Column("branch", sa.String(255), nullable=True),
        sa.Column("user_name", sa.String(255), nullable=False),
        sa.Column("target", sa.String(64), nullable=False),
        sa.Column("target_label", sa.String(512), nullable=False),
        sa.Column("format", sa.String(16), nullable=False),
        sa.Column("body", sa.Text, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
        sa.Column("next_attempt_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("origin", sa.String(255), nullable=False),
        sa.Column("claimed_by", sa.String(255), nullable=True),
        sa.Column("claimed_until", sa.DateTime(timezone=True), nullable=True),
        sa.Column("delivered_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_status", sa.Integer, nullable=True),
        sa.Column("last_error", sa.Text, nullable=True),
    )
    op.create_index("ix_wap_outbox_due", "wap_outbox", ["status", "next_attempt_at"])


def downgrade() -> None:
    op.drop_index("ix_wap_outbox_due", table_name="wap_outbox")
    op.drop_table("wap_outbox")
