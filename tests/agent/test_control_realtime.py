"""Real-time behaviour of the control loop on the simulated tank (issue 10).

Commands wake the loop; the motor's own thread takes the newest duty (latest
wins) and keeps a silent controller's timeouts off the control thread; closing
with no controller to confirm says so once and does not wait. Every bound here
is loose (hundreds of ms against a tick that costs well under 1 ms): the timing
figures themselves are printed by scripts/bench_watchdog.py and bench_latency.py.
"""

from __future__ import annotations

import contextlib
import logging
import time

import pytest

from agent.config import AgentConfig
from agent.errors import CommandDeclined
from agent.control import ControlLoop
from agent.devices.hardware import Hardware
from agent.commands import BaseVelocity
from agent.devices.simtank import SimTank
from tests.conftest import deep_merge, sim_config, wait_until

#: A tick (post the duty, read what the devices' threads published) blocked longer than this is a bug.
TICK_BOUND_S = 0.2


def _config(**overrides) -> AgentConfig:
    base = sim_config()
    base["drivers"].pop("cameras")
    return AgentConfig.model_validate(deep_merge(base, overrides))


@pytest.fixture
def tank():
    made = []

    def make(**overrides) -> tuple[ControlLoop, Hardware, SimTank]:
        cfg = _config(**overrides)
        sim = SimTank(cfg)
        hw = Hardware.from_config(cfg, sim)
        hw.start()
        loop = ControlLoop(cfg, hw)
        made.append((loop, hw, sim))
        return loop, hw, sim

    yield make
    for loop, hw, sim in made:
        loop.close(timeout_s=0.5)
        hw.close()
        sim.close()




def test_a_new_velocity_value_wakes_the_loop_and_a_repeat_does_not(tank):
    loop, hw, sim = tank(control={"rate_hz": 20})
    loop.start()
    assert wait_until(lambda: hw.motor.state == "ok" and loop.tick_stats().ticks > 2)
    loop.submit("sim2bot", BaseVelocity(0.2, 0.0))
    assert wait_until(lambda: loop.tick_stats().woken_ticks == 1)
    for _ in range(5):                                   # the same value again: only the watchdog refresh
        loop.submit("sim2bot", BaseVelocity(0.2, 0.0))
    time.sleep(0.1)
    assert loop.tick_stats().woken_ticks == 1
    loop.submit("sim2bot", BaseVelocity(0.3, 0.0))
    assert wait_until(lambda: loop.tick_stats().woken_ticks == 2)
    assert wait_until(lambda: sim.physics.duty[0] > 0.0)


def test_the_same_value_after_its_command_timed_out_wakes_the_loop(tank):
    """A source that resends the value it sent before its claim expired (or was stopped) is a new
    command: it wakes the loop instead of waiting for the next slot (woken_ticks counts only wake-ups)."""
    loop, hw, sim = tank(control={"rate_hz": 20}, watchdog={"velocity_timeout_s": 0.1})
    loop.start()
    assert wait_until(lambda: hw.motor.state == "ok" and loop.tick_stats().ticks > 1)
    loop.submit("sim2bot", BaseVelocity(0.2, 0.0))
    assert wait_until(lambda: loop.tick_stats().woken_ticks == 1)
    # the watchdog zeroed it (its deadline tick); not the duty before the first write reached the motor
    assert wait_until(lambda: sim.physics.duty[0] == 0.0 and loop.snapshot().watchdog == "expired")
    time.sleep(0.05)
    woken = loop.tick_stats().woken_ticks
    loop.submit("sim2bot", BaseVelocity(0.2, 0.0))        # the same value, its old claim long expired
    assert wait_until(lambda: loop.tick_stats().woken_ticks == woken + 1)    # woken_ticks counts wake-ups only
    assert wait_until(lambda: sim.physics.duty[0] > 0.0)


def test_the_motor_thread_writes_the_latest_duty_and_drops_the_older_ones(tank):
    _, hw, sim = tank()
    assert wait_until(lambda: hw.motor.state == "ok")
    worker = hw.motor_io
    writes = worker.writes
    sim.motor_emulator.drop_next_reply()                 # the next write waits out a reply timeout and retries
    posts = [(i / 400, -i / 400) for i in range(1, 201)]
    for left, right in posts:
        hw.set_duty(left, right)                         # never blocks, whatever the line is doing
    assert hw.settle_motor(5.0) is True
    assert sim.physics.duty == pytest.approx(list(posts[-1]), abs=1e-3)
    assert worker.writes - writes < len(posts) / 2       # superseded duties were never sent


def test_a_silent_controller_never_blocks_a_tick_and_is_declared_lost(tank, caplog):
    loop, hw, sim = tank()
    loop.start()
    assert wait_until(lambda: hw.motor.state == "ok" and loop.tick_stats().ticks > 5)
    loop.submit("artex", BaseVelocity(0.3, 0.0))
    assert wait_until(lambda: sim.physics.duty[0] > 0.0)
    sim.motor_emulator.drop_next_reply(10**6)            # alive on the wire, never answers
    seq = loop.snapshot().seq
    for _ in range(200):
        with contextlib.suppress(CommandDeclined):       # refused once the failed write latched it out
            loop.submit("artex", BaseVelocity(0.3, 0.0))
        if hw.motor.state == "lost":
            break
        time.sleep(0.02)
    assert hw.motor.state == "lost"
    lost_at = loop.snapshot().seq
    assert wait_until(lambda: loop.snapshot().seq > lost_at + 2)      # the loop kept ticking through it all
    assert loop.tick_stats().max_tick_s < TICK_BOUND_S
    assert any(f.startswith("motor: lost") for f in loop.snapshot().faults)
    assert loop.snapshot().seq - seq > 10
    with caplog.at_level(logging.INFO, logger="agent.control"):
        started = time.monotonic()
        assert loop.close(timeout_s=2.0) is False
        assert time.monotonic() - started < 1.5          # no wait for a confirmation that cannot come
    assert "no motor controller to stop" in caplog.text and "NOT confirmed" not in caplog.text


def test_imu_calibration_does_not_starve_the_other_devices_on_its_bus(tank):
    _, hw, _ = tank(drivers={"power": {"rate_hz": 10.0}})     # the shipped 2 Hz gives 2 samples in 1 s
    assert wait_until(lambda: hw.latest_power() is not None and hw.latest_imu() is not None)
    fut = hw.calibrate_imu(100)                          # ~1 s of gyro reads at the chip's rate
    power = []
    while not fut.done():
        sample = hw.latest_power()
        if sample is not None and (not power or sample is not power[-1]):
            power.append(sample)
        time.sleep(0.005)
    assert fut.result(timeout=0) is not None            # a bias, rad/s
    assert len(power) >= 3                              # the power monitor kept its 10 Hz meanwhile
