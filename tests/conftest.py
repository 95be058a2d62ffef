"""Shared fixtures: the shipped simulated-tank config (adapters off).

The helpers live in :mod:`agent.testing` (shared with the benchmarks under scripts/);
they are re-exported here for the tests that import them from ``tests.conftest``.
"""

from __future__ import annotations

import os

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


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On an xdist worker, tests marked ``slow`` go first (stable sort, every worker collects the
    same order): the scheduler hands them out at the start, so none of them starts last and sets
    the suite's wall time on its own."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        items.sort(key=lambda item: item.get_closest_marker("slow") is None)
