"""A SIGTERM during the start cuts the start short (agent.ops.service.run): it used to run to its end,
with ARTEX already taking commands, so a `forward` from the hub could drive the tank after the signal
(seen from a real process: 5 of 8 SIGTERMs 0.45-0.8 s after launch were followed by ARTEX driving
0.08-0.41 s later, the zero coming 0.36-0.68 s after the signal). The real ARTEX hub on loopback; the
stop event is what the SIGTERM handler sets."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from agent.config import AgentConfig
from agent.ops.service import run
from agent.testing.artex_hub import ArtexHub
from tests.conftest import sim_config, wait_for

pytestmark = pytest.mark.timeout(60)

#: the unit's TimeoutStopSec is 10 s; the shutdown's own bounds are 0.5 s (zero duty) + 1 s (links)
EXIT_BOUND_S = 5.0


def _messages(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records]


async def _run_until_exit(cfg: dict, stop: asyncio.Event) -> tuple[int, float]:
    t0 = time.monotonic()
    async with asyncio.timeout(30):
        code = await run(AgentConfig.model_validate(cfg), stop=stop)
    return code, time.monotonic() - t0


async def test_a_stop_while_artex_connects_during_the_start_cuts_the_start_short(caplog):
    stop = asyncio.Event()

    def on_event(kind: str, sid: str, data: object) -> None:
        if kind == "connect":            # the hub sees the robot: the agent is in the middle of its start
            stop.set()

    async with ArtexHub(on_event=on_event) as hub:
        cfg = sim_config(server="http://127.0.0.1", port=hub.port)
        with caplog.at_level(logging.INFO):
            code, took = await _run_until_exit(cfg, stop)
        assert hub.passports, "the agent never connected: the test did not stop it during its start"
        lines = _messages(caplog)
        assert code == 0 and took < EXIT_BOUND_S, (code, took)
        assert not any(" up: devices " in line for line in lines), lines          # the start did not finish
        assert any("stopping during start" in line for line in lines), lines
        assert not any("adapter" in line and "stopped unexpectedly" in line for line in lines), lines
        if any("control loop running" in line for line in lines):          # the loop ran: its zero first
            zero = next(i for i, line in enumerate(lines) if "zero duty confirmed" in line)
            assert all("disconnecting" not in line for line in lines[:zero]), lines
        assert "Traceback" not in caplog.text
        assert await wait_for(lambda: not hub.connected, 5), "the ARTEX link was left open"
    print(f"\nstop during the start (ARTEX connecting) to run()'s return: {took:.2f} s")


async def test_a_stop_before_the_start_leaves_no_link_open_and_the_loop_never_runs(caplog):
    stop = asyncio.Event()
    stop.set()                           # a SIGTERM in the first moment of run()
    async with ArtexHub() as hub:
        cfg = sim_config(server="http://127.0.0.1", port=hub.port)
        with caplog.at_level(logging.INFO):
            code, took = await _run_until_exit(cfg, stop)
        lines = _messages(caplog)
        assert code == 0 and took < EXIT_BOUND_S, (code, took)
        # ARTEX may have begun to connect (its adapter starts while the devices open); it never drives:
        assert not any("control loop running" in line for line in lines), lines
        assert await wait_for(lambda: not hub.connected, 5), "the ARTEX link was left open"
        assert any("stopping during start" in line for line in lines), lines
        assert "Traceback" not in caplog.text



async def test_a_stop_while_the_devices_open_waits_for_them_before_closing(caplog):
    """The start is cancelled while its devices still open on a thread (a motor controller that never
    answers: its open waits out its reply timeouts): the close must not run beside that thread. It
    did: the agent said "stopped", then the devices opened after the close ("imu: lost -> ok")."""
    import os

    master, slave = os.openpty()              # a serial port nobody answers on
    stop = asyncio.Event()

    def on_event(kind: str, sid: str, data: object) -> None:
        if kind == "connect":                 # ARTEX connects while the devices open
            stop.set()

    try:
        async with ArtexHub(on_event=on_event) as hub:
            cfg = sim_config(server="http://127.0.0.1", port=hub.port)
            cfg["drivers"]["motor"]["port"] = os.ttyname(slave)
            with caplog.at_level(logging.INFO):
                code, took = await _run_until_exit(cfg, stop)
            assert hub.passports, "the agent never connected: the test did not stop it during its start"
    finally:
        os.close(master)
        os.close(slave)
    records = [(r.name, r.getMessage()) for r in caplog.records]
    assert code == 0 and took < EXIT_BOUND_S, (code, took)
    cut = next(i for i, (_, m) in enumerate(records) if "stopping during start" in m)
    late = [m for name, m in records[cut:] if name == "agent.devices.supervisor"]
    assert not late, f"devices changed state after the close began: {late}"
    assert any("motor: unavailable" in m for _, m in records[:cut]), records   # the open was waited out
    assert not any(" up: devices " in m for _, m in records)
