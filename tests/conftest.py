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


#: Modules one xdist worker runs whole, in file order; every other test is scheduled alone.
#: test_install: one real install (module fixture), then its upgrade and uninstall.
#: test_console_browser: one headless Chromium at a time; adapters/test_video_budget: one
#: 2592x1944 camera at a time (several starve the 2-core machine).
ONE_WORKER = ("tests/scripts/test_install.py", "tests/console/test_console_browser.py",
              "tests/adapters/test_video_budget.py")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On an xdist worker, tests marked ``slow`` go first (stable sort; every worker collects the
    same order): the scheduler hands them out one per worker at the start, so none of them starts
    last and sets the suite's wall time on its own."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """With ``-n`` and the default ``--dist load``: xdist's scope scheduler (a worker asks for more
    once it has 2 tests left, units handed out in collection order) with one unit per test, or
    per module for :data:`ONE_WORKER`. Another ``--dist`` keeps xdist's own scheduler."""
    if config.getvalue("dist") != "load":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class PerTest(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return module if module in ONE_WORKER else nodeid

    return PerTest(config, log)
