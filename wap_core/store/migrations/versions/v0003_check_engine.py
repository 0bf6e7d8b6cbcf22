"""The check engine's tables: per-check measurements and per-batch metrics.

* ``wap_check_results``: a check's measurement of one batch head, keyed by its fingerprint
  (type, measured arguments and the snapshots it reads, never its thresholds): a re-audit
  measures only what changed.
* ``wap_batch_metrics``: the metrics of each audited batch, keyed by its head snapshot: the
  history the ``anomaly`` check compares a new batch with.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_table(
        "wap_check_results",
        sa.Column("table_name", sa.String(512), primary_key=True),
        sa.Column("head_snapshot_id", sa.BigInteger, primary_key=True),
        sa.Column("fingerprint", sa.String(64), primary_key=True),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("measurement", sa.Text, nullable=False),
    )
    op.create_table(
        "wap_batch_metrics",
        sa.Column("table_name", sa.String(512), primary_key=True),
        sa.Column("head_snapshot_id", sa.BigInteger, primary_key=True),
        sa.Column("fork_snapshot_id", sa.BigInteger, nullable=True),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("metrics", sa.Text, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("wap_batch_metrics")
    op.drop_table("wap_check_results")
