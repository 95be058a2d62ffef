"""Shared fixtures: the shipped simulated-tank config (adapters off).

The helpers live in :mod:`agent.testing` (shared with the benchmarks under scripts/);
they are re-exported here for the tests that import them from ``tests.conftest``.
"""

from __future__ import annotations

import os
import resource
import time

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
    wait_until,
)

# The suite's parallel workers are not one robot's threads sharing one budget: a camera thread niced
# below another worker's test starves (agent/support/threadprio.py). Agents started here and their
# subprocesses keep background threads at their process's priority; tests/agent/test_threadprio.py
# checks the agent's own step.
os.environ.setdefault("ROBOT_AGENT_BACKGROUND_NICE", "0")
# The run that writes ROBOT_AGENT_TEST_TIMELINE (see _timeline): set before xdist starts its workers.
if os.environ.get("ROBOT_AGENT_TEST_TIMELINE"):
    os.environ.setdefault("ROBOT_AGENT_TEST_TIMELINE_OWNER", str(os.getpid()))

__all__ = ["FIXTURES", "PARAMS", "ROOT", "deep_merge", "free_port", "free_ports", "running_agent",
           "sim_config", "wait_for", "wait_until"]


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
#: The longest chains, started first, in this order (one worker each): the e-stop soak (60 s of
#: waiting, the acceptance run of docs/safety.md) and the real install with its upgrade (20-90 s
#: by the load). The other workers fill in around them.
FIRST = ("tests/test_estop_sources.py::test_estop_soak", "tests/scripts/test_install.py")
#: The other long tests (>= ~5 s on a quiet machine, from ``--durations``), longest first: with
#: the ``slow`` ones not named here (after these), spread over the first :data:`SLOW_SPREAD` of the
#: run so they start early rather than end it. A node id or a prefix of one: a module, or (with
#: ``::``) the start of a test's name.
LONG = ("tests/scripts/test_install_bookworm.py", "tests/drivers/test_hardware_suite.py",
        "tests/adapters/test_video_budget.py", "tests/agent/test_config_fuzz.py",
        "tests/agent/test_estop_cli.py", "tests/adapters/test_stop_model.py::test_the_stopper_streams_again",
        "tests/agent/test_lazy_imports.py", "tests/console/test_console_browser.py",
        "tests/console/test_console_browser_tabs.py", "tests/adapters/test_artex_links.py",
        "tests/console/test_console_browser_link.py", "tests/recorder/test_incidents_browser.py",
        "tests/adapters/test_artex.py::test_telem_rate_limit_and_only_on_change",
        "tests/agent/test_status.py::test_status_follows_a_motor_controller_unplugged",
        "tests/adapters/test_sim2bot_formats.py", "tests/test_ports_typed.py",
        "tests/adapters/test_artex_settings_files.py::test_sigkill_during_settings_writes",
        "tests/test_estop_sources.py")
#: Where the last ``slow`` test goes, as a fraction of the run: late enough to spread them out,
#: early enough that none of them ends the run alone.
SLOW_SPREAD = 0.6


def _module(item: pytest.Item) -> str:
    return item.nodeid.split("::", 1)[0]


def _rank(nodeid: str, prefixes: tuple[str, ...]) -> int | None:
    """Index of the first of ``prefixes`` that names ``nodeid`` (itself, its module, or the test
    without its parameters), or None."""
    for n, prefix in enumerate(prefixes):
        if nodeid.startswith(prefix) if "::" in prefix else nodeid == prefix or nodeid.startswith(prefix + "::"):
            return n
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On an xdist worker (every worker collects the same order; the scheduler below hands the
    units out in it): :data:`FIRST` first, then the tests marked ``slow`` and the :data:`LONG`
    ones (longest first) spread evenly over the first :data:`SLOW_SPREAD` of the run, a module in
    :data:`ONE_WORKER` kept together. All at once they starved the CPU (a camera or a browser
    missed its deadlines); at the end one of them would set the wall time alone."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    units: dict[str, list[pytest.Item]] = {}            # every unit, in collection order
    for item in items:
        module = _module(item)
        units.setdefault(module if module in ONE_WORKER else item.nodeid, []).append(item)
    first = sorted((key for key in units if _rank(key, FIRST) is not None), key=lambda k: _rank(k, FIRST))

    def long_rank(key: str) -> int | None:
        unit = units[key]
        if _rank(key, LONG) is not None:
            return _rank(key, LONG)
        if any(item.get_closest_marker("slow") is not None for item in unit):
            return len(LONG)
        return None
    spread = sorted((key for key in units if key not in first and long_rank(key) is not None), key=long_rank)
    normal = [units[key] for key in units if key not in first and key not in spread]
    step = SLOW_SPREAD * len(normal) / (len(spread) + 1)
    out = [item for key in first for item in units[key]]
    at = 0
    for n, key in enumerate(spread, start=1):
        upto = round(n * step)
        out += [item for unit in normal[at:upto] for item in unit] + units[key]
        at = upto
    items[:] = out + [item for unit in normal[at:] for item in unit]


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """With ``-n`` and the default ``--dist load``: xdist's scope scheduler (a worker asks for more
    once it has 2 tests left) with one unit per test, or per module for :data:`ONE_WORKER`, handed
    out in the workers' collection order (above). xdist would otherwise put the scopes with the
    most tests first (``--loadscope-reorder``, its default): the ONE_WORKER modules, not the
    longest tests. Another ``--dist`` keeps xdist's own scheduler."""
    if config.getvalue("dist") != "load":
        return None
    from xdist.scheduler import LoadScopeScheduling

    config.option.loadscopereorder = False

    class PerTest(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return module if module in ONE_WORKER else nodeid

    return PerTest(config, log)


def _timeline() -> str | None:
    """The ``ROBOT_AGENT_TEST_TIMELINE`` file, for this run's own processes only: the first pytest
    to see it (the controller, or the one process without xdist) and its workers (its children),
    not a pytest that a test runs in a subprocess (tests/drivers/test_hardware_suite.py)."""
    path = os.environ.get("ROBOT_AGENT_TEST_TIMELINE")
    owner = os.environ.get("ROBOT_AGENT_TEST_TIMELINE_OWNER")
    return path if path and owner in (str(os.getpid()), str(os.getppid())) else None


def _cpu_s() -> float:
    """CPU seconds (user + sys) of this process and its reaped children."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    """``ROBOT_AGENT_TEST_TIMELINE=FILE``: each test appends ``worker start end cpu nodeid`` to FILE
    (monotonic seconds; cpu: CPU seconds of the worker and the subprocesses it reaped meanwhile),
    to see how the workers fill (which test ends the run, where one idles) and what costs CPU."""
    path = _timeline()
    if not path:
        return (yield)
    start, cpu = time.monotonic(), _cpu_s()
    try:
        return (yield)
    finally:
        with open(path, "a", encoding="utf-8") as out:
            out.write(f"{os.environ.get('PYTEST_XDIST_WORKER', 'main')} {start:.3f} {time.monotonic():.3f} "
                      f"{_cpu_s() - cpu:.3f} {item.nodeid}\n")


def pytest_sessionstart(session: pytest.Session) -> None:
    """With ``ROBOT_AGENT_TEST_TIMELINE``: the run's start (``main``/a worker ``<session>`` line), so the
    time before the first test (workers starting, collecting) shows."""
    path = _timeline()
    if path:
        now = time.monotonic()
        with open(path, "a", encoding="utf-8") as out:
            out.write(f"{os.environ.get('PYTEST_XDIST_WORKER', 'main')} {now:.3f} {now:.3f} 0.000 <session>\n")
