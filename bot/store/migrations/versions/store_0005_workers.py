"""The processes that drive runs: ``workers``, one row per worker with its last heartbeat.

A terminal that approves a step hands the run on to a worker only when one is known to be alive;
``worker`` and ``slack serve`` record a beat as their loop goes round and remove their row when
they stop.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "store_0005"
down_revision = "store_0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if "workers" in sa.inspect(op.get_bind()).get_table_names():
        return
    op.create_table(
        "workers",
        sa.Column("id", sa.String(200), primary_key=True),
        sa.Column("started_at", sa.String(40), nullable=False),
        sa.Column("beat_at", sa.Float, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("workers")
