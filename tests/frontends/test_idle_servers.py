"""An idle HTTP server of the bot must not spin a CPU core.

waitress reads ``asyncore_loop_timeout`` as a whole number of seconds; a fraction such as 0.2
becomes 0, and its select loop then polls without waiting. Both servers the bot runs (Slack's and
the side port of ``worker`` / Socket Mode) are checked as built.
"""

from __future__ import annotations

from bot.frontends.ops import side_server


def test_the_side_port_server_waits_in_its_loop_instead_of_polling():
    server = side_server(lambda environ, start: [], host="127.0.0.1", port=0)
    try:
        assert server.loop_timeout >= 1
    finally:
        server.stop()


def test_the_slack_server_waits_in_its_loop_instead_of_polling():
    from slack_bolt import App

    from bot.frontends.slack.app import http_server

    app = App(token="xoxb-test", signing_secret="s", token_verification_enabled=False)
    server = http_server(app, host="127.0.0.1", port=0)
    try:
        assert server.loop_timeout >= 1
    finally:
        server.stop()
