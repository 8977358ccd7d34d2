"""The Slack front-end (slack-bolt): the only place that imports slack_bolt and slack_sdk."""
