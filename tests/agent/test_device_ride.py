"""Device threads that do two jobs in one wake-up, against the emulators behind the real drivers.

The motor's thread (agent/devices/motorio.py, ``MotorIO._ride``): the rewrite of an unchanged duty (a
refresh moving, a rest tick's zero at rest) takes a feedback set due soon along, in the same wake-up;
one that ran just before it moves the next set to a period after it; a duty change moves nothing.
The I2C bus's thread (agent/devices/i2cbus.py): the power monitor's read, due within its allowance,
runs along with the IMU's read, its grid kept.

Deterministic: the workers run on injected clocks the test moves; a negative ("nothing rode along")
is read after the worker's thread has ended (``close`` joins it), so nothing it could still do is missed.
"""

from __future__ import annotations

import pytest

from agent.config.drivers import Ina219Config, Mpu6050Config, RoboclawConfig
from agent.devices.build import Buses, build_driver
from agent.devices.i2cbus import ALONG_MAX_S, I2cBusIO
from agent.devices.motorio import DUTY_REFRESH_S, REST_PERIOD_S, RIDE_LAG_S, RIDE_SHARE, RIDE_TOLERANCE_S
from agent.devices.motorio import MotorIO
from agent.devices.supervisor import Supervised
from drivers import roboclaw as rc
from drivers.emulators.i2c import FakeSMBus
from drivers.emulators.ina2xx import Ina219Chip
from drivers.emulators.mpu6050 import Mpu6050Chip
from drivers.emulators.roboclaw import RoboclawEmulator
from drivers.emulators.tank import TankPhysics
from drivers.transport import Openers
from tests.agent.test_motorio import (  # noqa: F401 - rig is a fixture
    ENCODERS, FAST_S, REST_S, SETTLE_S, SPEEDS, Stepper, duty_packet, rest, rig,
)
from tests.conftest import wait_until


def moving(rig):
    """A worker at the full rate on a Stepper clock: its first set read, 0.3 written at 0, the set
    due at 0.05 read; returns (emulator, worker, clock)."""
    emu, worker = rig(feedback_hz=1 / FAST_S, clock=(clock := Stepper(None)))
    clock.emu = emu
    worker.start()
    assert emu.wait_for(lambda: worker.feedback is not None, SETTLE_S)
    worker.post(0.3, 0.3)
    assert worker.settle(SETTLE_S)
    clock.read_at(worker, FAST_S)
    return emu, worker, clock


def sent_after(emu, packet: bytes) -> list[bytes]:
    """What the emulator received after the last ``packet``."""
    got = emu.received()
    i = len(got) - 1 - got[::-1].index(packet)
    return got[i + 1:]


def test_a_refresh_takes_the_feedback_set_due_soon_along(rig):
    emu, worker, clock = moving(rig)
    poll = worker.worker.polls[0]
    assert poll.due == pytest.approx(2 * FAST_S)
    clock.now = poll.due - FAST_S * RIDE_SHARE / 8             # a tick: the refresh is due, the set nearly
    assert clock.now >= DUTY_REFRESH_S - 0.005
    worker.post(0.3, 0.3)
    assert worker.settle(SETTLE_S) and worker.writes == 2
    # the set ran at once, without the clock reaching its due time, and the next is a period (and
    # the lag) after it: the next refresh, two sets on, comes just before that
    assert wait_until(lambda: poll.due == pytest.approx(clock.now + FAST_S + RIDE_LAG_S), SETTLE_S, 0.001)
    worker.close()
    assert sent_after(emu, duty_packet(0.3, 0.3))[:2] == [ENCODERS, SPEEDS]


def test_a_refresh_just_after_a_set_moves_the_next_set_a_period_after_it(rig):
    emu, worker, clock = moving(rig)
    poll = worker.worker.polls[0]
    clock.read_at(worker, 2 * FAST_S)                   # the set at 0.1 ran on its own
    clock.now += RIDE_TOLERANCE_S * 0.8                 # the refresh's tick comes a little after it
    worker.post(0.3, 0.3)
    assert worker.settle(SETTLE_S) and worker.writes == 2
    worker.close()
    assert poll.due == pytest.approx(clock.now + FAST_S + RIDE_LAG_S)   # not 0.15: the next refresh takes it along
    assert sent_after(emu, duty_packet(0.3, 0.3)) == []                 # no set of its own now


def test_a_duty_change_moves_no_feedback_set(rig):
    emu, worker, clock = moving(rig)
    poll = worker.worker.polls[0]
    due = poll.due
    clock.now = due - FAST_S * RIDE_SHARE / 2
    worker.post(0.4, 0.4)                               # a change: written at once, as always
    assert worker.settle(SETTLE_S) and worker.writes == 2
    worker.close()
    assert poll.due == due
    assert sent_after(emu, duty_packet(0.4, 0.4)) == []


def test_a_rest_ticks_rewrite_takes_the_set_along_and_the_tank_stays_at_rest(rig):
    emu, worker, clock = rest(rig)
    poll = worker.worker.polls[0]
    clock.read_at(worker, clock.now + REST_S)
    assert worker.resting and poll.due == pytest.approx(clock.now + REST_S)
    set_at = clock.now
    # a rest tick half a rest period on: its rewrite moves nothing (the last write, the zero at 0, is
    # no whole number of rest periods before it), then the set due runs on its own
    clock.now = set_at + REST_S * RIDE_SHARE + 0.001
    assert abs(clock.now / REST_S - round(clock.now / REST_S)) * REST_S > RIDE_TOLERANCE_S
    written = worker.writes
    worker.post(0.0, 0.0)
    assert worker.settle(SETTLE_S) and worker.writes == written + 1
    clock.read_at(worker, set_at + REST_S)
    assert poll.due == pytest.approx(set_at + 2 * REST_S)
    clock.now = set_at + REST_S * RIDE_SHARE + 0.001 + REST_S   # the next rest tick: a rest period on
    worker.post(0.0, 0.0)
    assert worker.settle(SETTLE_S) and worker.writes == written + 2
    # a rest period and the lag after it, never more than REST_PERIOD_S (this rest period's)
    assert REST_S == REST_PERIOD_S
    assert wait_until(lambda: poll.due == pytest.approx(clock.now + REST_S), SETTLE_S, 0.001)
    worker.close()
    assert worker.resting
    assert sent_after(emu, duty_packet(0.0, 0.0))[:2] == [ENCODERS, SPEEDS]


def power_bus(closing: list) -> tuple[I2cBusIO, list[float]]:
    imu_cfg = Mpu6050Config(kind="mpu6050", bus="fake://")
    power_cfg = Ina219Config(kind="ina219", bus="fake://", shunt_ohm=0.1, max_current_a=3.2)
    physics = TankPhysics(auto_step=False)
    bus = FakeSMBus({imu_cfg.address: Mpu6050Chip.from_config(imu_cfg, physics),
                     power_cfg.address: Ina219Chip.from_config(power_cfg, physics)})
    openers = Openers()
    openers.register("i2c", "fake", lambda url: bus)
    buses = Buses(openers)
    imu = Supervised("imu", lambda: build_driver("imu", imu_cfg, buses))
    power = Supervised("power", lambda: build_driver("power", power_cfg, buses))
    assert imu.try_open() and power.try_open()
    now = [0.0]
    io = I2cBusIO("fake", imu=imu, imu_rate_hz=100.0, power=power, power_rate_hz=2.0, servo=None,
                  clock=lambda: now[0])
    closing.extend([imu, power, io])
    return io, now


def test_the_power_read_runs_along_with_the_imus_read_and_keeps_its_grid(closing):
    io, now = power_bus(closing)
    imu_poll, power_poll = io.worker.polls[:2]
    io.start()
    assert wait_until(lambda: io.reads == 2 and power_poll.due == pytest.approx(0.5), SETTLE_S, 0.001)
    first = io.latest_power
    now[0] = 0.5 - ALONG_MAX_S / 2                      # an IMU read is due; the power read in 50 ms
    io.worker.wake()
    assert wait_until(lambda: power_poll.due == pytest.approx(1.0), SETTLE_S, 0.001)
    assert io.latest_power is not first and now[0] < 0.5   # read early, with the IMU's wake-up
    assert imu_poll.due > now[0]
    now[0] = 1.0 - 2 * ALONG_MAX_S                      # further off than its allowance: not read
    io.worker.wake()
    assert wait_until(lambda: imu_poll.due > now[0], SETTLE_S, 0.001)
    io.close()
    assert power_poll.due == pytest.approx(1.0)


def test_rewrites_that_come_at_another_period_than_the_sets_move_no_set(closing):
    """A refresh every 0.08 s (a 0.375 s controller timeout: 0.075 s, on 20 ms ticks) against sets
    every 0.05 s: taking sets along would make them more frequent, moving them rarer; neither."""
    emu = RoboclawEmulator(TankPhysics(auto_step=False), record=256)
    closing.append(emu)
    emu.start()
    cfg = RoboclawConfig(kind="roboclaw", port=emu.port, reply_timeout_s=0.5, serial_timeout_s=5.0)
    motor = Supervised("motor", lambda: rc.Roboclaw(cfg), on_open=lambda d: d.stop())
    assert motor.try_open()
    clock = Stepper(emu)
    worker = MotorIO(motor, feedback_hz=1 / FAST_S, refresh_s=0.075, clock=clock)
    closing.extend([motor, worker])
    worker.start()
    assert emu.wait_for(lambda: worker.feedback is not None, SETTLE_S)
    worker.post(0.3, 0.3)
    assert worker.settle(SETTLE_S)
    clock.read_at(worker, FAST_S)
    poll = worker.worker.polls[0]
    clock.now = 0.08                                    # 4 ticks on: the refresh is due, the set in 20 ms
    assert poll.due - clock.now <= FAST_S * RIDE_SHARE
    worker.post(0.3, 0.3)
    assert worker.settle(SETTLE_S) and worker.writes == 2
    worker.close()
    assert poll.due == pytest.approx(2 * FAST_S)
    assert sent_after(emu, duty_packet(0.3, 0.3)) == []
