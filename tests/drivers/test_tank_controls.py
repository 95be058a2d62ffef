"""The simulated tank's failsafe controls (drivers/emulators/tank.py), seen through the real drivers
on their emulators: a tilted body turns both IMUs' gravity vector, a drained battery lowers the
INA219's bus voltage, an obstacle stops the tracks and raises the motor current."""

from __future__ import annotations

import math

import pytest

from agent.config.drivers import Bno055Config, Ina219Config, Mpu6050Config
from agent.control.failsafes import tilt_deg
from drivers.bno055 import Bno055
from drivers.emulators.bno055 import Bno055Chip
from drivers.emulators.i2c import FakeSMBus, ManualClock
from drivers.emulators.ina2xx import Ina219Chip
from drivers.emulators.mpu6050 import Mpu6050Chip
from drivers.emulators.tank import TankParams, TankPhysics
from drivers.ina2xx import Ina219
from drivers.mpu6050 import Mpu6050


def rig():
    clock = ManualClock()
    physics = TankPhysics(clock=clock)
    return physics, clock


def test_tilt_turns_the_bno055_gravity_and_quaternion():
    physics, clock = rig()
    bus = FakeSMBus({0x28: Bno055Chip(physics, clock=clock)})
    imu = Bno055(Bno055Config(kind="bno055"), bus, clock=clock, sleep=clock.sleep)
    imu.open()
    physics.set_tilt(math.radians(10.0), math.radians(-30.0))
    s = imu.read()
    pitch, roll = tilt_deg(s.accel_mps2)
    assert (pitch, roll) == (pytest.approx(-30.0, abs=0.5), pytest.approx(10.0, abs=0.5))
    x, y, z, w = s.orientation_xyzw
    assert math.degrees(math.asin(2 * (w * y - z * x))) == pytest.approx(-30.0, abs=0.5)
    assert math.degrees(math.atan2(2 * (w * x + y * z), 1 - 2 * (x * x + y * y))) == pytest.approx(10.0, abs=0.5)


def test_tilt_turns_the_mpu6050_accelerometer():
    physics, clock = rig()
    bus = FakeSMBus({0x68: Mpu6050Chip(physics)})
    imu = Mpu6050(Mpu6050Config(kind="mpu6050"), bus, clock=clock, sleep=clock.sleep)
    imu.open()
    physics.set_tilt(math.radians(-50.0), 0.0)
    clock.sleep(0.1)
    pitch, roll = tilt_deg(imu.read().accel_mps2)
    assert roll == pytest.approx(-50.0, abs=1.0) and abs(pitch) < 1.0
    with pytest.raises(ValueError, match="finite"):
        physics.set_tilt(float("nan"), 0.0)


def test_drain_lowers_the_ina219_bus_voltage_with_load_sag():
    physics, clock = rig()
    chip = Ina219Chip(physics, clock=clock)
    mon = Ina219(Ina219Config(kind="ina219", bus=1), FakeSMBus({0x40: chip}), clock=clock, sleep=clock.sleep)
    mon.open()
    physics.drain_to(3.5)
    clock.sleep(0.1)
    rest = mon.read().voltage_v
    p = TankParams()
    assert rest == pytest.approx(3 * 3.5 - p.r_internal_ohm * p.idle_a, abs=0.02)
    physics.set_duty(1.0, 1.0)
    clock.sleep(0.1)
    assert mon.read().voltage_v == pytest.approx(rest - p.r_internal_ohm * p.stall_a, abs=0.02)
    with pytest.raises(ValueError, match="outside"):
        physics.drain_to(2.0)


def test_obstacle_stops_the_tracks_and_draws_the_stall_current():
    physics, clock = rig()
    physics.set_duty(0.6, 0.6)
    clock.sleep(1.0)
    assert physics.encoder_cps()[0] == pytest.approx(0.6 * 4000, rel=0.01)
    free = physics.motor_current_a()
    physics.set_obstacle(True)
    clock.sleep(0.5)
    counts = physics.encoder_counts()
    clock.sleep(0.5)
    assert physics.encoder_counts() == counts and physics.encoder_cps() == (0.0, 0.0)
    assert physics.motor_current_a() == pytest.approx((2 * free[0], 2 * free[1]))
    physics.set_obstacle(False)
    clock.sleep(1.0)
    assert physics.encoder_cps()[0] == pytest.approx(0.6 * 4000, rel=0.01)
