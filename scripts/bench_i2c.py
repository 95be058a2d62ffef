#!/usr/bin/env python3
"""I2C sensor read rates through the FakeSMBus emulators, next to the physical bus floor.

For each sensor read (MPU-6050 14-byte burst + Madgwick, INA219 bus/current/
power set, BNO055 32-byte block with the quaternion) this prints the reads/s
the real driver achieves against its emulator on a FakeSMBus (driven by the
tank physics on the real clock, as in the simulated robot), the cost per bus
transaction, and the time the same bytes need on a real bus at 100 kHz and
400 kHz. The emulator has no bus clock: its figures are Python cost only; on a
Pi the wire time below plus the kernel's per-transfer overhead applies.

Wire time per register read of n bytes: START, address+W, register,
repeated START, address+R, n data bytes, STOP = (3 + n) x 9 bit times (8 bits
+ ACK) + 3 bit times for START / repeated START / STOP.

Usage: python scripts/bench_i2c.py [--seconds 0.5]
"""

from __future__ import annotations

import argparse
import time

from agent.config.drivers import Bno055Config, Ina219Config, Mpu6050Config
from drivers.bno055 import BLOCK_LEN, Bno055
from drivers.emulators.bno055 import Bno055Chip
from drivers.emulators.i2c import FakeSMBus
from drivers.emulators.ina2xx import Ina219Chip
from drivers.emulators.mpu6050 import Mpu6050Chip
from drivers.emulators.tank import TankPhysics
from drivers.ina2xx import Ina219
from drivers.mpu6050 import BURST_LEN, Mpu6050


def wire_s(read_lengths: list[int], bus_hz: float) -> float:
    """Seconds on the wire for register reads of the given lengths at ``bus_hz``."""
    bits = sum((3 + n) * 9 + 3 for n in read_lengths)
    return bits / bus_hz


def measure(name: str, read, bus: FakeSMBus, address: int, seconds: float) -> tuple[str, int, float, float]:
    """(name, reads, s per read, s per transaction) of ``read`` run for ``seconds``."""
    read()
    before = bus.transactions[address]
    n, t0 = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - t0) < seconds:
        read()
        n += 1
    transactions = bus.transactions[address] - before
    return name, n, elapsed / n, elapsed / transactions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=0.5, help="time per measurement, s")
    args = parser.parse_args()

    physics = TankPhysics()
    bus = FakeSMBus({0x68: Mpu6050Chip(physics, gyro_noise_radps=0.001), 0x28: Bno055Chip(physics),
                     0x40: Ina219Chip(physics, shunt_ohm=0.1)})
    mpu = Mpu6050(Mpu6050Config(kind="mpu6050"), bus)
    bno = Bno055(Bno055Config(kind="bno055"), bus)
    ina = Ina219(Ina219Config(kind="ina219", rate_hz=200), bus)
    for dev in (mpu, bno, ina):
        dev.open()
    physics.set_duty(0.3, 0.5)

    rows = [
        (measure("MPU-6050 read() (burst + Madgwick)", mpu.read, bus, 0x68, args.seconds), [BURST_LEN]),
        (measure("MPU-6050 raw 14-byte burst", lambda: bus.read_i2c_block_data(0x68, 0x3B, BURST_LEN),
                 bus, 0x68, args.seconds), [BURST_LEN]),
        (measure("INA219 read() (bus, current, power)", ina.read, bus, 0x40, args.seconds), [2, 2, 2]),
        (measure("BNO055 read() (32-byte block)", bno.read, bus, 0x28, args.seconds), [BLOCK_LEN]),
        (measure("BNO055 raw quaternion (8 bytes)", lambda: bus.read_i2c_block_data(0x28, 0x20, 8),
                 bus, 0x28, args.seconds), [8]),
    ]
    print("I2C reads through FakeSMBus (emulator: no bus clock, Python cost only)")
    print(f"{'read':<38} {'reads/s':>9} {'us/read':>8} {'us/txn':>7} | {'wire 100k':>9} {'wire 400k':>9}"
          f" {'max/s 100k':>10} {'max/s 400k':>10}")
    for (name, n, per_read, per_txn), lengths in rows:
        w100, w400 = wire_s(lengths, 100e3), wire_s(lengths, 400e3)
        print(f"{name:<38} {1 / per_read:9.0f} {per_read * 1e6:8.1f} {per_txn * 1e6:7.1f} |"
              f" {w100 * 1e6:7.0f}us {w400 * 1e6:7.0f}us {1 / w100:10.0f} {1 / w400:10.0f}")
    print("wire = bytes on the bus only (start/stop, address, register, data, ACKs); "
          "the kernel's per-transfer overhead on a Pi comes on top.")


if __name__ == "__main__":
    main()
