"""The Slack front-end's tables as they were first created: messages, cursors, deliveries.

Tables made before migrations existed are adopted as they are. When the cursor table is new, runs
already in the database count as drawn, so Slack never replays their history.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "slack_0001"
down_revision = None
branch_labels = None
depends_on = None

ACTIVE = ("pending", "running", "awaiting_approval", "waiting")


def upgrade() -> None:
    bind = op.get_bind()
    existing = set(sa.inspect(bind).get_table_names())
    if "slack_messages" not in existing:
        op.create_table(
            "slack_messages",
            sa.Column("run_id", sa.String(16), primary_key=True),
            sa.Column("key", sa.String(200), primary_key=True),
            sa.Column("channel", sa.String(40), nullable=False),
            sa.Column("ts", sa.String(40), nullable=False),
        )
    if "slack_deliveries" not in existing:
        op.create_table(
            "slack_deliveries",
            sa.Column("key", sa.String(200), primary_key=True),
            sa.Column("seen_at", sa.Float, nullable=False),
        )
    if "slack_runs" not in existing:
        cursors = op.create_table(
            "slack_runs",
            sa.Column("run_id", sa.String(16), primary_key=True),
            sa.Column("drawn_version", sa.Integer, nullable=False),
            sa.Column("replied_seq", sa.Integer, nullable=False),
            sa.Column("retry_at", sa.Float, nullable=True),
            sa.Column("failures", sa.Integer, nullable=False),
            sa.Column("owner", sa.String(200), nullable=True),
            sa.Column("owner_until", sa.Float, nullable=True),
            sa.Column("done", sa.Boolean, nullable=False),
        )
        op.create_index("ix_slack_runs_done", "slack_runs", ["done"])
        runs = sa.table("runs", sa.column("id"), sa.column("version"), sa.column("audit_seq"),
                        sa.column("status"), sa.column("channel"))
        bind.execute(sa.insert(cursors).from_select(
            ["run_id", "drawn_version", "replied_seq", "failures", "done"],
            sa.select(runs.c.id, runs.c.version, runs.c.audit_seq, sa.literal(0),
                      runs.c.status.not_in(ACTIVE))
            .where(runs.c.channel.is_not(None))))


def downgrade() -> None:
    op.drop_table("slack_runs")
    op.drop_table("slack_deliveries")
    op.drop_table("slack_messages")
