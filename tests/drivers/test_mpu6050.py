"""MPU-6050 driver against the register-map emulator on a FakeSMBus, driven by the tank physics."""

from __future__ import annotations

import math

import pytest

from agent.config.drivers import Mpu6050Config
from agent.errors import DeviceClosed, DriverError
from drivers.emulators.i2c import FakeSMBus, ManualClock
from drivers.emulators.mpu6050 import Mpu6050Chip
from drivers.emulators.tank import TankPhysics
from drivers.mpu6050 import Mpu6050, temperature_c

ADDR = 0x68


def make(cfg: Mpu6050Config | None = None, **chip_kw):
    clock = ManualClock()
    physics = TankPhysics(clock=clock)
    chip = Mpu6050Chip(physics, **chip_kw)
    bus = FakeSMBus({ADDR: chip})
    imu = Mpu6050(cfg or Mpu6050Config(kind="mpu6050"), bus, clock=clock, sleep=clock.sleep)
    return imu, chip, bus, physics, clock


def yaw_of(q):
    x, y, z, w = q
    return math.atan2(2 * (w * z + x * y), 1 - 2 * (y * y + z * z))


def test_open_writes_wake_and_config_registers():
    cfg = Mpu6050Config(kind="mpu6050", accel_range_g=4, gyro_range_dps=500, dlpf_cfg=2, sample_rate_div=4)
    imu, chip, *_ = make(cfg)
    assert chip.asleep
    imu.open()
    assert chip.regs[0x6B] == 0x01          # SLEEP cleared, PLL with gyro X
    assert chip.regs[0x19] == 4             # SMPLRT_DIV
    assert chip.regs[0x1A] == 2             # DLPF_CFG
    assert chip.regs[0x1B] == 0x08          # FS_SEL 1: +-500 dps
    assert chip.regs[0x1C] == 0x08          # AFS_SEL 1: +-4 g


def test_open_refuses_a_chip_with_another_who_am_i():
    imu, chip, *_ = make()
    chip.regs[0x75] = 0x70
    with pytest.raises(DriverError, match="WHO_AM_I is 0x70"):
        imu.open()


def test_emulator_data_registers_read_zero_while_asleep():
    _, chip, bus, *_ = make()
    assert bus.read_i2c_block_data(ADDR, 0x3B, 14) == [0] * 14
    assert chip.regs[0x75] == 0x68


def test_temperature_worked_example():
    assert temperature_c(-521) == pytest.approx(35.00, abs=0.005)


def test_scaling_worked_numbers_through_the_registers():
    imu, chip, bus, _, _ = make()
    chip.motion.physics = None
    chip.motion.accel_mps2 = (9.80665, 0.0, -9.80665 / 2)       # +1 g, 0, -0.5 g
    chip.motion.gyro_radps = (math.radians(1.0), 0.0, math.radians(-250.0))
    imu.open()
    sample = imu.read()
    raw = bytes(chip.regs[0x3B:0x49])
    assert raw[0:2] == bytes([0x40, 0x00])        # 16384 LSB per g at +-2 g, big-endian
    assert raw[4:6] == (-8192 & 0xFFFF).to_bytes(2, "big")
    assert raw[8:10] == (131).to_bytes(2, "big")  # 131 LSB per deg/s at +-250 dps
    assert sample.accel_mps2 == pytest.approx((9.80665, 0.0, -4.903325))
    assert sample.gyro_radps[0] == pytest.approx(math.radians(1.0))
    assert sample.gyro_radps[2] == pytest.approx(math.radians(-250.0), rel=1e-4)
    assert sample.temperature_c == pytest.approx(25.0, abs=0.01)


def test_at_rest_reads_gravity_up_and_level_orientation():
    imu, _, _, _, clock = make()
    imu.open()
    for _ in range(10):
        clock.sleep(0.01)
        sample = imu.read()
    assert sample.accel_mps2 == pytest.approx((0.0, 0.0, 9.81), abs=0.01)
    assert sample.gyro_radps == pytest.approx((0.0, 0.0, 0.0), abs=1e-3)
    assert sample.orientation_xyzw == pytest.approx((0.0, 0.0, 0.0, 1.0), abs=1e-3)
    assert sample.t_mono_s == clock()


@pytest.mark.parametrize("poll_s", [0.01, 0.04], ids=["every-sample", "every-4-samples-from-the-fifo"])
def test_yaw_rate_and_heading_follow_the_physics(poll_s):
    imu, _, _, physics, clock = make()
    imu.open()
    imu.read()
    physics.set_duty(-0.2, 0.2)                 # turn left in place
    for _ in range(round(1.0 / poll_s)):
        clock.sleep(poll_s)
        sample = imu.read()
    omega = physics.omega_radps
    assert omega == pytest.approx(0.4 / 0.3, rel=0.01)
    assert sample.gyro_radps[2] == pytest.approx(omega, abs=math.radians(1 / 131) * 2)
    assert yaw_of(sample.orientation_xyzw) == pytest.approx(physics.pose()[2], abs=0.05)   # every sample integrated


def test_fifo_gathers_one_sample_per_tick_and_the_read_takes_them_all():
    imu, chip, bus, _, clock = make()
    imu.open()
    assert imu.poll_period_s == pytest.approx(0.04)           # 4 samples at 100 Hz
    clock.sleep(0.04)
    assert bus.read_word_data(ADDR, 0x72) == (4 * 14) << 8    # FIFO_COUNT, big-endian: 4 samples
    before = bus.transactions[ADDR]
    sample = imu.read()
    assert bus.transactions[ADDR] - before == 3              # the count, one I2C_RDWR of two messages
    assert bus.log[-1].op == "read" and len(bus.log[-1].data) == 4 * 14
    assert len(chip.fifo) == 0 and sample.t_mono_s == clock()
    assert sample.accel_mps2[2] == pytest.approx(9.81, abs=0.01)


def test_a_reader_at_rest_may_wait_its_rest_period_and_takes_every_sample_in_one_read():
    imu, chip, bus, _, clock = make()
    imu.open()
    assert imu.rest_poll_period_s == pytest.approx(0.08)      # 8 samples at 100 Hz
    clock.sleep(0.01)
    imu.read()                                                # the FIFO from empty
    clock.sleep(imu.rest_poll_period_s)
    before = bus.transactions[ADDR]
    sample = imu.read()
    assert bus.transactions[ADDR] - before == 3               # the count, one I2C_RDWR of two messages
    assert len(bus.log[-1].data) == 8 * 14 and imu.fifo_resets == 0 and len(chip.fifo) == 0
    assert sample.accel_mps2[2] == pytest.approx(9.81, abs=0.01)


def test_a_stalled_reader_overflows_the_fifo_then_it_is_reset_and_the_registers_read():
    imu, chip, _, _, clock = make()
    imu.open()
    clock.sleep(1.0)                            # 100 samples: more than 1024 bytes
    assert chip.read(0) is not None and chip.regs[0x3A] == 0
    chip.write(bytes([0x72]))
    chip.read(2)
    assert chip.regs[0x3A] & 0x10               # FIFO_OFLOW
    sample = imu.read()                         # reset, this read from the data registers
    assert imu.fifo_resets == 1 and len(chip.fifo) == 0
    assert sample.accel_mps2[2] == pytest.approx(9.81, abs=0.01)
    clock.sleep(0.04)
    imu.read()
    assert imu.fifo_resets == 1 and len(chip.fifo) == 0


@pytest.mark.parametrize("code", [121, 110, 5])
def test_error_bursts_raise_driver_error_with_errno_then_recover(code):
    imu, _, bus, _, clock = make()
    imu.open()
    bus.inject(ADDR, code, 3)
    for _ in range(3):
        with pytest.raises(DriverError) as exc:
            imu.read()
        assert exc.value.errno == code
        assert exc.value.device == "imu"
    clock.sleep(0.01)
    assert imu.read().accel_mps2[2] == pytest.approx(9.81, abs=0.01)


def test_chip_power_cycle_is_detected_and_reinitialised():
    imu, chip, bus, _, clock = make()
    imu.open()
    bus.remove(ADDR)
    with pytest.raises(DriverError) as exc:
        imu.read()
    assert exc.value.errno == 121
    bus.restore(ADDR, power_cycle=True)
    assert chip.asleep
    with pytest.raises(DriverError, match="reset"):
        imu.read()
    assert not chip.asleep
    clock.sleep(0.01)
    assert imu.read().accel_mps2[2] == pytest.approx(9.81, abs=0.01)


def test_calibration_removes_an_injected_bias():
    bias = (0.02, -0.015, 0.03)
    imu, chip, _, _, clock = make(gyro_bias_radps=bias, gyro_noise_radps=0.002, seed=7)
    imu.open()
    before = imu.read().gyro_radps
    assert before == pytest.approx(bias, abs=0.01)
    found = imu.calibrate_gyro(200)
    assert found == pytest.approx(bias, abs=1e-3)
    assert clock() >= 200 / 100.0 - 1e-9          # paced at the 100 Hz sample rate
    after = [imu.read().gyro_radps for _ in range(50)]
    mean = [sum(s[i] for s in after) / len(after) for i in range(3)]
    assert mean == pytest.approx((0.0, 0.0, 0.0), abs=1e-3)


def test_calibration_refused_while_turning_keeps_the_old_bias():
    imu, _, _, physics, clock = make()
    imu.open()
    physics.set_duty(-0.5, 0.5)
    clock.sleep(1.0)
    with pytest.raises(DriverError, match="not at rest"):
        imu.calibrate_gyro(50)
    assert imu.gyro_bias_radps == (0.0, 0.0, 0.0)


@pytest.mark.parametrize("samples", [0, 5, 10_001, 2.5, True, "100"])
def test_calibration_with_bad_sample_count_reads_nothing(samples, caplog):
    imu, _, bus, _, _ = make()
    imu.open()
    before = bus.transactions[ADDR]
    with pytest.raises(DriverError, match="samples"):
        imu.calibrate_gyro(samples)
    assert bus.transactions[ADDR] == before
    assert "samples" in caplog.text


def test_lifecycle_read_before_open_and_after_close():
    imu, *_ = make()
    with pytest.raises(DriverError, match="not open"):
        imu.read()
    with imu:
        imu.read()
    imu.close()
    with pytest.raises(DeviceClosed):
        imu.read()
    with pytest.raises(DeviceClosed):
        imu.open()


def test_the_plain_float_madgwick_step_matches_ahrs():
    import numpy as np
    from ahrs.filters import Madgwick

    from drivers.madgwick import update_imu

    ref = Madgwick(frequency=100.0)
    q_ref = np.array([0.9, 0.1, -0.2, 0.3]) / np.linalg.norm([0.9, 0.1, -0.2, 0.3])
    q = tuple(float(v) for v in q_ref)
    for i in range(200):
        gyr = (0.01 * math.sin(i), -0.02, 0.3 * math.cos(0.1 * i))
        acc = (0.2 * math.cos(i), 0.1, 9.7)
        q_ref = ref.updateIMU(q_ref, gyr=np.array(gyr), acc=np.array(acc), dt=0.01)
        q = update_imu(q, gyr, acc, 0.01)
    assert q == pytest.approx(tuple(q_ref), abs=1e-12)
    assert update_imu(q, (0.0, 0.0, 0.0), (0.0, 0.0, 9.8), 0.01) == q      # no rotation: unchanged, as ahrs


@pytest.mark.parametrize("acc", [(0.0, 0.0, 9.81), (1.2, -0.4, 9.6), (-9.0, 3.0, 1.0), (0.3, 9.7, -1.5),
                                 (0.0, 0.0, 0.0)])
def test_the_plain_float_acc2q_matches_ahrs(acc):
    import numpy as np
    from ahrs.common.orientation import acc2q as ahrs_acc2q

    from drivers.madgwick import acc2q

    assert acc2q(acc) == pytest.approx(tuple(ahrs_acc2q(np.array(acc, dtype=float))), abs=1e-12)
