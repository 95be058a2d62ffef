"""Shared fixtures: the shipped simulated-tank config (adapters off).

The helpers live in :mod:`agent.testing` (shared with the benchmarks under scripts/);
they are re-exported here for the tests that import them from ``tests.conftest``.
"""

from __future__ import annotations

import pytest

from agent.testing.ports import free_port, free_ports
from agent.testing.running_agent import (
    FIXTURES,
    PARAMS,
    ROOT,
    deep_merge,
    running_agent,
    sim_config,
    wait_for,
)

__all__ = ["FIXTURES", "PARAMS", "ROOT", "deep_merge", "free_port", "free_ports", "running_agent",
           "sim_config", "wait_for"]


@pytest.fixture
def sim_params() -> dict:
    """A fresh copy of the simulated-tank config dict (adapters off)."""
    return sim_config()
