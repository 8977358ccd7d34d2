"""The terminal front-end: the same commands and policy as Slack, for a shell or when Slack is down."""
