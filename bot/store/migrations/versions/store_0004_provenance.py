"""A run's parent and incident as indexed columns: ``runs.parent_id`` and ``runs.incident``.

The whole provenance of a run (parent, incident, what suggested it, owner) is in its header and
audited in its chain; these two columns are there to be queried: a run's children (``status``
of a parent lists them) and the runs of one incident. Nullable: runs from before have neither.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "store_0004"
down_revision = "store_0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("runs", sa.Column("parent_id", sa.String(16), nullable=True))
    op.add_column("runs", sa.Column("incident", sa.String(200), nullable=True))
    op.create_index("ix_runs_parent_id", "runs", ["parent_id"])
    op.create_index("ix_runs_incident", "runs", ["incident"])


def downgrade() -> None:
    op.drop_index("ix_runs_incident", table_name="runs")
    op.drop_index("ix_runs_parent_id", table_name="runs")
    op.drop_column("runs", "incident")
    op.drop_column("runs", "parent_id")
