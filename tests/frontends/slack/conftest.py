"""The Slack front-end served over real HTTP (waitress), talking to the fake Slack Web API.

Requests go in signed, as Slack sends them; the app's replies land in the fake, where a test
reads the channel, the run card's thread and every revision of a message. The engine runs on
fake actions, a ManualClock and a real SQLite store; waits progress when a test advances the
clock and calls ``run_due``.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict

from bot.actions.authoring import action
from bot.config import AlertsConfig, ClusterConfig, PagerDutyConfig, PolicyConfig, Settings, SlackConfig
from bot.engine.plan import Change, Plan, Result
from bot.engine.ports import ManualClock
from bot.frontends.alerts import listener
from bot.frontends.metrics import Metrics
from bot.frontends.observed import ObservedCatalog
from bot.frontends.ops import OpsEndpoints, database_check, side_server, worker_check
from bot.frontends.slack.app import SlackParts, build_app, http_server
from bot.runbook.source import TextSource
from bot.runtime.runner import Runner
from bot.store.db import Database
from tests.fakes.engine_harness import runbook
from tests.fakes.engine_world import FakeCatalog, World, make_registry
from tests.fakes.slack_api import BOT_TOKEN, CHANNEL, FakeSlack
from tests.fakes.slack_requests import (
    SIGNING_SECRET,
    block_actions_payload,
    interaction_body,
    send,
    signed,
    slash_command_body,
    view_submission_payload,
)

ALICE, BOB, CAROL, DAVE = "UALICE0001", "UBOB000001", "UCAROL0001", "UDAVE00001"
ONCALL = "S0ONCALL01"
POLICY = PolicyConfig(groups={"sre": ("slack:" + DAVE, "slack-group:" + ONCALL)})
SANDBOX_POLICY = PolicyConfig(groups={"sre-oncall": ("slack:" + DAVE, "slack-group:" + ONCALL)})

CHANGE = runbook("change-thing", """
- id: read
  title: "Read {{ params.name }}"
  action: fake.read
  with: {name: "{{ params.name }}"}
- id: change
  title: "Set {{ params.name }} to {{ params.value }}"
  action: fake.set
  with: {name: "{{ params.name }}", value: "{{ params.value }}"}
- id: taint
  title: "Taint {{ params.name }}"
  action: fake.taint
  with: {name: "{{ params.name }}"}
  approval: {required: true}
""", params="""
name: {type: string, required: true, pattern: "[a-z0-9-]+", description: the thing to change}
value: {type: string, default: "on"}
count: {type: integer, minimum: 1, maximum: 5, default: 1}
""", approvals="""
groups: [sre]
""")

SLOW = runbook("slow-wait", """
- id: settle
  title: Wait for it to settle
  action: fake.slow
  with: {name: "{{ params.name }}", polls: 3}
""", params="""
name: {type: string, default: "x"}
""")


def _many(n: int) -> str:
    steps = "".join(f"""
- id: s{i}
  title: "A rather long step title number {i} that says what it reads and why it matters"
  action: fake.noop
""" for i in range(n))
    return runbook("many-steps", steps)


MANUAL = runbook("check-by-hand", """
- id: console
  title: Look at the console
  manual: "Open the EC2 console and check that {{ params.name }} is stopped"
""", params="""
name: {type: string, default: "i-0abc"}
""")

WIDE = runbook("cordon-fleet", """
- id: cordon
  title: "Cordon {{ params.nodes }} nodes"
  action: fake.wide
  with: {count: "{{ params.nodes }}"}
  approval: {required: true}
""", params="""
nodes: {type: integer, minimum: 1, maximum: 1000, default: 400}
""", approvals="""
groups: [sre]
""")

EACH = runbook("set-each", """
- id: change
  title: "Set {{ item }}"
  action: fake.set
  foreach: "['web-1', 'web-2']"
  with: {name: "{{ item }}", value: "on"}
""", approvals="""
groups: [sre]
""")

IN_CLUSTER = runbook("read-in-cluster", """
- id: read
  title: "Read {{ params.name }}"
  action: fake.read
  with: {name: "{{ params.name }}"}
""", params="""
name: {type: string, default: "x"}
cluster: {type: string, description: the configured cluster}
""")

TEXTS = {"change-thing": CHANGE, "slow-wait": SLOW, "many-steps": _many(120),
         "check-by-hand": MANUAL, "cordon-fleet": WIDE, "set-each": EACH,
         "read-in-cluster": IN_CLUSTER}


class TaintParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str


class WideParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    count: int


def registry(world: World) -> Any:
    reg = make_registry(world)

    def plan_taint(p: TaintParams, env: Any) -> Plan:
        return Plan(action="fake.taint", params={}, changes=(
            Change(target_kind="Thing", target=p.name, operation="taint", before="", after="tainted"),))

    def apply_taint(plan: Plan, p: TaintParams, env: Any) -> Result:
        world.set(f"taint:{p.name}", True)
        return Result(data={"compensation": f"out-of-service taint still on {p.name}: run "
                                            "node-recovered when it is repaired"},
                      message=f"tainted {p.name}")

    reg.add(action("fake.taint", TaintParams, destructive=False, summary="Taint {{ name }}",
                   description="Marks a thing; it stays marked until repaired.",
                   plan=plan_taint, apply=apply_taint))

    def plan_wide(p: WideParams, env: Any) -> Plan:
        return Plan(action="fake.wide", params={}, changes=tuple(
            Change(target_kind="Node", target=f"ip-10-0-{i // 250}-{i % 250}", operation="cordon",
                   before="schedulable", after="cordoned") for i in range(p.count)))

    def apply_wide(plan: Plan, p: WideParams, env: Any) -> Result:
        world.set("cordoned", p.count)
        return Result(data={}, message=f"cordoned {p.count} nodes")

    reg.add(action("fake.wide", WideParams, destructive=True, summary="Cordon {{ count }} nodes",
                   description="A change with a plan too long for one message.",
                   plan=plan_wide, apply=apply_wide))

    return reg


class NamedSource(TextSource):
    def names(self) -> list[str]:
        return sorted(self._texts)


class Bot:
    """The running app plus handles on everything a test looks at."""

    def __init__(self, fake: FakeSlack, tmp: Path, *, allowed: tuple[str, ...] = (),
                 threads: int = 4, workers: int = 4, card_interval: float = 0.0,
                 rehearsal: Any = None, db_url: str | None = None,
                 alerts: AlertsConfig | None = None, texts: dict[str, str] | None = None,
                 clusters: tuple[str, ...] = (), diagnoser: Any = None,
                 ack_timer: Callable[[], float] | None = None,
                 pagerduty: PagerDutyConfig | None = None) -> None:
        """On fake actions, or (``rehearsal``, a started ``bot.sim.rehearsal.Rehearsal``) on the
        shipped runbooks against the sandbox, with ``SANDBOX_POLICY``; ``ack_timer`` times the
        acks (``time.perf_counter`` if not given)."""
        self.fake = fake
        self.rehearsal = rehearsal
        if rehearsal is None:
            # one clock for the bot and the fake Slack: Retry-After windows pass when it advances
            self.clock = fake.clock if isinstance(fake.clock, ManualClock) else ManualClock()
            self.world = World(tmp / "world.json")
            self.db = Database(db_url or f"sqlite:///{tmp / 'state.db'}", audit_key="k")
            reg = registry(self.world)
            catalog: Any = FakeCatalog(reg)
            runbooks: Any = NamedSource({**TEXTS, **(texts or {})}, catalog=reg)
            policy = POLICY
        else:
            self.clock, self.db = rehearsal.clock, rehearsal.store
            catalog, runbooks = rehearsal.runner.catalog, rehearsal.runner.runbooks
            policy = SANDBOX_POLICY
        self.settings = Settings(database_url=self.db.url, policy=policy, slack=SlackConfig(
            bot_token=BOT_TOKEN, signing_secret=SIGNING_SECRET, api_url=fake.base_url,
            allowed_channels=allowed), alerts=alerts or AlertsConfig(),
            clusters={c: ClusterConfig(name=c) for c in clusters},
            pagerduty=pagerduty or PagerDutyConfig())
        self.metrics = Metrics()
        self.parts = SlackParts(self.settings, store=self.db, clock=self.clock, workers=workers,
                                card_interval=card_interval, metrics=self.metrics,
                                ack_timer=ack_timer or time.perf_counter)
        self.runner = Runner(store=self.db, catalog=ObservedCatalog(catalog, self.metrics),
                             runbooks=runbooks, policy=policy, clock=self.clock,
                             membership=self.parts.membership(policy),
                             notifiers=[self.parts.outbox, self.metrics])
        self.ops = OpsEndpoints(metrics=self.metrics, checks={
            "database": database_check(self.db.engine),
            "worker": worker_check(self.runner.heartbeat)})
        self.app, self.service, _ = build_app(self.settings, self.runner, parts=self.parts,
                                              diagnoser=diagnoser)
        self.parts.start()
        self._closed = False
        # one listener per audience, as ``slack serve`` runs them: Slack's, the ops port's and
        # (with webhook credentials) Alertmanager's
        self.server = http_server(self.app, host="127.0.0.1", port=0, threads=threads)
        self.base = f"http://127.0.0.1:{self.server.effective_port}"
        self.url = f"{self.base}/slack/events"
        self.ops_server = side_server(self.ops, host="127.0.0.1", port=0)
        self.ops_base = f"http://127.0.0.1:{self.ops_server.effective_port}"
        self.alerts_server = None if self.parts.webhook is None and not self.parts.alert_routes \
            else listener(self.parts.webhook, host="127.0.0.1", port=0, threads=2,
                          more=self.parts.alert_routes)
        self.alerts_base = "" if self.alerts_server is None else \
            f"http://127.0.0.1:{self.alerts_server.effective_port}"
        self._threads = [threading.Thread(target=s.run, daemon=True, name="waitress")
                         for s in (self.server, self.ops_server, self.alerts_server) if s is not None]
        for t in self._threads:
            t.start()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.settle()
        for server in (self.server, self.ops_server, self.alerts_server):
            if server is not None:
                server.stop()
        for t in self._threads:
            t.join(timeout=5)
        self.parts.close()
        if self.rehearsal is None:
            self.db.close()

    # -- sending --------------------------------------------------------------------------------

    def post(self, body: str, **kw: Any) -> tuple[int, bytes]:
        return send(self.url, signed(body, **kw))

    def command(self, text: str, *, user: str = ALICE, settle: bool = True, channel: str = CHANNEL,
                **kw: Any) -> tuple[int, bytes]:
        trigger = self.fake.new_trigger_id(user)
        out = self.post(slash_command_body(text=text, user_id=user, trigger_id=trigger,
                                           channel_id=channel,
                                           response_url=self.fake.new_response_url(user, channel)),
                        **kw)
        if settle:
            self.settle()
        return out

    def click(self, message: dict[str, Any], action_id: str, *, user: str,
              settle: bool = True, channel: str = CHANNEL) -> tuple[int, bytes]:
        el = button_in(message, action_id)
        payload = block_actions_payload(user_id=user, action_id=action_id, value=el["value"],
                                        block_id=el["_block_id"], message=message,
                                        trigger_id=self.fake.new_trigger_id(user),
                                        channel_id=channel,
                                        response_url=self.fake.new_response_url(user, channel))
        out = self.post(interaction_body(payload))
        if settle:
            self.settle()
        return out

    def submit(self, view: dict[str, Any], values: dict[str, dict[str, Any]], *, user: str,
               settle: bool = True) -> tuple[int, bytes]:
        payload = view_submission_payload(user_id=user, view=view, values=values)
        out = self.post(interaction_body(payload))
        if settle:
            self.settle()
        return out

    def settle(self, timeout: float = 60.0) -> None:
        """Wait for the work after acks and for the outbox, until neither has anything left.

        ``timeout`` only bounds a hang: on a loaded machine a few requests and drawings can take
        seconds of wall-clock time, and what is awaited is decided on the injected clock."""
        for _ in range(100):
            assert self.parts.work.idle(timeout=timeout), "Slack work did not finish"
            assert self.parts.outbox.idle(timeout=timeout), "the Slack outbox did not finish"
            if self.parts.work.idle(timeout=0):
                return
        raise AssertionError("Slack work kept coming")

    # -- looking --------------------------------------------------------------------------------

    def card(self) -> dict[str, Any]:
        [card] = self.fake.messages(CHANNEL)
        return card

    def replies(self) -> list[dict[str, Any]]:
        return self.fake.thread(CHANNEL, self.card()["ts"])[1:]

    def replies_everywhere(self) -> list[dict[str, Any]]:
        """Every thread reply of every run card in the channel."""
        return [m for card in self.fake.messages(CHANNEL)
                for m in self.fake.thread(CHANNEL, card["ts"])[1:]]

    def run_id(self) -> str:
        [run] = self.db.runs(limit=5)
        return run.run_id

    def events(self, run_id: str) -> list[Any]:
        return self.db.events(run_id)

    def approval(self, step: str) -> dict[str, Any]:
        found = [m for m in self.replies() if any(
            b.get("block_id") == f"decide:{step}" for b in m.get("blocks", []))]
        assert found, f"no approval message with buttons for {step}: {texts(self.replies())}"
        return found[-1]


def button_in(message: dict[str, Any], action_id: str) -> dict[str, Any]:
    for block in message.get("blocks", []):
        for el in block.get("elements", []) if block.get("type") == "actions" else []:
            if el.get("action_id") == action_id:
                return {**el, "_block_id": block.get("block_id")}
    raise AssertionError(f"no {action_id} button in {json.dumps(message)[:500]}")


def texts(messages: list[dict[str, Any]]) -> list[str]:
    out = []
    for m in messages:
        parts = [m.get("text", "")]
        for b in m.get("blocks", []):
            if isinstance(b.get("text"), dict):
                parts.append(b["text"].get("text", ""))
            for f in b.get("fields", []) or []:
                parts.append(f.get("text", ""))
            for el in b.get("elements", []) if b.get("type") == "context" else []:
                parts.append(el.get("text", ""))
        out.append("\n".join(parts))
    return out


def wait_for(cond: Callable[[], Any], *, timeout: float = 5.0) -> Any:
    """Poll ``cond`` until it is truthy or the deadline passes (for work off the request thread)."""
    tick = threading.Event()
    deadline = timeout / 0.02
    for _ in range(int(deadline)):
        value = cond()
        if value:
            return value
        tick.wait(0.02)
    raise AssertionError("condition not met in time")


def workspace(f: FakeSlack) -> FakeSlack:
    """The people of the tests: alice requests, bob is on call, dave is in sre, carol is neither."""
    f.set_usergroup(ONCALL, [BOB])
    for uid, name in ((ALICE, "alice"), (BOB, "bob"), (CAROL, "carol"), (DAVE, "dave")):
        f.add_user(uid, name=name)
    return f


@pytest.fixture
def fake() -> Iterator[FakeSlack]:
    with FakeSlack(clock=ManualClock()) as f:
        yield workspace(f)


@pytest.fixture
def make_bot(fake: FakeSlack, tmp_path: Path) -> Iterator[Callable[..., Bot]]:
    bots: list[Bot] = []

    def make(**kw: Any) -> Bot:
        bots.append(Bot(fake, tmp_path, **kw))
        return bots[-1]

    yield make
    for b in bots:
        b.close()


@pytest.fixture
def bot(make_bot: Callable[..., Bot]) -> Bot:
    return make_bot()


RAW_ISO = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}")


def raw_iso_times(fake: FakeSlack) -> list[str]:
    """Every raw ISO-8601 time in what the app sent Slack (messages, updates, ephemerals, answers
    through response_url, modals): each should have been a ``<!date^…>``."""
    found = []
    for call in fake.calls():
        for name in ("text", "blocks", "view", "attachments"):
            value = call.params.get(name)
            if value is None:
                continue
            text = value if isinstance(value, str) else json.dumps(value)
            found += [f"{call.method}.{name}: …{text[max(0, m.start() - 60):m.end() + 20]}…"
                      for m in RAW_ISO.finditer(text)]
    return found
