"""The store's revisions: runs, steps and the audit chain."""
