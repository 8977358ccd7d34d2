"""What Alertmanager has told the bot, kept so that every replica answers an alert once.

Alertmanager delivers a group again and again (on every change, every ``repeat_interval``, from
each of its own replicas), and any of the bot's replicas may receive any delivery. So each alert
is recorded by its fingerprint in the shared database, and what changed is decided there with
conditional writes: only the replica whose insert or update went through sees an alert as new
(or as resolved), posts or updates the group's card, and starts an auto-run. A group's card is
claimed the same way (``claim_card``), so one group has one card.

A repeat changes nothing but when the alert was last heard of: what was stored for it (its
labels, annotations, suggestions and what a scan found) stays as first recorded until the alert
resolves or fires again. Alertmanager derives the fingerprint from the labels, so a delivery whose
labels differ from those recorded under its fingerprint is forged or broken: ``note`` refuses it
(``conflict``) and writes nothing.

An alert is kept while it fires and for a day after it was last heard of (resolved, or no longer
repeated); ``prune`` drops the rest.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy import and_, delete, insert, select, update
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError

from bot.store.schema import alerts_t, groups_t

KEEP_AFTER = 86400.0  # a day after the alert was last heard of

Change = Literal["new", "resolved", "same", "conflict"]


@dataclass(frozen=True)
class StoredAlert:
    key: str
    group_key: str
    status: str
    starts_at: str
    data: dict[str, Any]


class AlertLog:
    """The alerts table of the state database (its schema comes from the store's migrations)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def note(self, *, key: str, group_key: str, status: str, starts_at: str,
             data: dict[str, Any], now: float) -> Change:
        """Record one alert of a delivery; what changed, as decided by the database.

        ``new``: first heard of, or firing again after it resolved (a new ``startsAt``);
        ``resolved``: it fired and now resolved; ``same``: a repeat, or another replica
        recorded the change first; ``conflict``: ``data["labels"]`` differ from the labels
        recorded under this key, so nothing is written.
        """
        text = json.dumps(data, sort_keys=True, separators=(",", ":"))
        expires = now + KEEP_AFTER
        with self.engine.begin() as conn:
            row = conn.execute(select(alerts_t.c.status, alerts_t.c.starts_at, alerts_t.c.data)
                               .where(alerts_t.c.key == key)).first()
        if row is None:
            try:
                with self.engine.begin() as conn:
                    conn.execute(insert(alerts_t).values(
                        key=key, group_key=group_key, status=status, starts_at=starts_at,
                        data=text, seen_at=now, expires_at=expires))
            except IntegrityError:
                return "same"  # another replica recorded it a moment ago
            return "new" if status == "firing" else "resolved"
        if json.loads(row.data).get("labels") != data.get("labels"):
            return "conflict"
        if (row.status, row.starts_at) == (status, starts_at):
            # a repeat: only when it was last heard of moves on
            with self.engine.begin() as conn:
                conn.execute(update(alerts_t).where(and_(
                    alerts_t.c.key == key, alerts_t.c.status == row.status,
                    alerts_t.c.starts_at == row.starts_at)).values(
                        seen_at=now, expires_at=expires))
            return "same"
        with self.engine.begin() as conn:
            done = conn.execute(update(alerts_t).where(and_(
                alerts_t.c.key == key, alerts_t.c.status == row.status,
                alerts_t.c.starts_at == row.starts_at)).values(
                    group_key=group_key, status=status, starts_at=starts_at, data=text,
                    seen_at=now, expires_at=expires)).rowcount
        if not done:
            return "same"  # another replica recorded the change first
        if status == "resolved":
            return "resolved"
        return "new"

    def annotate(self, key: str, **fields: Any) -> None:
        """Add fields to an alert's data (what the diagnosis found), keeping the rest."""
        with self.engine.begin() as conn:
            row = conn.execute(select(alerts_t.c.data).where(alerts_t.c.key == key)).first()
            if row is None:
                return
            data = {**json.loads(row.data), **fields}
            conn.execute(update(alerts_t).where(alerts_t.c.key == key).values(
                data=json.dumps(data, sort_keys=True, separators=(",", ":"))))

    def annotate_many(self, notes: Mapping[str, Mapping[str, Any]]) -> None:
        """``annotate`` several alerts (alert key -> fields) in one transaction."""
        if not notes:
            return
        with self.engine.begin() as conn:
            rows = conn.execute(select(alerts_t.c.key, alerts_t.c.data)
                                .where(alerts_t.c.key.in_(list(notes)))).all()
            for row in rows:
                data = {**json.loads(row.data), **notes[row.key]}
                conn.execute(update(alerts_t).where(alerts_t.c.key == row.key).values(
                    data=json.dumps(data, sort_keys=True, separators=(",", ":"))))

    def group(self, group_key: str) -> list[StoredAlert]:
        """The alerts of a group as last recorded, oldest first."""
        with self.engine.begin() as conn:
            rows = conn.execute(select(alerts_t).where(alerts_t.c.group_key == group_key)
                                .order_by(alerts_t.c.starts_at, alerts_t.c.key)).all()
        return [StoredAlert(r.key, r.group_key, r.status, r.starts_at, json.loads(r.data))
                for r in rows]

    def claim_card(self, group_key: str, label: str, *, now: float) -> bool:
        """True for the one caller that is to post the group's card."""
        try:
            with self.engine.begin() as conn:
                conn.execute(insert(groups_t).values(group_key=group_key, label=label,
                                                     expires_at=now + KEEP_AFTER))
        except IntegrityError:
            with self.engine.begin() as conn:
                conn.execute(update(groups_t).where(groups_t.c.group_key == group_key)
                             .values(expires_at=now + KEEP_AFTER))
            return False
        return True

    def set_card(self, group_key: str, *, channel: str, ts: str) -> None:
        with self.engine.begin() as conn:
            conn.execute(update(groups_t).where(groups_t.c.group_key == group_key)
                         .values(channel=channel, ts=ts))

    def release_card(self, group_key: str) -> None:
        """The card could not be posted: let the next delivery try again."""
        with self.engine.begin() as conn:
            conn.execute(delete(groups_t).where(and_(groups_t.c.group_key == group_key,
                                                     groups_t.c.ts.is_(None))))

    def card(self, group_key: str) -> tuple[str, str] | None:
        """Where the group's card is (channel, ts), once posted."""
        with self.engine.begin() as conn:
            row = conn.execute(select(groups_t.c.channel, groups_t.c.ts)
                               .where(groups_t.c.group_key == group_key)).first()
        if row is None or row.channel is None or row.ts is None:
            return None
        return str(row.channel), str(row.ts)

    def prune(self, *, now: float) -> int:
        """Forget alerts not heard of for a day, and the cards of groups left empty."""
        with self.engine.begin() as conn:
            gone = conn.execute(delete(alerts_t).where(alerts_t.c.expires_at < now)).rowcount
            live = select(alerts_t.c.group_key).distinct()
            conn.execute(delete(groups_t).where(and_(groups_t.c.expires_at < now,
                                                     groups_t.c.group_key.not_in(live))))
        return int(gone or 0)
