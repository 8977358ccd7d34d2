"""Alembic's environment: runs one component's revisions on the connection it is handed.

``bot.store.migrate`` sets ``component`` (metadata and version table) and ``connection`` in the
config's attributes; each component keeps its revision in a version table of its own, so a
process that knows only the store still reads the store's revision when the Slack front-end's
tables are migrated too.
"""

from __future__ import annotations

from alembic import context

config = context.config
component = config.attributes["component"]
connection = config.attributes["connection"]

context.configure(connection=connection, target_metadata=component.metadata,
                  version_table=component.version_table,
                  render_as_batch=connection.dialect.name == "sqlite")

with context.begin_transaction():
    context.run_migrations()
