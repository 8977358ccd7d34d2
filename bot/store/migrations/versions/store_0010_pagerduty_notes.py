"""Notes owed to PagerDuty incidents: ``pagerduty_notes``, one row per linked run that finished.

A run linked to a PagerDuty incident leaves a note on it with its outcome when it finishes
(``bot.store.pagerduty_notes``); the row keeps the note until PagerDuty took it, so a failure is
tried again and a restart loses nothing.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "store_0010"
down_revision = "store_0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "pagerduty_notes",
        sa.Column("run_id", sa.String(16), primary_key=True),
        sa.Column("incident_id", sa.String(64), nullable=False),
        sa.Column("content", sa.Text, nullable=False),
        sa.Column("state", sa.String(10), nullable=False, index=True),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("due_at", sa.Float, nullable=False, index=True),
        sa.Column("claim_until", sa.Float, nullable=True),
        sa.Column("error", sa.Text, nullable=True),
        sa.Column("note_id", sa.String(64), nullable=True),
    )


def downgrade() -> None:
    op.drop_table("pagerduty_notes")
