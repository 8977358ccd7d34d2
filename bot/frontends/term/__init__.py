"""The terminal front-end: the same commands and the same policy as Slack."""
