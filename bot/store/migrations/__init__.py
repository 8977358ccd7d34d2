"""The Alembic environment of every table the bot creates (``bot.store.migrate`` runs it)."""
