"""Views built from platform-free models, rendered per destination: console, Block Kit, transcript."""
