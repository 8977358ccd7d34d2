"""Alerts received from Alertmanager, kept to deduplicate them across replicas: ``alerts`` (one
row per alert fingerprint, with its group and status) and ``alert_groups`` (the suggestion card
posted for each alert group)."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "store_0003"
down_revision = "store_0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "alerts",
        sa.Column("key", sa.String(200), primary_key=True),
        sa.Column("group_key", sa.String(64), nullable=False),
        sa.Column("status", sa.String(10), nullable=False),
        sa.Column("starts_at", sa.String(40), nullable=False),
        sa.Column("data", sa.Text, nullable=False),
        sa.Column("seen_at", sa.Float, nullable=False),
        sa.Column("expires_at", sa.Float, nullable=False),
    )
    op.create_index("ix_alerts_group_key", "alerts", ["group_key"])
    op.create_index("ix_alerts_expires_at", "alerts", ["expires_at"])
    op.create_table(
        "alert_groups",
        sa.Column("group_key", sa.String(64), primary_key=True),
        sa.Column("label", sa.Text, nullable=False),
        sa.Column("channel", sa.String(40), nullable=True),
        sa.Column("ts", sa.String(40), nullable=True),
        sa.Column("expires_at", sa.Float, nullable=False),
    )
    op.create_index("ix_alert_groups_expires_at", "alert_groups", ["expires_at"])


def downgrade() -> None:
    op.drop_table("alert_groups")
    op.drop_table("alerts")
