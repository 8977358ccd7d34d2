"""The signed head of a run's audit chain: ``runs.audit_mac``.

An HMAC over the run id and the chain's last seq and hash, under the audit key, so someone who can
write the database cannot cut the chain short and move the head onto the new last event. Nullable:
runs written before it (or without a key) have none, and verify says "head not signed".
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "store_0002"
down_revision = "store_0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    have = {c["name"] for c in sa.inspect(op.get_bind()).get_columns("runs")}
    if "audit_mac" not in have:  # a database opened by a release that added it before migrations
        op.add_column("runs", sa.Column("audit_mac", sa.String(64), nullable=True))


def downgrade() -> None:
    op.drop_column("runs", "audit_mac")
