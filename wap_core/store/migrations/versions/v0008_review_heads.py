"""Reviews of a batch that spans tables: ``wap_reviews.heads`` (the set of head snapshots a review binds to).

A review of a table whose branch is in a batch binds to every table's head in the batch (JSON
``{"namespace.table": snapshot id}``); a new commit on any of them dismisses it. NULL: a review of a
plain branch (bound to its own head, ``snapshot_id``), as before.

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    with op.batch_alter_table("wap_reviews") as batch_op:
        batch_op.add_column(sa.Column("heads", sa.Text, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("wap_reviews") as batch_op:
        batch_op.drop_column("heads")
