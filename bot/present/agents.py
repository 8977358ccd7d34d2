"""How a run an AI agent asked for reads to the people who approve it: one line naming the agent,
the person it said it acted for and its stated reason, and the evidence it gave, every word of it
made inert for Slack (``esc``: no mention, no link, no formatting) on top of what was neutralised
when it was stored (``bot.engine.agents.neutralise``). The person it acted for is written as an
identity, never as a mention, so the line pings nobody.
"""

from __future__ import annotations

from bot.engine.agents import AgentRequest

MAX_EVIDENCE_SHOWN = 1500  # characters of evidence on a card; the transcript keeps it all


def _esc(text: str) -> str:
    from bot.present.blockkit_base import truncate

    inert = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;", "*": "\u2217",
                           "`": "\u02cb", "~": "\u223c", "_": "\uff3f"})
    return truncate(text, MAX_EVIDENCE_SHOWN, pointer="").translate(inert)


def agent_line(request: AgentRequest | None) -> str | None:
    """``:robot_face: requested by agent holmes (on behalf of k8s:alice): <reason>`` in mrkdwn."""
    if request is None:
        return None
    behalf = f" (on behalf of {_esc(request.on_behalf_of)})" if request.on_behalf_of else ""
    reason = f": {_esc(request.reason)}" if request.reason else ""
    return f":robot_face: requested by agent *{_esc(request.agent)}*{behalf}{reason}"


def agent_evidence(request: AgentRequest | None) -> str | None:
    """The agent's evidence, marked as the agent's, or None when it gave none."""
    if request is None or not request.evidence:
        return None
    return (f"*Evidence from agent {_esc(request.agent)}* (an AI agent's words, not checked "
            f"by the bot):\n{_esc(request.evidence)}")


def agent_words(request: AgentRequest | None) -> str | None:
    """The same line as plain text (terminal, transcripts): no markup."""
    if request is None:
        return None
    behalf = f" (on behalf of {request.on_behalf_of})" if request.on_behalf_of else ""
    return f"requested by agent {request.agent}{behalf}" + (f": {request.reason}"
                                                            if request.reason else "")
