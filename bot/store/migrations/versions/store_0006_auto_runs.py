"""The per-runbook limit on auto-runs started by alerts: ``alert_auto_runs``, one row per slot.

A runbook may auto-run ``alerts.auto_run_limit`` times in any ``alerts.auto_run_window``; each
start takes one of its slots (``bot.store.auto_runs``), so every replica counts the same starts.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "store_0006"
down_revision = "store_0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "alert_auto_runs",
        sa.Column("runbook", sa.String(63), primary_key=True),
        sa.Column("slot", sa.Integer, primary_key=True),
        sa.Column("used_at", sa.Float, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("alert_auto_runs")
