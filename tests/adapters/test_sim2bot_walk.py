"""The walk of a Sim2Bot ``base_velocity`` from the WebSocket to the serial write, end to end
(docs/architecture.md, "One check per command"): the real ``sim2bot bridge`` subprocess, the real
``sim2bot.Robot`` client, the agent on its simulated tank (the real RoboClaw driver on its emulator).

NaN and infinity are refused at the edge (the agent.model constructor: they never reach the robot
port), more than 10x the maximum is refused by the edge's over-limit check at the port, 1.5x is
clamped to full duty, a normal value gives its duty; a refusal changes nothing on the wire."""

from __future__ import annotations

import logging
import math
import time

import pytest
from sim2bot import Robot

from agent.testing.running_agent import running_agent, wait_for
from agent.testing.sim2bot_bridge import Bridge, agent_params, controller

# sim2bot.Robot (the peer under test, not ours) calls a websockets API that warns.
pytestmark = pytest.mark.filterwarnings("ignore:connect\\(\\) must be used as a context manager")

#: The simulated tank (config/params.json): 1 m/s at full duty, tracks 0.30 m apart.
MAX_MPS = 1.0
MAX_RADPS = 2.0 * MAX_MPS / 0.30
#: One step of the RoboClaw's duty (cmd 34: +-32767 full scale).
STEP = 1.0 / 32767


@pytest.fixture(scope="module")
def bridge():
    with Bridge() as b:
        yield b


async def stream_until(robot: Robot, predicate, timeout_s: float, **twist) -> bool:
    """Send base_velocity every 0.1 s (inside the 0.5 s watchdog) until ``predicate()`` or the timeout."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        robot.base_velocity(**twist)
        if await wait_for(predicate, 0.1):
            return True
    return False


async def test_non_finite_and_over_ten_times_are_refused_and_nothing_is_written(bridge, caplog):
    caplog.set_level(logging.WARNING)
    async with running_agent(agent_params(bridge)) as agent, controller(bridge) as robot:
        adapter, emu = agent.adapters["sim2bot"], agent.sim.motor_emulator
        at_port: list[tuple[object, object]] = []     # what reached the robot port, and its refusal
        agent.control.on_command(lambda source, command, err: at_port.append((command, err)))
        cases = [({"vx": math.nan}, "edge"), ({"omega": math.nan}, "edge"), ({"vx": math.inf}, "edge"),
                 ({"omega": -math.inf}, "edge"),
                 ({"vx": 10.5 * MAX_MPS}, "more than 10x the maximum 1 m/s"),
                 ({"omega": -10.5 * MAX_RADPS}, "more than 10x the maximum 6.66667 rad/s")]
        for twist, where in cases:
            before, reached = adapter.status()["rejected"], len(at_port)
            robot.base_velocity(**twist)
            assert await wait_for(lambda b=before: adapter.status()["rejected"] == b + 1, 5), twist
            if where == "edge":         # refused where the wire value became a model value
                assert len(at_port) == reached, f"{twist} reached the robot port"
            else:                       # refused once, by the edge's over-limit check at the port
                (command, err), = at_port[reached:]
                assert err is not None and where in str(err), (twist, err)
        assert "sim2bot: rejected base_velocity: vx must be finite, got nan" in caplog.text
        seq = agent.control.snapshot().seq
        assert await wait_for(lambda: agent.control.snapshot().seq >= seq + 10, 5)      # ten control ticks
        snap = agent.control.snapshot()
        assert emu.motor_duty == [0.0, 0.0] and (snap.tracks.duty_left, snap.tracks.duty_right) == (0.0, 0.0)
        assert snap.active_source == "" and adapter.status()["executed"] == 0
        # no non-finite duty reached the driver's device guard (it would have logged an error)
        assert "not a finite number" not in caplog.text


async def test_over_the_limit_is_clamped_to_full_duty_and_a_normal_value_gives_its_duty(bridge, caplog):
    caplog.set_level(logging.WARNING)
    async with running_agent(agent_params(bridge)) as agent, controller(bridge) as robot:
        emu = agent.sim.motor_emulator
        # 1.5x the maximum speed: the one clamp policy scales it to the limit, full duty on the wire
        assert await stream_until(robot, lambda: emu.motor_duty == [1.0, 1.0], 5, vx=1.5 * MAX_MPS)
        snap = agent.control.snapshot()
        assert snap.tracks.cmd_left_mps == pytest.approx(MAX_MPS) and snap.tracks.duty_left == pytest.approx(1.0)
        # 1.5x the maximum yaw rate: both tracks at full duty, opposite (+omega turns left)
        assert await stream_until(robot, lambda: emu.motor_duty == [-1.0, 1.0], 5, omega=1.5 * MAX_RADPS)
        # within the limit: the duty is the value over the full-duty speed (left and right, W 0.3 m)
        vx, omega = 0.4 * MAX_MPS, 1.0
        want = ((vx - omega * 0.15) / MAX_MPS, (vx + omega * 0.15) / MAX_MPS)
        assert await stream_until(robot, lambda: emu.motor_duty == pytest.approx(want, abs=STEP), 5,
                                  vx=vx, omega=omega)
        # a refused value while driving changes nothing: the last accepted duty stays on the wire
        adapter = agent.adapters["sim2bot"]
        for bad in ({"vx": math.nan, "omega": omega}, {"vx": 10.5 * MAX_MPS, "omega": omega}):
            before, seq = adapter.status()["rejected"], agent.control.snapshot().seq
            robot.base_velocity(**bad)
            assert await wait_for(lambda b=before: adapter.status()["rejected"] == b + 1, 5), bad
            assert await wait_for(lambda s=seq: agent.control.snapshot().seq >= s + 2, 5)   # ticks after it
            assert emu.motor_duty == pytest.approx(want, abs=STEP), bad
            robot.base_velocity(vx=vx, omega=omega)
        assert "not a finite number" not in caplog.text
