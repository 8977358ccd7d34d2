"""runbook-bot: guarded, approved, audited incident runbooks from Slack or a terminal."""

__version__ = "0.1.0"
