"""Fixtures for the engine tests: ``make_engine`` builds an engine on fake actions and a real store."""

from tests.fakes.engine_harness import make_engine

__all__ = ["make_engine"]
