"""Service tokens for the CLI: ``wap_tokens`` (one row per token; only the SHA-256 of the token is stored).

``wap token create`` (admin) prints a token once; the CLI acts as its user with its role when it is
passed as ``WAP_TOKEN`` (``cli_identity: token`` in the access file refuses the bare environment name).

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_table(
        "wap_tokens",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("token_hash", sa.String(64), nullable=False),
        sa.Column("user_name", sa.String(255), nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("created_by", sa.String(255), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("revoked_by", sa.String(255), nullable=True),
        sa.UniqueConstraint("token_hash", name="ux_wap_tokens_token_hash"),
    )


def downgrade() -> None:
    op.drop_table("wap_tokens")
