"""The device thread (agent/devices/worker.py) under its three users, on emulated devices behind
the real drivers: the motor controller (agent/devices/motorio.py) on a RoboClaw emulator's pty,
an I2C bus (agent/devices/i2cbus.py) with a PCA9685 emulator, a camera (agent/video/capture.py)
on the test pattern.

What is checked: a lost device is reopened on the thread that serves it (no reopen thread), and
what was posted meanwhile reaches the device once it is back (latest wins; a servo chip gets
every channel again); an idle thread does
not wake (no periodic timeout of its own) while another thread polls, and a post or a request
wakes it at once. Nothing here sleeps: every wait is for a condition.
"""

from __future__ import annotations

import threading

import pytest

from agent.config.drivers import CameraConfig, Mpu6050Config, Pca9685Config, RoboclawConfig
from agent.devices.build import Buses, build_driver
from agent.devices.i2cbus import I2cBusIO
from agent.devices.motorio import MotorIO
from agent.devices.supervisor import Supervised
from agent.devices.worker import DeviceWorker, Poll
from agent.video import VideoHub
from drivers.camera import Camera
from drivers.emulators.camera import PatternCapture
from drivers.emulators.i2c import FakeSMBus
from drivers.emulators.mpu6050 import Mpu6050Chip
from drivers.emulators.pca9685 import Pca9685Chip
from drivers.emulators.roboclaw import RoboclawEmulator
from drivers.emulators.tank import TankPhysics
from drivers.transport import Openers
from tests.conftest import wait_for

SETTLE_S = 5.0
#: Polls a ticking thread makes while the idle one is watched (a 10 ms poll: about 0.2 s).
TICKS = 20


def ticker(closing: list) -> list[int]:
    """A thread polling every 10 ms; the returned list counts its polls (the clock of the idle checks)."""
    count = [0]
    worker = DeviceWorker("ticker", [], polls=[Poll(lambda: count.__setitem__(0, count[0] + 1), 0.01)])
    closing.append(worker)
    worker.start()
    return count


def servo_bus(closing: list) -> tuple[FakeSMBus, Pca9685Chip, Supervised, I2cBusIO]:
    cfg = Pca9685Config(kind="pca9685", bus="fake://")
    chip = Pca9685Chip.from_config(cfg, TankPhysics(auto_step=False))
    bus = FakeSMBus({cfg.address: chip})
    openers = Openers()
    openers.register("i2c", "fake", lambda url: bus)
    buses = Buses(openers)
    servo = Supervised("servo", lambda: build_driver("servo", cfg, buses), backoff_s=0.02, backoff_max_s=0.05)
    assert servo.try_open()
    io = I2cBusIO("fake", imu=None, imu_rate_hz=100.0, power=None, power_rate_hz=10.0, servo=servo)
    closing.extend([servo, io])
    return bus, chip, servo, io


async def test_a_lost_motor_controller_is_reopened_on_its_own_thread_and_takes_the_latest_duty(closing, tmp_path):
    emu = RoboclawEmulator(TankPhysics(auto_step=False), link=str(tmp_path / "ttyRC"))
    closing.append(emu)
    emu.start()
    cfg = RoboclawConfig(kind="roboclaw", port=emu.port, reply_timeout_s=0.05, serial_timeout_s=5.0)
    opened_on: list[str] = []

    def on_open(drv) -> None:
        opened_on.append(threading.current_thread().name)
        drv.stop()

    motor = Supervised("motor", lambda: build_driver("motor", cfg, Buses()), on_open=on_open,
                       backoff_s=0.02, backoff_max_s=0.05)
    assert motor.try_open()
    io = MotorIO(motor, feedback_hz=50.0)
    closing.extend([motor, io])
    io.start()
    assert await wait_for(lambda: io.feedback is not None, SETTLE_S)
    emu.unplug()
    assert await wait_for(lambda: motor.state == "lost", SETTLE_S)
    assert io.post(0.1, 0.1) is False                    # lost: not acknowledged, kept as the latest
    io.post(0.3, -0.3)
    emu.replug()
    assert await wait_for(lambda: motor.state == "ok", SETTLE_S)
    assert opened_on[1:] and set(opened_on[1:]) == {"motor"}    # reopened by the motor's own thread
    assert not [t for t in threading.enumerate() if t.name == "reopen"]
    io.post(0.3, -0.3)
    assert io.settle(SETTLE_S)
    assert await wait_for(lambda: emu.motor_duty == pytest.approx([0.3, -0.3], abs=1e-4), SETTLE_S)


async def test_servo_pulses_posted_while_the_chip_is_gone_are_written_when_its_thread_reopens_it(closing):
    bus, chip, servo, io = servo_bus(closing)
    io.start()
    io.set_servo_pulses({0: 1500.0, 1: 1200.0, 2: 1300.0})
    assert io.worker.settle(SETTLE_S)
    assert chip.pulse_us(0) == pytest.approx(1500.0, abs=5) and chip.pulse_us(1) == pytest.approx(1200.0, abs=5)
    bus.remove(chip_address := 0x40)
    for us in (1600.0, 1650.0, 1700.0):                  # each write NACKed: lost after the third
        io.set_servo_pulses({0: us})
        assert io.worker.settle(SETTLE_S)
    assert servo.state == "lost"
    io.set_servo_pulses({0: 1750.0, 1: None})            # the newest values while it is gone
    assert io.worker.settle(SETTLE_S)
    bus.restore(chip_address, power_cycle=True)          # comes back with power-on registers
    assert await wait_for(lambda: servo.state == "ok", SETTLE_S)
    assert await wait_for(lambda: chip.pulse_us(0) == pytest.approx(1750.0, abs=5), SETTLE_S)
    assert chip.pulse_us(1) == 0.0                       # released, as posted last
    assert chip.pulse_us(2) == pytest.approx(1300.0, abs=5)   # not posted again: rewritten after the power cycle


async def test_a_bus_reads_its_imu_at_the_rest_period_while_resting_and_at_once_when_hurried(closing):
    cfg = Mpu6050Config(kind="mpu6050", bus="fake://")
    bus = FakeSMBus({cfg.address: Mpu6050Chip.from_config(cfg, TankPhysics(auto_step=False))})
    openers = Openers()
    openers.register("i2c", "fake", lambda url: bus)
    buses = Buses(openers)
    imu = Supervised("imu", lambda: build_driver("imu", cfg, buses))
    assert imu.try_open()
    now, resting = [0.0], [False]
    io = I2cBusIO("fake", imu=imu, imu_rate_hz=100.0, power=None, power_rate_hz=10.0, servo=None,
                  resting=lambda: resting[0], clock=lambda: now[0])
    closing.extend([imu, io])
    poll = io.worker.polls[0]

    async def read(n: int) -> float:
        """Wait for the bus's ``n``-th IMU read; the period until its next."""
        assert await wait_for(lambda: io.reads == n and poll.due is not None and poll.due > now[0], 5)
        return poll.due - now[0]

    io.start()
    assert await read(1) == pytest.approx(imu.driver.poll_period_s)          # 4 samples: 40 ms
    resting[0] = True
    now[0] += 0.04
    io.worker.wake()
    assert await read(2) == pytest.approx(imu.driver.rest_poll_period_s)     # 8 samples: 80 ms
    resting[0] = False                       # the rest ended (the motor's thread): read at once
    io.hurry()
    assert await read(3) == pytest.approx(imu.driver.poll_period_s)
    assert now[0] == 0.04                    # the clock did not move: the hurry made that read


async def test_an_idle_bus_thread_sleeps_until_a_value_is_posted(closing):
    _, chip, _, io = servo_bus(closing)
    io.start()
    io.set_servo_pulses({0: 1500.0})
    assert io.worker.settle(SETTLE_S)
    woken = io.worker.wakeups
    ticks = ticker(closing)
    assert await wait_for(lambda: ticks[0] >= TICKS, SETTLE_S)
    assert io.worker.wakeups == woken                    # no poll, no timeout: it never woke
    io.set_servo_pulses({0: 1800.0})
    assert await wait_for(lambda: chip.pulse_us(0) == pytest.approx(1800.0, abs=5), SETTLE_S)
    assert io.worker.wakeups == woken + 1                # one post, one wake-up


async def test_a_polling_thread_wakes_only_for_its_polls(closing, tmp_path):
    emu = RoboclawEmulator(TankPhysics(auto_step=False))
    closing.append(emu)
    emu.start()
    cfg = RoboclawConfig(kind="roboclaw", port=emu.port, reply_timeout_s=0.5, serial_timeout_s=5.0)
    motor = Supervised("motor", lambda: build_driver("motor", cfg, Buses()), on_open=lambda d: d.stop())
    assert motor.try_open()
    reads: list[object] = []
    io = MotorIO(motor, feedback_hz=100.0, on_feedback=reads.append)
    closing.extend([motor, io])
    io.start()
    assert await wait_for(lambda: len(reads) >= TICKS, SETTLE_S)
    woken, done = io.worker.wakeups, len(reads)
    assert woken <= done + 1                             # a wake-up per feedback set, none of its own


async def test_an_unwatched_camera_thread_sleeps_until_its_probe_and_a_request_wakes_it(closing):
    cfg = CameraConfig(id="front", source="sim://pattern", width=80, height=60, stale_s=1.0)
    hub = VideoHub([cfg], camera_factory=lambda c: Camera(c, capture_factory=lambda target, api: PatternCapture(
        80, 60, paced=False)), probe_period_s=60.0, idle_after_s=0.05)
    closing.append(hub)
    hub.start()
    assert await wait_for(lambda: hub.latest("front") is not None, SETTLE_S)
    run = hub.capture.feeds["front"].run
    assert await wait_for(lambda: hub.capture.feeds["front"].released, SETTLE_S)   # idle: probing only
    woken, seq = run.worker.wakeups, hub.latest("front").seq
    ticks = ticker(closing)
    assert await wait_for(lambda: ticks[0] >= TICKS, SETTLE_S)
    assert run.worker.wakeups == woken and hub.latest("front").seq == seq    # no frame, no wake-up
    frame = await hub.next_frame("front", seq, timeout_s=SETTLE_S)           # a request: read at once
    assert frame is not None and frame.seq > seq
