"""Wire time of the emulators (drivers/emulators/wire.py) and the simulated tank's sensor noise.

The pacing arithmetic is checked on given times (no clock luck); the paced pty
and I2C bus are checked against loose lower bounds only: wire time can only
make a transaction slower, never faster.
"""

from __future__ import annotations

import statistics
import time

import pytest
from smbus2 import i2c_msg

from agent.config.drivers import Ina219Config, Mpu6050Config, RoboclawConfig
from drivers.emulators.i2c import FakeSMBus, ManualClock
from drivers.emulators.ina2xx import Ina219Chip
from drivers.emulators.mpu6050 import Mpu6050Chip
from drivers.emulators.roboclaw import REPLY_LATENCY_S, RoboclawEmulator
from drivers.emulators.tank import TankPhysics
from drivers.emulators.wire import SerialWire, i2c_transfer_s
from drivers.ina2xx import Ina219
from drivers.mpu6050 import Mpu6050
from drivers.roboclaw import Roboclaw
from drivers.serialport import transfer_s


def test_serial_wire_holds_requests_and_replies_for_their_wire_time():
    wire = SerialWire(9600, reply_latency_s=0.001)       # 1.0417 ms a byte
    wire.received(b"\x80\x10", now=10.0)
    wire.received(b"\x80\x11", now=10.001)               # queued behind the first: the line is busy
    assert not wire.due(10.002) and wire.holding()
    assert wire.due(10.0021) and wire.next_due() == pytest.approx(10.0 + 2 / 960)
    first, second = wire.requests()                      # handed over at once, each with its arrival time
    assert first == (pytest.approx(10.0 + 2 / 960), b"\x80\x10")
    assert second == (pytest.approx(10.0 + 4 / 960), b"\x80\x11")
    assert not wire.holding() and wire.next_due() is None
    wire.reply(b"\x00" * 7, request_done=first[0])
    due = first[0] + 0.001 + 7 / 960
    assert wire.next_due() == pytest.approx(due)
    assert wire.sent(due - 1e-6) == [] and wire.sent(due) == [b"\x00" * 7]
    assert SerialWire(None).next_due() is None


def test_i2c_transaction_time_counts_address_register_data_and_frames():
    # a 14-byte burst read: (addr + reg + addr + 14) * 9 clocks + 2 frames * 2 clocks = 157 clocks
    assert i2c_transfer_s(14, 100_000, read=True) == pytest.approx(157e-5)
    assert i2c_transfer_s(1, 400_000, read=False) == pytest.approx((3 * 9 + 2) / 400_000)


def test_a_paced_roboclaw_exchange_takes_at_least_its_wire_time():
    cfg = RoboclawConfig(kind="roboclaw", port="unused", baud=9600)
    with RoboclawEmulator.from_config(cfg, TankPhysics()) as emu:
        drv = Roboclaw(cfg.model_copy(update={"port": emu.port}))
        drv.open()
        try:
            started = time.monotonic()
            drv.set_duty(0.2, 0.2)                       # 8-byte packet, 1-byte ack
            elapsed = time.monotonic() - started
        finally:
            drv.close()
    assert elapsed >= transfer_s(9, 9600) + REPLY_LATENCY_S


def test_a_paced_i2c_burst_holds_the_bus_for_its_clock_time():
    bus = FakeSMBus({0x68: Mpu6050Chip()}, clock_hz=100_000)
    started = time.monotonic()
    for _ in range(10):
        bus.read_i2c_block_data(0x68, 0x3B, 14)
    assert time.monotonic() - started >= 10 * i2c_transfer_s(14, 100_000, read=True)


def test_a_paced_combined_fifo_read_holds_the_bus_for_its_clock_time():
    bus = FakeSMBus({0x68: Mpu6050Chip()}, clock_hz=100_000)
    started = time.monotonic()
    for _ in range(5):
        bus.i2c_rdwr(i2c_msg.write(0x68, [0x74]), i2c_msg.read(0x68, 56))
    assert time.monotonic() - started >= 5 * i2c_transfer_s(56, 100_000, read=True)


def test_the_simulated_imu_at_rest_is_never_perfectly_still():
    chip = Mpu6050Chip.from_config(Mpu6050Config(kind="mpu6050", bus="sim://"), TankPhysics())
    imu = Mpu6050(Mpu6050Config(kind="mpu6050", bus="sim://"), FakeSMBus({0x68: chip}))
    imu.open()
    samples = [imu.read() for _ in range(200)]
    gz = [s.gyro_radps[2] for s in samples]
    az = [s.accel_mps2[2] for s in samples]
    assert statistics.pstdev(gz) > 1e-4 and statistics.pstdev(az) > 1e-3       # noise
    assert statistics.pstdev(gz) < 0.01 and statistics.pstdev(az) < 0.2        # datasheet-sized
    assert abs(statistics.fmean(gz)) > 0.003                                   # a zero-rate offset


def test_the_simulated_power_monitor_is_noisy():
    clock = ManualClock()
    cfg = Ina219Config(kind="ina219", bus="sim://", shunt_ohm=0.1, max_current_a=3.2)
    chip = Ina219Chip.from_config(cfg, None, clock=clock)
    dev = Ina219(cfg, FakeSMBus({cfg.address: chip}), clock=clock, sleep=clock.sleep)
    dev.open()
    readings = []
    for _ in range(20):
        clock.sleep(0.01)                                # a fresh conversion each time
        s = dev.read()
        readings.append((s.current_a, s.voltage_v))
    assert len(set(readings)) > 1                        # fixed 0.5 A / 12 V in, never the same reading out


def test_a_duty_offered_during_a_feedback_read_goes_out_between_its_transactions():
    cfg = RoboclawConfig(kind="roboclaw", port="unused")
    offers = [None, None, (0.5, -0.25)]                  # the duty turns up before the third transaction

    def between():
        return offers.pop(0) if offers else None

    with RoboclawEmulator.from_config(cfg, TankPhysics()) as emu:
        drv = Roboclaw(cfg.model_copy(update={"port": emu.port}))
        drv.open()
        try:
            emu.clear_received()
            fb = drv.read_feedback(between)
            applied = list(emu.motor_duty)                 # before close() commands zero
        finally:
            drv.close()
        commands = [packet[1] for packet in emu.received()]
    assert fb.left_counts is not None
    assert commands[:4] == [78, 79, 34, 24]              # both encoders, both speeds, the duty (cmd 34), battery...
    assert applied == pytest.approx([0.5, -0.25], abs=1e-3)   # M1 = left by default
