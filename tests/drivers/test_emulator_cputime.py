"""The in-process emulators count their own thread CPU time (drivers/emulators/cputime.py), so
scripts/bench_side.py can show it apart from the agent thread that runs them inline."""

from __future__ import annotations

import time

from drivers.emulators.camera import PatternCapture
from drivers.emulators.cputime import I2C, PATTERN, TOTALS, totals
from drivers.emulators.i2c import FakeSMBus
from drivers.emulators.mpu6050 import Mpu6050Chip
from drivers.emulators.tank import TankPhysics
from drivers.emulators.wire import i2c_transfer_s

MPU = 0x68
ACCEL_XOUT_H = 0x3B


def test_i2c_emulation_time_counts_transactions_and_not_the_wire_time():
    clock_hz = 2000.0       # slow: each 14-byte read holds the bus ~75 ms
    bus = FakeSMBus({MPU: Mpu6050Chip(TankPhysics())}, clock_hz=clock_hz)
    before_total, cpu0, calls0 = totals()[I2C], bus.emulation.cpu_s, bus.emulation.calls   # attaching was one
    wall0 = time.monotonic()
    for _ in range(4):
        assert len(bus.read_i2c_block_data(MPU, ACCEL_XOUT_H, 14)) == 14
    bus.write_byte_data(MPU, 0x6B, 0x00)
    wall = time.monotonic() - wall0
    wire = 4 * i2c_transfer_s(14, clock_hz, read=True) + i2c_transfer_s(1, clock_hz, read=False)
    assert wall >= wire * 0.9                       # the bus did hold the wire time
    assert bus.emulation.calls - calls0 == 5
    spent = bus.emulation.cpu_s - cpu0
    assert spent > 0.0
    assert spent < wire / 4                         # waiting on the wire is not emulation CPU
    assert totals()[I2C] - before_total >= spent * 0.999
    assert TOTALS[I2C].cpu_s == totals()[I2C]


def test_a_failed_transaction_is_counted_too():
    bus = FakeSMBus({MPU: Mpu6050Chip(TankPhysics())})
    calls0 = bus.emulation.calls
    try:
        bus.read_byte_data(0x20, 0)         # nobody there: NACK
    except OSError:
        pass
    assert bus.emulation.calls - calls0 == 1


def test_pattern_time_counts_drawing_and_not_the_pacing_wait():
    cap = PatternCapture(320, 240, fps=20.0)
    before_total = totals()[PATTERN]
    wall0 = time.monotonic()
    for _ in range(4):
        ok, frame = cap.read()
        assert ok and frame.shape == (240, 320, 3)
    wall = time.monotonic() - wall0
    assert wall >= 3 / 20.0 * 0.9               # paced: three waits of a frame period
    assert cap.emulation.calls == 4
    assert 0.0 < cap.emulation.cpu_s < wall / 2
    assert totals()[PATTERN] - before_total >= cap.emulation.cpu_s * 0.999
    cap.release()


def test_gpio_emulation_time_counts_reads_and_waits_but_not_the_waiting():
    from datetime import timedelta

    import gpiod
    from gpiod.line import Bias, Direction, Edge

    from drivers.emulators.cputime import GPIO
    from drivers.emulators.gpio import GpioChipEmulator

    emu = GpioChipEmulator(17)
    chip = emu.open_chip()
    request = chip.request_lines({17: gpiod.LineSettings(direction=Direction.INPUT, bias=Bias.PULL_UP,
                                                         edge_detection=Edge.BOTH)}, consumer="test")
    before_total, cpu0, calls0 = totals()[GPIO], emu.emulation.cpu_s, emu.emulation.calls
    wall0 = time.monotonic()
    for _ in range(3):
        request.get_value(17)
        assert request.wait_edge_events(timedelta(seconds=0.05)) is False   # no edge: waits it out
    wall = time.monotonic() - wall0
    spent = emu.emulation.cpu_s - cpu0
    assert emu.emulation.calls - calls0 == 6
    assert 0.0 < spent < wall / 4                  # three 50 ms waits are not CPU time
    assert totals()[GPIO] - before_total >= spent * 0.999
    request.release()
    chip.close()
