"""How often the e-stop input's thread reads its line: edge events wake it, its own reads only back them up
(drivers.estop ``edge_poll_hz``); without edge events it polls at ``poll_hz`` (docs/safety.md "E-stop input")."""

from __future__ import annotations

import pytest

from agent.devices.hardware import Hardware
from agent.devices.simtank import SimTank
from agent.commands import BaseVelocity
from tests.agent.test_control import config
from tests.conftest import running_agent, sim_config, wait_for


@pytest.mark.parametrize(("estop", "period_s"), [
    ({}, 1 / 20.0),
    ({"edge_poll_hz": 5.0}, 1 / 5.0),
    ({"edge_events": False}, 1 / 100.0),
    ({"edge_events": False, "poll_hz": 50.0, "edge_poll_hz": 5.0}, 1 / 50.0),
])
def test_the_watch_reads_at_the_rate_its_wake_up_source_needs(estop, period_s):
    cfg = config(drivers={"estop": estop})
    sim = SimTank(cfg)
    hw = Hardware.from_config(cfg, sim)
    try:
        assert hw.estop_watch is not None and hw.estop_watch.period_s == pytest.approx(period_s)
    finally:
        hw.close()
        sim.close()


async def test_an_opening_wakes_the_watch_through_its_edge_not_its_backup_read():
    """Backup reads every 10 s: the tracks still stop at once when the switch opens (the edge woke the
    thread), and the circuit closing again releases the input's e-stop after its debounce."""
    cfg = sim_config(drivers={"cameras": [], "estop": {"debounce_s": 0.1, "edge_poll_hz": 0.1}})
    async with running_agent(cfg) as agent:
        emu = agent.sim.gpio()
        agent.control.submit("console", BaseVelocity(0.5, 0.0))
        assert await wait_for(lambda: agent.physics.duty[0] > 0.05)
        emu.open_switch()
        assert await wait_for(lambda: tuple(agent.physics.duty) == (0.0, 0.0), timeout_s=5.0)
        assert agent.control.snapshot().safety.estop.by == "input"
        emu.close_switch()
        assert await wait_for(lambda: agent.control.snapshot().safety.estop is None, timeout_s=5.0)
