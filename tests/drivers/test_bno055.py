"""BNO055 driver against the register-map emulator on a FakeSMBus, driven by the tank physics."""

from __future__ import annotations

import math
import struct

import pytest

from agent.config.drivers import Bno055Config
from agent.errors import DeviceClosed, DriverError
from drivers.bno055 import Bno055
from drivers.emulators.bno055 import Bno055Chip
from drivers.emulators.i2c import FakeSMBus, ManualClock
from drivers.emulators.tank import TankPhysics

ADDR = 0x28


class RecordingClock(ManualClock):
    def __init__(self) -> None:
        super().__init__()
        self.sleeps: list[float] = []

    def sleep(self, dt: float) -> None:
        self.sleeps.append(dt)
        super().sleep(dt)


def make(**chip_kw):
    clock = RecordingClock()
    physics = TankPhysics(clock=clock)
    chip = Bno055Chip(physics, clock=clock, **chip_kw)
    bus = FakeSMBus({ADDR: chip})
    imu = Bno055(Bno055Config(kind="bno055"), bus, clock=clock, sleep=clock.sleep)
    return imu, chip, bus, physics, clock


def yaw_of(q):
    x, y, z, w = q
    return math.atan2(2 * (w * z + x * y), 1 - 2 * (y * y + z * z))


def test_open_sets_units_and_ndof_waiting_the_mode_switch_times():
    imu, chip, *_ , clock = make()
    assert chip.regs[0x3D] == 0x00 and chip.regs[0x3B] == 0x80      # power-on: CONFIGMODE, UNIT_SEL 0x80
    imu.open()
    assert chip.regs[0x3D] == 0x0C                                    # NDOF
    assert chip.regs[0x3B] == 0x06                                    # m/s^2, rad/s, rad, degC
    assert chip.regs[0x3E] == 0x00                                    # normal power
    assert clock.sleeps == [0.019, 0.007]


def test_open_refuses_a_wrong_chip_id():
    imu, chip, *_ = make()
    chip.regs[0x00] = 0xA1
    with pytest.raises(DriverError, match="CHIP_ID is 0xa1"):
        imu.open()


def test_open_selects_page_0_first():
    imu, chip, bus, *_ = make()
    bus.write_byte_data(ADDR, 0x07, 1)
    assert bus.read_byte_data(ADDR, 0x00) == 0x00          # page 1: no CHIP_ID there
    imu.open()
    assert chip.page == 0


def test_emulator_data_reads_zero_in_configmode_and_until_the_switch_time_passed():
    _, chip, bus, _, clock = make()
    assert bus.read_i2c_block_data(ADDR, 0x08, 32) == [0] * 32
    bus.write_byte_data(ADDR, 0x3D, 0x0C)
    assert not any(bus.read_i2c_block_data(ADDR, 0x08, 32))
    clock.sleep(0.007)
    assert any(bus.read_i2c_block_data(ADDR, 0x08, 32))


def test_emulator_ignores_config_writes_outside_configmode():
    _, chip, bus, _, clock = make()
    bus.write_byte_data(ADDR, 0x3D, 0x0C)
    bus.write_byte_data(ADDR, 0x3B, 0x06)
    assert chip.regs[0x3B] == 0x80


def test_scaling_worked_numbers_through_the_registers():
    imu, chip, *_ = make()
    chip.motion.physics = None
    chip.motion.accel_mps2 = (1.0, -2.5, 9.81)
    chip.motion.gyro_radps = (0.0, 0.0, 1.0)
    chip.motion.yaw_rad = math.pi / 2
    imu.open()
    sample = imu.read()
    acc = struct.unpack("<3h", bytes(chip.regs[0x08:0x0E]))
    gyr = struct.unpack("<3h", bytes(chip.regs[0x14:0x1A]))
    quat = struct.unpack("<4h", bytes(chip.regs[0x20:0x28]))
    assert acc == (100, -250, 981)               # 100 LSB per m/s^2, little-endian
    assert gyr == (0, 0, 900)                    # 900 LSB per rad/s
    assert quat == (11585, 0, 0, 11585)          # w, x, y, z at 90 deg yaw; 1.0 = 16384
    assert sample.accel_mps2 == pytest.approx((1.0, -2.5, 9.81))
    assert sample.gyro_radps == pytest.approx((0.0, 0.0, 1.0))
    assert sample.orientation_xyzw == pytest.approx((0.0, 0.0, math.sqrt(0.5), math.sqrt(0.5)), abs=1e-4)
    assert sample.temperature_c == 25.0


def test_emulator_gyro_in_dps_when_unit_sel_says_so():
    _, chip, bus, _, clock = make()
    chip.motion.physics = None
    chip.motion.gyro_radps = (0.0, 0.0, math.radians(10.0))
    bus.write_byte_data(ADDR, 0x3B, 0x00)             # dps, in CONFIGMODE
    bus.write_byte_data(ADDR, 0x3D, 0x0C)
    clock.sleep(0.01)
    z = struct.unpack("<h", bytes(bus.read_i2c_block_data(ADDR, 0x18, 2)))[0]
    assert z == 160                                   # 16 LSB per deg/s


def test_yaw_rate_and_heading_follow_the_physics():
    imu, _, _, physics, clock = make()
    imu.open()
    physics.set_duty(-0.2, 0.2)
    for _ in range(50):
        clock.sleep(0.01)
        sample = imu.read()
    assert sample.gyro_radps[2] == pytest.approx(physics.omega_radps, abs=2 / 900)
    assert yaw_of(sample.orientation_xyzw) == pytest.approx(physics.pose()[2], abs=1e-3)
    assert sample.accel_mps2[2] == pytest.approx(9.81, abs=0.01)


def test_temperature_is_read_at_most_once_per_second():
    imu, _, bus, _, clock = make()
    imu.open()
    imu.read()
    before = bus.transactions[ADDR]
    for _ in range(10):
        clock.sleep(0.01)
        imu.read()
    assert bus.transactions[ADDR] - before == 10        # one block read each
    clock.sleep(1.0)
    imu.read()
    assert bus.transactions[ADDR] - before == 12        # block + temperature


@pytest.mark.parametrize("code", [121, 110, 5])
def test_error_bursts_raise_driver_error_with_errno_then_recover(code):
    imu, _, bus, _, clock = make()
    imu.open()
    bus.inject(ADDR, code, 2)
    for _ in range(2):
        with pytest.raises(DriverError) as exc:
            imu.read()
        assert exc.value.errno == code
    clock.sleep(0.01)
    assert imu.read().orientation_xyzw is not None


def test_chip_reset_is_detected_and_reinitialised():
    imu, chip, bus, _, clock = make()
    imu.open()
    bus.restore(ADDR, power_cycle=True)
    with pytest.raises(DriverError, match="reset"):
        imu.read()
    assert chip.regs[0x3D] == 0x0C
    clock.sleep(0.01)
    assert imu.read().orientation_xyzw == pytest.approx((0, 0, 0, 1), abs=1e-4)


def test_no_gyro_calibration_on_a_fusion_chip():
    imu, *_ = make()
    imu.open()
    with pytest.raises(DriverError, match="no gyro calibration"):
        imu.calibrate_gyro()


def test_lifecycle():
    imu, *_ = make()
    with pytest.raises(DriverError, match="not open"):
        imu.read()
    imu.open()
    imu.close()
    imu.close()
    with pytest.raises(DeviceClosed):
        imu.read()
