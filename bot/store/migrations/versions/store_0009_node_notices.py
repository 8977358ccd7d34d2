"""What the node watcher noticed: ``node_notices``, one row per notice claimed.

Every replica runs the watcher; a notice (cluster, node or zone, verdict, when the Lease went
stale) is claimed by inserting its key (``bot.store.node_notices``), so two replicas post it once.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "store_0009"
down_revision = "store_0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "node_notices",
        sa.Column("key", sa.String(400), primary_key=True),
        sa.Column("claimed_at", sa.Float, nullable=False),
        sa.Column("expires_at", sa.Float, nullable=False, index=True),
    )


def downgrade() -> None:
    op.drop_table("node_notices")
