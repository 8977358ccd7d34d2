"""Requests refused before any run existed: ``refusals``, an append-only hash chain of its own.

A start the policy does not allow, or an API call without valid credentials, has no run whose
chain could hold it (``bot.store.refusals``).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "store_0007"
down_revision = "store_0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "refusals",
        sa.Column("seq", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("ts", sa.String(40), nullable=False),
        sa.Column("actor", sa.String(200), nullable=False),
        sa.Column("what", sa.Text, nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("via", sa.Text, nullable=False),
        sa.Column("kid", sa.String(16), nullable=False),
        sa.Column("prev_hash", sa.String(64), nullable=False),
        sa.Column("hash", sa.String(64), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("refusals")
