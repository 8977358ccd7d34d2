"""The Slack front-end's revisions, run by the store's migration environment (``bot.store.migrate``)."""
