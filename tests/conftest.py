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

# The suite's parallel workers are not one robot's threads sharing one budget: a camera thread niced
# below another worker's test starves (agent/support/threadprio.py). Agents started here and their
# subprocesses keep background threads at their process's priority; tests/agent/test_threadprio.py
# checks the agent's own step.
os.environ.setdefault("ROBOT_AGENT_BACKGROUND_NICE", "0")

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
#: The longest chain (two real installs one after the other, 20-90 s by the load): started first.
FIRST = ("tests/scripts/test_install.py",)
#: Where the last ``slow`` test goes, as a fraction of the run: late enough to spread them out,
#: early enough that none of them ends the run alone.
SLOW_SPREAD = 0.6


def _module(item: pytest.Item) -> str:
    return item.nodeid.split("::", 1)[0]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On an xdist worker (every worker collects the same order): :data:`FIRST` modules first, then
    the tests marked ``slow`` spread evenly over the first :data:`SLOW_SPREAD` of the run, a
    module in :data:`ONE_WORKER` kept together. Together they starved the CPU (a camera or a
    browser missed its deadlines); at the end one of them would set the wall time alone."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    first = [item for item in items if _module(item) in FIRST]
    rest = [item for item in items if _module(item) not in FIRST]
    is_slow = {id(item): item.get_closest_marker("slow") is not None for item in rest}
    slow_modules = {_module(item) for item in rest if is_slow[id(item)] and _module(item) in ONE_WORKER}
    units: dict[str, list[pytest.Item]] = {}            # slow units, in collection order
    for item in rest:
        if _module(item) in slow_modules:
            units.setdefault(_module(item), []).append(item)
        elif is_slow[id(item)]:
            units.setdefault(item.nodeid, []).append(item)
    slow = {id(item) for unit in units.values() for item in unit}
    normal = [item for item in rest if id(item) not in slow]
    step = SLOW_SPREAD * len(normal) / (len(units) + 1)
    out = list(first)
    at = 0
    for n, unit in enumerate(units.values(), start=1):
        upto = round(n * step)
        out += normal[at:upto] + unit
        at = upto
    items[:] = out + normal[at:]
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
