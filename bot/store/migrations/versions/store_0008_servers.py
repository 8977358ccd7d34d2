"""The API servers that serve this database: ``servers``, one row per URL.

``api serve`` records itself at start (``bot.store.servers.record_server``); a terminal in local
mode that finds a row refuses to write to the database (a run, a decision) unless
``local_mode_override`` is set, and names the server to use instead.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "store_0008"
down_revision = "store_0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "servers",
        sa.Column("url", sa.String(500), primary_key=True),
        sa.Column("host", sa.String(200), nullable=False),
        sa.Column("started_at", sa.String(40), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("servers")
