"""The store's tables as they were first created: runs, steps, events.

A database made before migrations existed already holds exactly these tables (created by
``create_all`` from the same definitions): they are adopted as they are, data and all, and only
what is missing is created.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "store_0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    existing = set(sa.inspect(op.get_bind()).get_table_names())
    if "runs" not in existing:
        op.create_table(
            "runs",
            sa.Column("id", sa.String(16), primary_key=True),
            sa.Column("runbook", sa.String(63), nullable=False),
            sa.Column("status", sa.String(20), nullable=False),
            sa.Column("requester", sa.String(200), nullable=False),
            sa.Column("channel", sa.String(100), nullable=True),
            sa.Column("dry_run", sa.Boolean, nullable=False),
            sa.Column("created_at", sa.String(40), nullable=False),
            sa.Column("header", sa.Text, nullable=False),
            sa.Column("runbook_text", sa.Text, nullable=False),
            sa.Column("version", sa.Integer, nullable=False),
            sa.Column("next_check_at", sa.Float, nullable=True),
            sa.Column("lease_owner", sa.String(200), nullable=True),
            sa.Column("lease_until", sa.Float, nullable=True),
            sa.Column("audit_seq", sa.Integer, nullable=False),
            sa.Column("audit_hash", sa.String(64), nullable=True),
        )
        op.create_index("ix_runs_status", "runs", ["status"])
        op.create_index("ix_runs_channel", "runs", ["channel"])
        op.create_index("ix_runs_next_check_at", "runs", ["next_check_at"])
    if "steps" not in existing:
        op.create_table(
            "steps",
            sa.Column("run_id", sa.String(16), primary_key=True),
            sa.Column("key", sa.String(100), primary_key=True),
            sa.Column("position", sa.Integer, nullable=False),
            sa.Column("state", sa.Text, nullable=False),
        )
    if "events" not in existing:
        op.create_table(
            "events",
            sa.Column("run_id", sa.String(16), primary_key=True),
            sa.Column("seq", sa.Integer, primary_key=True),
            sa.Column("ts", sa.String(40), nullable=False),
            sa.Column("actor", sa.String(200), nullable=False),
            sa.Column("type", sa.String(60), nullable=False),
            sa.Column("payload", sa.Text, nullable=False),
            sa.Column("prev_hash", sa.String(64), nullable=False),
            sa.Column("hash", sa.String(64), nullable=False),
        )


def downgrade() -> None:
    op.drop_table("events")
    op.drop_table("steps")
    op.drop_table("runs")
