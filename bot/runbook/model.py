"""The runbook document model (language v1), as pydantic models.

This is the contract between runbook authors, the validator, the engine and every front-end. The
model checks shape and local rules (types, names, durations, "action xor manual"); cross-references
(params, step ids, action registry, approval floors) are checked in ``validate.py`` because they
need the whole document and the action catalog.

Conventions (documented in docs/runbook-language.md):
- Bare expressions, without ``{{ }}``: ``when``, ``guards[].expr``, ``wait_until.expr``,
  ``foreach``, ``outputs.*``.
- Bare expressions also in ``spec.outcome[].when``; templated strings also in its ``reason``.
- Templated strings, with ``{{ }}``: ``with`` values, ``manual``, ``title``, guard ``message``.
  A ``with`` value that is exactly one ``{{ expr }}`` keeps the expression's native type.
- Words, templated like titles: ``when.because``, ``guards[].checks``, ``wait_until.waiting_for``.
  A person reads these in place of the expressions (docs/runbook-language.md#words).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from bot.runbook.durations import DURATION_PATTERN, parse_duration

API_VERSION = "runbook-bot/v1"
DNS1123_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
IDENTIFIER = r"^[a-z][a-z0-9_]*$"
ACTION_NAME = r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)*$"

Duration = Annotated[
    float,
    BeforeValidator(parse_duration),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "string", "pattern": DURATION_PATTERN},
                {"type": "number", "minimum": 0, "description": "seconds"},
            ],
            "examples": ["30s", "6m", "1h"],
        }
    ),
]
MAX_BATCH = 1000  # the largest batch a step's ``batch`` may cut a ``foreach`` list into
Identifier = Annotated[str, Field(pattern=IDENTIFIER, max_length=63)]
Expression = Annotated[str, Field(min_length=1, description="A bare Jinja2 expression, no {{ }}.")]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class Metadata(_Strict):
    name: Annotated[str, Field(pattern=DNS1123_LABEL, max_length=63)]
    title: Annotated[str, Field(min_length=1, max_length=150)]
    description: str = ""
    tags: tuple[Annotated[str, Field(pattern=DNS1123_LABEL)], ...] = ()
    owner: str = ""
    starters: tuple[Annotated[str, Field(min_length=1)], ...] | None = Field(
        default=None,
        description="The policy.groups whose members may start this runbook: narrows the "
                    "config's policy.start, never widens it. Leave it out for the config's rule; "
                    "an empty list is an error.",
        json_schema_extra={"minItems": 1},
    )

    @field_validator("starters")
    @classmethod
    def _some(cls, starters: tuple[str, ...] | None) -> tuple[str, ...] | None:
        if starters is not None and not starters:
            raise ValueError("an empty list would say nothing about who may start the runbook: "
                             "name at least one group, or leave 'starters' out")
        return starters


ParamType = Literal["string", "integer", "boolean", "enum", "duration", "list"]


class Param(_Strict):
    type: ParamType = "string"
    description: str = ""
    required: bool = False
    default: Any = None
    pattern: str | None = Field(default=None, description="Regular expression (string params).")
    values: tuple[str, ...] | None = Field(default=None, description="Allowed values (enum).")
    minimum: int | None = None
    maximum: int | None = None

    @model_validator(mode="after")
    def _check(self) -> Param:
        if self.type == "enum" and not self.values:
            raise ValueError("an enum param needs 'values', a list of the allowed strings")
        if self.type != "enum" and self.values is not None:
            raise ValueError(f"'values' is only for enum params, not {self.type}")
        if self.pattern is not None and self.type not in ("string", "list"):
            raise ValueError(f"'pattern' is only for string and list params, not {self.type}")
        if self.required and self.default is not None:
            raise ValueError("a param cannot be both required and have a default")
        return self


class Approval(_Strict):
    required: bool | None = None
    min_approvers: Annotated[int, Field(ge=1, le=10)] | None = None
    groups: tuple[str, ...] | None = Field(
        default=None,
        description="Who may approve; a step's list may only narrow the runbook's. Leave it out "
                    "for the runbook's groups; an empty list is an error.",
        json_schema_extra={"minItems": 1},
    )
    allow_self: bool | None = None
    expires_after: Duration | None = None
    description: str | None = Field(
        default=None,
        description="Shown to approvers with the plan: why this needs a human, what can go wrong.",
    )

    @field_validator("groups")
    @classmethod
    def _named(cls, groups: tuple[str, ...] | None) -> tuple[str, ...] | None:
        # [] used to mean "every configured group", widening approval; say what is meant instead
        if groups is not None and not groups:
            raise ValueError("an empty list would let any approver group approve: name at least "
                             "one group, or leave 'groups' out to use the runbook's "
                             "spec.approvals.groups")
        return groups


Words = Annotated[str, Field(
    min_length=1, max_length=300,
    description="A short sentence a person reads in place of the expression, templated with {{ }} "
                "like a title.")]


class When(_Strict):
    """``when`` with words: the expression, and why the step is not needed when it is false."""

    expr: Expression
    because: Annotated[Words, Field(
        description="Why the step is not needed when 'expr' is false, e.g. 'the instance is "
                    "already stopped'; shown in place of the expression when the step is skipped.")]


def _when_kind(value: Any) -> str:
    return "words" if isinstance(value, When | dict) else "expr"


WhenField = Annotated[
    Annotated[Expression, Tag("expr")] | Annotated[When, Tag("words")],
    Discriminator(_when_kind),
]


class Guard(_Strict):
    expr: Expression
    message: Annotated[str, Field(min_length=1)]
    checks: Words | None = Field(
        default=None, description="What the guard makes sure of, in words (e.g. 'the instance "
                                  "is stopped'); shown in place of the expression when it holds.")


class Retries(_Strict):
    count: Annotated[int, Field(ge=0, le=20)] = 0
    backoff: Duration = 5.0
    factor: Annotated[float, Field(ge=1.0, le=10.0)] = 2.0
    max_backoff: Duration = 300.0


class Goto(_Strict):
    goto: Identifier


def _on_failure_kind(value: Any) -> str:
    # One branch per shape, so a mistake yields one message, not one per union member.
    if isinstance(value, Goto | dict):
        return "goto"
    return "keyword"


OnFailure = Annotated[
    Annotated[Literal["abort", "continue"], Tag("keyword")] | Annotated[Goto, Tag("goto")],
    Discriminator(_on_failure_kind),
]


class WaitUntil(_Strict):
    expr: Expression
    waiting_for: Words | None = Field(
        default=None, description="What the step waits for, in words; may read 'result' for "
                                  "progress ('{{ result.attached }} of {{ result.count }} volumes "
                                  "attached'); shown in place of the expression.")
    interval: Duration = 10.0
    timeout: Duration = 600.0


class Step(_Strict):
    id: Identifier
    title: Annotated[str, Field(min_length=1, max_length=150)]
    action: Annotated[str, Field(pattern=ACTION_NAME)] | None = None
    with_: dict[str, Any] = Field(default_factory=dict, alias="with")
    manual: str | None = None
    when: WhenField | None = Field(
        default=None, description="Skip the step unless this bare expression is true; as "
                                  "{expr, because}, with why it is not needed, in words.")
    guards: tuple[Guard, ...] = ()
    approval: Approval | None = None
    timeout: Duration | None = None
    retries: Retries | None = None
    on_failure: OnFailure = "abort"
    wait_until: WaitUntil | None = None
    foreach: Expression | None = None
    batch: int | Expression | None = Field(
        default=None, description="With foreach: an expression giving N; the list is cut into "
                                  "batches of at most N elements, one step instance (and one "
                                  "approval) per batch, whose item is the batch.")
    outputs: dict[Identifier, Expression] = Field(default_factory=dict)

    @property
    def when_expr(self) -> str | None:
        """The expression of ``when``, whichever form it is written in."""
        return self.when.expr if isinstance(self.when, When) else self.when

    @property
    def when_because(self) -> str | None:
        """Why the step is not needed when ``when`` is false, in words (a template); None if
        the runbook gives none."""
        return self.when.because if isinstance(self.when, When) else None

    @model_validator(mode="after")
    def _action_xor_manual(self) -> Step:
        if (self.action is None) == (self.manual is None):
            raise ValueError("a step needs exactly one of 'action' or 'manual'")
        if self.manual is not None and self.with_:
            raise ValueError("'with' is only for action steps; a manual step has none")
        if self.batch is not None and self.foreach is None:
            raise ValueError("'batch' cuts the list of 'foreach' into batches: add 'foreach'")
        return self

    @field_validator("batch")
    @classmethod
    def _batch_size(cls, value: int | str | None) -> int | str | None:
        if isinstance(value, bool) or (isinstance(value, int) and not 1 <= value <= MAX_BATCH):
            raise ValueError(f"batch {value} is not a batch size: expected a whole number from 1 "
                             f"to {MAX_BATCH}, or an expression giving one (params.batch_size)")
        return value

    @field_validator("with_")
    @classmethod
    def _with_keys(cls, value: dict[str, Any]) -> dict[str, Any]:
        for key in value:
            if not isinstance(key, str):
                raise ValueError(f"'with' keys must be strings, got {key!r}")
        return value


LABEL_NAME = r"^[a-zA-Z_][a-zA-Z0-9_]*$"
# Alertmanager's matcher syntax: name, operator, value (quoted or not)
MATCHER = re.compile(r'^\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*(?:"((?:[^"\\]|\\.)*)"|([^"\s]*))\s*$')


@dataclass(frozen=True)
class Matcher:
    """One label matcher of a trigger: ``name op value``, as Alertmanager's routes write them."""

    name: str
    op: str
    value: str

    def matches(self, labels: Mapping[str, str]) -> bool:
        got = labels.get(self.name, "")
        if self.op == "=":
            return got == self.value
        if self.op == "!=":
            return got != self.value
        hit = re.fullmatch(self.value, got) is not None
        return hit if self.op == "=~" else not hit


def parse_matcher(text: str) -> Matcher:
    """``severity=~"warning|critical"`` -> Matcher; ValueError saying what is valid otherwise."""
    m = MATCHER.match(text)
    if m is None:
        raise ValueError(f"matcher {text!r} is not LABEL=VALUE, LABEL!=VALUE, LABEL=~REGEX or "
                         f"LABEL!~REGEX (e.g. 'phase=\"Failed\"')")
    name, op, quoted, bare = m.groups()
    value = re.sub(r'\\(["\\])', r"\1", quoted) if quoted is not None else bare
    if op in ("=~", "!~"):
        try:
            re.compile(value)
        except re.error as e:
            raise ValueError(f"matcher {text!r}: {value!r} is not a regular expression: {e}") from None
    return Matcher(name, op, value)


class Trigger(_Strict):
    """An alert this runbook answers, and how the alert's labels fill the runbook's params."""

    alertname: Annotated[str, Field(min_length=1, max_length=200,
                                    description="The alert's alertname label, exactly.")]
    matchers: tuple[str, ...] = Field(
        default=(), description='More label matchers, all of which must hold, in Alertmanager\'s '
                                'syntax: \'phase="Failed"\', \'severity=~"warning|critical"\', '
                                '\'namespace!="kube-system"\'.')
    params: dict[Identifier, str] = Field(
        default_factory=dict,
        description="Param name -> template over the alert's 'labels' and 'annotations', e.g. "
                    "node: \"{{ labels.node }}\".")

    @field_validator("matchers")
    @classmethod
    def _matchers(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for text in value:
            parse_matcher(text)
        return value

    def label_matchers(self) -> tuple[Matcher, ...]:
        return tuple(parse_matcher(t) for t in self.matchers)

    def matches(self, labels: Mapping[str, str]) -> bool:
        return (labels.get("alertname") == self.alertname
                and all(m.matches(labels) for m in self.label_matchers()))


RUN_OUTCOMES = ("succeeded", "partial", "failed")
RunOutcome = Literal["succeeded", "partial", "failed"]


class OutcomeRule(_Strict):
    """One rule of ``spec.outcome``: once the last step is done, the first rule whose ``when``
    holds decides how the run ends and says why (docs/runbook-language.md#run-outcome)."""

    when: Annotated[Expression, Field(
        description="A bare expression over params, steps and run, evaluated when every step is "
                    "done.")]
    outcome: Annotated[RunOutcome, Field(
        description="How the run ends when 'when' holds: succeeded, partial (every step "
                    "finished, the incident is only partly resolved) or failed.")]
    reason: Annotated[str, Field(
        min_length=1, max_length=500,
        description="Why, in words, templated with {{ }}; shown wherever the run's end is.")]


class Spec(_Strict):
    params: dict[Identifier, Param] = Field(default_factory=dict)
    approvals: Approval = Approval()
    triggers: tuple[Trigger, ...] = Field(
        default=(), description="The alerts this runbook answers (docs/alerts.md).")
    auto_run: bool = Field(
        default=False, description="Start a run when a trigger's alert fires, with the bot as "
                                   "requester; only for a runbook whose every step only reads "
                                   "(reads, reports, notify).")
    steps: Annotated[tuple[Step, ...], Field(min_length=1)]
    outcome: tuple[OutcomeRule, ...] = Field(
        default=(), description="How a run that finished every step ends: ordered rules, the "
                                "first whose 'when' holds wins; with none, the run succeeded.")


class Runbook(_Strict):
    api_version: Literal["runbook-bot/v1"] = Field(alias="apiVersion")
    kind: Literal["Runbook"]
    metadata: Metadata
    spec: Spec

    @property
    def name(self) -> str:
        return self.metadata.name

    def step(self, step_id: str) -> Step:
        for step in self.spec.steps:
            if step.id == step_id:
                return step
        raise KeyError(step_id)
