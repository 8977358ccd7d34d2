"""Test doubles and harnesses shared by more than one test directory.

The fakes behave like the real services over their real protocols, so the product's clients run
unmodified against them:

- ``slack_api``, ``slack_socket``, ``slack_requests``: the Slack Web API and Socket Mode over HTTP
  and WebSocket, and signed requests as Slack sends them;
- ``kube_api``: a small Kubernetes API server over HTTP;
- ``ec2_proxy``: a proxy in front of moto's EC2 server that injects throttling and errors.

For the engine, without Kubernetes or EC2:

- ``engine_world``: a fake world (a JSON file, shared with subprocesses) and fake actions over it;
- ``engine_harness``: an ``Engine`` (a real runner and store, a manual clock, the fake world) and
  the ``make_engine`` fixture, with ``runbook()`` to write a small runbook inline.

Test directories import these by name (``from tests.fakes.kube_api import FakeKubeApi``), never
from one another.
"""
