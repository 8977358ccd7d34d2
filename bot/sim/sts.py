"""STS for the sandbox: moto answers, the sandbox records what was asked.

The bot assumes its role through STS (``AWS_ENDPOINT_URL_STS``), and what it puts on the wire
matters: ``RoleSessionName``, ``SourceIdentity`` (who the run acts for, kept in CloudTrail and
unchangeable in the session) and session tags. moto answers ``GetCallerIdentity`` and
``AssumeRole`` (its credentials then work against the EC2 endpoint) but drops ``SourceIdentity``
and tags, so the sandbox records every STS request as it arrived (``StsLog.calls``) for tests to
assert on, with the access key an ``AssumeRole`` answer handed out (``issued_key``): the EC2
endpoint records the access key that signed each request (``Ec2Sim.wire``), so a test can tell
which session made which call. ``AssumeRole`` is held to the sandbox's policy file as IAM holds
the caller: ``sts:AssumeRole`` on the role, and ``sts:TagSession`` / ``sts:SetSourceIdentity``
when the request carries tags / a SourceIdentity (moto checks neither), with the request's
condition keys (``trust_context``: its SourceIdentity and session tags), which the role's trust
policy's conditions are evaluated on too.
"""

from __future__ import annotations

import re
import threading
import uuid
from dataclasses import dataclass, field
from xml.sax.saxutils import escape

API_VERSION = "2011-06-15"
_ISSUED_KEY = re.compile(rb"<AccessKeyId>([^<]+)</AccessKeyId>")


@dataclass(frozen=True)
class StsCall:
    action: str
    access_key: str  # who asked (the signing key)
    role_arn: str = ""
    session_name: str = ""
    source_identity: str = ""
    tags: dict[str, str] = field(default_factory=dict)
    transitive_tag_keys: tuple[str, ...] = ()
    duration_seconds: int | None = None
    issued_key: str = ""  # the AccessKeyId an AssumeRole answer carried ("" if none)


def assume_role_actions(params: dict[str, str]) -> list[str]:
    """What IAM authorizes for this AssumeRole: tags and a SourceIdentity need their own grant."""
    out = ["sts:AssumeRole"]
    if "Tags.member.1.Key" in params:
        out.append("sts:TagSession")
    if params.get("SourceIdentity"):
        out.append("sts:SetSourceIdentity")
    return out


def session_tags(params: dict[str, str]) -> dict[str, str]:
    """The session tags an AssumeRole asks for (``Tags.member.N.Key``/``Value``), in order."""
    tags: dict[str, str] = {}
    n = 1
    while f"Tags.member.{n}.Key" in params:
        tags[params[f"Tags.member.{n}.Key"]] = params.get(f"Tags.member.{n}.Value", "")
        n += 1
    return tags


def trust_context(params: dict[str, str]) -> dict[str, str | list[str]]:
    """The condition keys IAM sees for this AssumeRole: ``sts:SourceIdentity`` (when given),
    ``aws:RequestTag/KEY`` for each session tag and ``aws:TagKeys`` (all of their keys)."""
    tags = session_tags(params)
    context: dict[str, str | list[str]] = {f"aws:RequestTag/{k}": v for k, v in tags.items()}
    if tags:
        context["aws:TagKeys"] = list(tags)
    if params.get("SourceIdentity"):
        context["sts:SourceIdentity"] = params["SourceIdentity"]
    return context


def error_xml(code: str, message: str) -> bytes:
    """An STS error body, in the Query protocol's ``ErrorResponse`` shape botocore parses."""
    return (f'<ErrorResponse xmlns="https://sts.amazonaws.com/doc/{API_VERSION}/"><Error>'
            f"<Type>Sender</Type><Code>{escape(code)}</Code><Message>{escape(message)}</Message>"
            f"</Error><RequestId>{uuid.uuid4()}</RequestId></ErrorResponse>").encode()


def is_sts(params: dict[str, str], service: str) -> bool:
    """Does this Query request go to STS (credential scope ``sts``, or STS's API version)?"""
    return service == "sts" or params.get("Version") == API_VERSION


class StsLog:
    def __init__(self) -> None:
        self.calls: list[StsCall] = []
        self._lock = threading.Lock()

    def record(self, params: dict[str, str], *, access_key: str, answer: bytes = b"") -> StsCall:
        tags = session_tags(params)
        transitive = tuple(v for k, v in sorted(params.items())
                           if k.startswith("TransitiveTagKeys.member."))
        duration = params.get("DurationSeconds")
        call = StsCall(action=params.get("Action", ""), access_key=access_key,
                       role_arn=params.get("RoleArn", ""), session_name=params.get("RoleSessionName", ""),
                       source_identity=params.get("SourceIdentity", ""), tags=tags,
                       transitive_tag_keys=transitive,
                       duration_seconds=int(duration) if duration else None,
                       issued_key=m.group(1).decode() if (m := _ISSUED_KEY.search(answer)) else "")
        with self._lock:
            self.calls.append(call)
        return call
