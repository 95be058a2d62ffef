"""The shipped simulated-tank config and a running agent on it.

``sim_config(**overrides)`` returns ``config/params.json`` as a dict with every
adapter off (ARTEX ``server`` null, sim2bot and robot_msg disabled) and the recorder off; overrides
are deep-merged. ``running_agent(cfg_dict)`` is an async context manager that
validates the dict, starts :class:`agent.app.Agent` on the simulated tank and
closes it afterwards. ``wait_for`` polls a condition on the event loop.
"""

from __future__ import annotations

import asyncio
import time
import contextlib
import copy
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from agent.config import AgentConfig

__all__ = ["FIXTURES", "PARAMS", "ROOT", "deep_merge", "running_agent", "sim_config", "wait_for"]

#: the checkout (agent/ is installed editable from it)
ROOT = Path(__file__).resolve().parents[2]
PARAMS = ROOT / "config" / "params.json"
FIXTURES = ROOT / "fixtures"


def deep_merge(base: dict, extra: dict) -> dict:
    """``base`` updated recursively with ``extra`` (new dict; ``None`` values replace)."""
    out = copy.deepcopy(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def sim_config(**overrides: Any) -> dict:
    """The shipped simulated-tank params.json as a dict, adapters and the console off (no fixed
    port shared between tests), ``overrides`` deep-merged."""
    cfg = json.loads(PARAMS.read_text())
    cfg["server"] = None
    cfg["sim2bot"] = {**cfg.get("sim2bot", {}), "enabled": False}
    cfg["robot_msg"] = {**cfg.get("robot_msg", {}), "enabled": False}
    cfg["console"] = {**cfg.get("console", {}), "enabled": False}
    cfg["recorder"] = {**cfg.get("recorder", {}), "enabled": False}   # tests that record pass a tmp dir
    # the motor emulator answers from a thread of the test's own process: with parallel workers on
    # two cores it may miss a real controller's 50 ms reply timeout, and the tank stops for a fault
    # the test is not about (tests of a silent controller set their own)
    cfg["drivers"]["motor"].setdefault("reply_timeout_s", 0.2)
    return deep_merge(cfg, overrides)


@contextlib.asynccontextmanager
async def running_agent(cfg: dict | AgentConfig, *, config_path: str | None = None,
                        logs: Any = None) -> AsyncIterator[Any]:
    """Start an :class:`agent.app.Agent` on ``cfg`` (a params dict or AgentConfig); close it on exit.

    On the simulated tank (motor port ``sim://``) it first waits up to 10 s for the motor
    controller to be open: the emulator answers on real time, and on a loaded machine (parallel
    test workers) the first handshake may time out and wait for the supervisor's reopen.
    """
    from agent.app import Agent

    if isinstance(cfg, dict):
        cfg = AgentConfig.model_validate(cfg)
    async with Agent(cfg, config_path=config_path, logs=logs) as agent:
        motor = cfg.drivers.motor
        if motor is not None and motor.port.startswith("sim://"):
            await wait_for(lambda: any(d.name == "motor" and d.state == "ok"
                                       for d in agent.control.snapshot().devices), 10.0)
        yield agent


def wait_until(predicate: Callable[[], object], timeout_s: float = 5.0, period_s: float = 0.005) -> bool:
    """:func:`wait_for` for a test without an event loop (another thread's state): poll ``predicate()``
    every ``period_s`` until true or ``timeout_s``; returns the last result."""
    deadline = time.monotonic() + timeout_s
    while True:
        if predicate():
            return True
        if time.monotonic() >= deadline:
            return bool(predicate())
        time.sleep(period_s)


async def wait_for(predicate: Callable[[], object], timeout_s: float = 5.0, period_s: float = 0.02) -> bool:
    """Poll ``predicate()`` until true or ``timeout_s``; returns the last result."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        if predicate():
            return True
        if loop.time() >= deadline:
            return bool(predicate())
        await asyncio.sleep(period_s)
