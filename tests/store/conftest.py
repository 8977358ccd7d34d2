"""Store tests use the shared ``db_url`` and ``pg_url`` fixtures of tests/conftest.py."""
