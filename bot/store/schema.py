"""The state database's tables (runs, steps, audit events, alerts, auto-run slots, workers) and
the ``STORE`` component that migrates them (``bot.store.migrate``).

The schema is its own module so that ``bot.store.db`` holds only the queries and stays within the
module-size budget (docs/architecture.md); every name here is also importable from
``bot.store.db``. A change to a table is a revision in ``migrations/versions``.
"""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import Boolean, Column, Float, Integer, MetaData, String, Table, Text

from bot.store.migrate import Component

metadata = MetaData()

runs = Table(
    "runs", metadata,
    Column("id", String(16), primary_key=True),
    Column("runbook", String(63), nullable=False),
    Column("status", String(20), nullable=False, index=True),
    Column("requester", String(200), nullable=False),
    Column("channel", String(100), nullable=True, index=True),
    Column("dry_run", Boolean, nullable=False, default=False),
    Column("created_at", String(40), nullable=False),
    Column("header", Text, nullable=False),
    Column("runbook_text", Text, nullable=False),  # written once: a run keeps its runbook
    Column("version", Integer, nullable=False, default=0),
    Column("next_check_at", Float, nullable=True, index=True),
    Column("lease_owner", String(200), nullable=True),
    Column("lease_until", Float, nullable=True),
    Column("audit_seq", Integer, nullable=False, default=0),
    Column("audit_hash", String(64), nullable=True),
    Column("audit_mac", String(64), nullable=True),
    Column("parent_id", String(16), nullable=True, index=True),
    Column("incident", String(200), nullable=True, index=True),
)

steps_t = Table(
    "steps", metadata,
    Column("run_id", String(16), primary_key=True),
    Column("key", String(100), primary_key=True),
    Column("position", Integer, nullable=False),
    Column("state", Text, nullable=False),
)

events_t = Table(
    "events", metadata,
    Column("run_id", String(16), primary_key=True),
    Column("seq", Integer, primary_key=True),
    Column("ts", String(40), nullable=False),
    Column("actor", String(200), nullable=False),
    Column("type", String(60), nullable=False),
    Column("payload", Text, nullable=False),
    Column("prev_hash", String(64), nullable=False),
    Column("hash", String(64), nullable=False),
)

# Alertmanager's alerts, deduplicated across replicas (``alerts.py``; revision store_0003)
alerts_t = Table(
    "alerts", metadata,
    Column("key", String(200), primary_key=True),  # cluster/fingerprint
    Column("group_key", String(64), nullable=False, index=True),  # sha256 of Alertmanager's groupKey
    Column("status", String(10), nullable=False),  # firing | resolved
    Column("starts_at", String(40), nullable=False),
    Column("data", Text, nullable=False),  # JSON: labels, annotations, suggestions...
    Column("seen_at", Float, nullable=False),
    Column("expires_at", Float, nullable=False, index=True),
)

groups_t = Table(
    "alert_groups", metadata,
    Column("group_key", String(64), primary_key=True),
    Column("label", Text, nullable=False),  # Alertmanager's groupKey, as it sent it
    Column("channel", String(40), nullable=True),
    Column("ts", String(40), nullable=True),
    Column("expires_at", Float, nullable=False, index=True),
)

# Auto-runs started by alerts: ``limit`` slots per runbook, each used at most once a window, so
# every replica counts the same runs (``auto_runs.py``; revision store_0006)
auto_runs_t = Table(
    "alert_auto_runs", metadata,
    Column("runbook", String(63), primary_key=True),
    Column("slot", Integer, primary_key=True),
    Column("used_at", Float, nullable=False),  # epoch seconds of the start that took the slot
)

# Processes that drive runs (``worker``, ``slack serve``) and when each last went round its loop,
# so a terminal knows whether anyone will carry a run on once it lets go of it (revision store_0005).
workers_t = Table(
    "workers", metadata,
    Column("id", String(200), primary_key=True),  # host:pid:token, as a lease owner
    Column("started_at", String(40), nullable=False),
    Column("beat_at", Float, nullable=False),  # epoch seconds of the last beat
)

# Requests refused before any run existed: an append-only hash chain of its own (``refusals.py``;
# revision store_0007)
refusals_t = Table(
    "refusals", metadata,
    Column("seq", Integer, primary_key=True, autoincrement=False),
    Column("ts", String(40), nullable=False),
    Column("actor", String(200), nullable=False),
    Column("what", Text, nullable=False),  # "start node-dead-ngns", "api GET /api/v1/runs"
    Column("reason", Text, nullable=False),
    Column("via", Text, nullable=False),  # JSON: front-end, channel, host...
    Column("kid", String(16), nullable=False),  # the audit key's id that signed it; "": none
    Column("prev_hash", String(64), nullable=False),
    Column("hash", String(64), nullable=False),
)

# Servers of the API that serve this database (``servers.py``; revision store_0008): a terminal
# in local mode that finds one refuses to write here unless ``local_mode_override`` says so
servers_t = Table(
    "servers", metadata,
    Column("url", String(500), primary_key=True),  # the API's address, as terminals reach it
    Column("host", String(200), nullable=False),  # the host that last started serving it
    Column("started_at", String(40), nullable=False),
)

# Notices of the node watcher, claimed once across replicas (``node_notices.py``; revision
# store_0009): the key is cluster/node-or-zone/verdict/when the Lease went stale
node_notices_t = Table(
    "node_notices", metadata,
    Column("key", String(400), primary_key=True),
    Column("claimed_at", Float, nullable=False),
    Column("expires_at", Float, nullable=False, index=True),
)


# Notes the bot owes PagerDuty incidents (``pagerduty_notes.py``; revision store_0010): one row
# per finished run linked to an incident, kept until PagerDuty took it (or it was given up on)
pagerduty_notes_t = Table(
    "pagerduty_notes", metadata,
    Column("run_id", String(16), primary_key=True),
    Column("incident_id", String(64), nullable=False),
    Column("content", Text, nullable=False),
    Column("state", String(10), nullable=False, index=True),  # pending | posted | failed
    Column("attempts", Integer, nullable=False, default=0),
    Column("due_at", Float, nullable=False, index=True),  # epoch seconds of the next try
    Column("claim_until", Float, nullable=True),  # a replica posting it now holds it till then
    Column("error", Text, nullable=True),  # the last failure, without secrets
    Column("note_id", String(64), nullable=True),
)

STORE = Component(name="store", metadata=metadata,
                  versions=Path(__file__).with_name("migrations") / "versions",
                  version_table="alembic_version")
