"""Durable state: runs, steps and approvals (SQLAlchemy Core) and the hash-chained audit log."""
