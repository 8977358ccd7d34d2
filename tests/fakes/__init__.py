"""Fakes that behave like the real services over their real protocols (Slack Web API over HTTP)."""
