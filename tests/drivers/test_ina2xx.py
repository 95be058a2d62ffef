"""INA219 / INA226 drivers against their register-map emulators; worked examples of reference §5.4/§5.5."""

from __future__ import annotations

import pytest

from agent.config.drivers import BatteryConfig, Ina219Config, Ina226Config
from agent.errors import DeviceClosed, DriverError
from drivers.battery import percent
from drivers.emulators.i2c import FakeSMBus, ManualClock
from drivers.emulators.ina2xx import Ina219Chip, Ina226Chip
from drivers.emulators.tank import TankPhysics
from drivers.ina2xx import Ina219, Ina226, calibration, current_lsb_a
from agent.devices.supervisor import Supervised

ADDR = 0x40


def be(chip, reg: int) -> int:
    return chip.regs[reg]


def make(driver_cls, chip_cls, cfg, *, physics=False, **chip_kw):
    clock = ManualClock()
    tank = TankPhysics(clock=clock) if physics else None
    chip = chip_cls(tank, shunt_ohm=cfg.shunt_ohm, clock=clock, **chip_kw)
    bus = FakeSMBus({ADDR: chip})
    dev = driver_cls(cfg, bus, clock=clock, sleep=clock.sleep)
    return dev, chip, bus, clock, tank


# ------------------------------------------------------------------ calibration arithmetic

def test_ina219_worked_example_32v_2a_profile():
    # Reference §5.4: R = 0.1 ohm, Current_LSB = 100 uA -> Cal 4096, Power_LSB 2 mW.
    lsb = current_lsb_a(3.2, 0.1, 0.04096, 0xFFFE)
    assert lsb == pytest.approx(100e-6)
    assert calibration(0.04096, lsb, 0.1) == 4096
    dev = Ina219(Ina219Config(kind="ina219", shunt_ohm=0.1, max_current_a=3.2), FakeSMBus())
    assert (dev.current_lsb_a, dev.cal, dev.power_lsb_w) == (pytest.approx(1e-4), 4096, pytest.approx(0.002))


def test_ina226_datasheet_example_cal():
    # Reference §5.5: 2 mOhm, Current_LSB 1 mA -> CAL 2560 (0x0A00); Power_LSB 25 mW.
    dev = Ina226(Ina226Config(kind="ina226", shunt_ohm=0.002, max_current_a=20.0), FakeSMBus())
    assert (dev.current_lsb_a, dev.cal, dev.power_lsb_w) == (pytest.approx(1e-3), 2560, pytest.approx(0.025))


def test_current_lsb_is_raised_until_cal_fits_the_register():
    lsb = current_lsb_a(3.2, 0.001, 0.04096, 0xFFFE)      # 100 uA would need Cal 409600
    assert lsb == pytest.approx(1e-3)
    assert calibration(0.04096, lsb, 0.001) == 40960


# ------------------------------------------------------------------ INA219

def cfg219(**kw) -> Ina219Config:
    """An INA219 read at 10 Hz (the worked averaging figures below), unless ``kw`` says otherwise."""
    return Ina219Config(**{"kind": "ina219", "rate_hz": 10.0, **kw})


def test_ina219_open_writes_calibration_and_configuration():
    dev, chip, *_ = make(Ina219, Ina219Chip, cfg219())
    dev.open()
    assert chip.regs[0x05] == 4096
    # BRNG 32 V, PG /8 (3.2 A * 0.1 ohm = 320 mV), 64-sample averaging (2 x 34 ms <= 80 % of 100 ms), continuous
    assert chip.regs[0x00] == 0x2000 | 3 << 11 | 0xE << 7 | 0xE << 3 | 7 == 0x3F77


def test_ina219_worked_reading():
    # 1.0 A through 0.1 ohm = 100 mV = 10000 x 10 uV; Current = 10000 * 4096 / 4096 = 10000 x 100 uA;
    # 12.0 V = 3000 x 4 mV; Power = 10000 * 3000 / 5000 = 6000 x 2 mW = 12 W.
    dev, chip, bus, clock, _ = make(Ina219, Ina219Chip, cfg219())
    chip.current_a, chip.bus_voltage_v = 1.0, 12.0
    dev.open()
    sample = dev.read()
    assert (be(chip, 0x01), be(chip, 0x02) >> 3, be(chip, 0x04), be(chip, 0x03)) == (10000, 3000, 10000, 6000)
    assert bus.read_word_data(ADDR, 0x01) == 0x1027       # BE 0x2710 on the wire, low byte first in the word
    assert (sample.voltage_v, sample.current_a, sample.power_w) == (
        pytest.approx(12.0), pytest.approx(1.0), pytest.approx(12.0))
    assert sample.percent == pytest.approx(percent(12.0, "lipo", 3))
    assert sample.t_mono_s == clock()


def test_ina219_charging_current_is_negative():
    dev, chip, *_ = make(Ina219, Ina219Chip, cfg219())
    chip.current_a = -0.5
    dev.open()
    sample = dev.read()
    assert sample.current_a == pytest.approx(-0.5)
    assert sample.power_w == pytest.approx(-0.5 * 12.0)


def test_ina219_overflow_raises_with_the_flag_register():
    # 10 mOhm, 3.2 A: PGA +-40 mV, Current_LSB 100 uA, Cal 40960; 3.5 A gives Current 35000 > 32767.
    dev, chip, *_ = make(Ina219, Ina219Chip, cfg219(shunt_ohm=0.01))
    chip.current_a = 3.5
    dev.open()
    with pytest.raises(DriverError, match="OVF") as exc:
        dev.read()
    assert exc.value.status & 0x0001


def test_ina219_cnvr_clear_counts_a_repeated_read():
    dev, chip, _, clock, _ = make(Ina219, Ina219Chip, cfg219())
    dev.open()
    dev.read()
    dev.read()                                    # no time passed: no new conversion
    assert dev.repeated_reads == 1
    clock.sleep(0.1)
    dev.read()
    assert dev.repeated_reads == 1


def test_ina219_refuses_an_ina226():
    dev, *_ = make(Ina219, Ina226Chip, cfg219())
    with pytest.raises(DriverError, match="0x4127"):
        dev.open()


def test_ina219_follows_the_tank_battery():
    cfg = cfg219(shunt_ohm=0.01, max_current_a=8.0, battery=BatteryConfig(chemistry="lipo", cells=3))
    dev, _, _, clock, tank = make(Ina219, Ina219Chip, cfg, physics=True)
    dev.open()
    tank.set_duty(0.8, 0.8)
    clock.sleep(0.5)
    sample = dev.read()
    assert sample.current_a == pytest.approx(tank.battery_current_a(), abs=1e-3)
    assert sample.voltage_v == pytest.approx(tank.battery_voltage_v(), abs=0.004)
    assert sample.current_a > 5.0
    assert sample.percent == pytest.approx(percent(sample.voltage_v, "lipo", 3))


def test_ina219_clips_currents_beyond_the_shunt_range():
    # 0.1 ohm: the +-320 mV range ends at 3.2 A; the tank draws 5.2 A at duty 0.8.
    dev, _, _, clock, tank = make(Ina219, Ina219Chip, cfg219(), physics=True)
    dev.open()
    tank.set_duty(0.8, 0.8)
    clock.sleep(0.5)
    assert dev.read().current_a == pytest.approx(3.2)


def test_ina219_chip_power_cycle_reconfigures():
    dev, chip, bus, clock, _ = make(Ina219, Ina219Chip, cfg219())
    dev.open()
    bus.restore(ADDR, power_cycle=True)
    assert chip.regs[0x05] == 0
    with pytest.raises(DriverError, match="chip reset"):   # the very next read, not a second later
        dev.read()
    assert chip.regs[0x05] == 4096
    clock.sleep(0.1)
    assert dev.read().current_a == pytest.approx(0.5)


def test_six_resets_each_cost_one_degraded_read_and_no_zero_current():
    dev, chip, bus, clock, _ = make(Ina219, Ina219Chip, cfg219())
    supervised = Supervised("power", lambda: dev, clock=clock)
    assert supervised.try_open()
    states, currents = [], []
    for _ in range(6):
        clock.sleep(0.1)
        bus.restore(ADDR, power_cycle=True)
        for _ in range(3):
            sample = supervised.call(lambda d: d.read())
            states.append(supervised.state)
            if sample is not None:
                currents.append(sample.current_a)
            clock.sleep(0.1)
    assert states == ["degraded", "ok", "ok"] * 6
    assert currents == [pytest.approx(0.5)] * 12                  # no sample of 0 A after a reset


@pytest.mark.parametrize("shunt_ohm, max_current_a", [(0.03, 3.2), (0.015, 5.0), (0.1, 3.2), (0.01, 3.2)])
def test_ina219_odd_calibration_values_open(shunt_ohm, max_current_a):
    cfg = cfg219(shunt_ohm=shunt_ohm, max_current_a=max_current_a)
    raw = calibration(0.04096, current_lsb_a(max_current_a, shunt_ohm, 0.04096, 0xFFFE), shunt_ohm)
    dev, chip, *_ = make(Ina219, Ina219Chip, cfg)
    dev.open()                                                    # read-back matches: bit 0 cleared
    assert dev.cal == raw & 0xFFFE and chip.regs[0x05] == dev.cal
    assert dev.read().current_a == pytest.approx(0.5, abs=2 * dev.current_lsb_a + 0.5 / raw)


@pytest.mark.parametrize("driver_cls, chip_cls, cfg", [(Ina219, Ina219Chip, cfg219()), (Ina226, Ina226Chip, None)])
def test_zero_bus_voltage_is_no_battery_reading(driver_cls, chip_cls, cfg):
    dev, chip, _, clock, _ = make(driver_cls, chip_cls, cfg or cfg226())
    chip.bus_voltage_v = 0.0
    dev.open()
    clock.sleep(0.1)
    sample = dev.read()
    assert sample.voltage_v is None and sample.percent is None
    assert sample.current_a == pytest.approx(0.5, abs=0.01)


@pytest.mark.parametrize("code", [121, 110, 5])
def test_ina219_error_bursts_keep_errno_then_recover(code):
    dev, _, bus, clock, _ = make(Ina219, Ina219Chip, cfg219())
    dev.open()
    bus.inject(ADDR, code, 4)
    for _ in range(4):
        with pytest.raises(DriverError) as exc:
            dev.read()
        assert exc.value.errno == code
    clock.sleep(0.1)
    assert dev.read().voltage_v == pytest.approx(12.0)


# ------------------------------------------------------------------ INA226

def cfg226(**kw) -> Ina226Config:
    """An INA226 read at 10 Hz (the worked averaging figures below), unless ``kw`` says otherwise."""
    return Ina226Config(**{"kind": "ina226", "rate_hz": 10.0, **kw})


def test_ina226_open_checks_ids_and_writes_registers():
    dev, chip, *_ = make(Ina226, Ina226Chip, cfg226())
    dev.open()
    assert chip.regs[0x05] == 2560
    # AVG 16 (16 x 2.2 ms <= 80 ms), VBUSCT = VSHCT = 1.1 ms, continuous
    assert chip.regs[0x00] == 0x4000 | 2 << 9 | 4 << 6 | 4 << 3 | 7 == 0x4527


def test_ina226_datasheet_example_reading():
    # Reference §5.5: shunt 8000 -> current 10000 (10 A), bus 9584 (11.98 V), power 4792 x 25 mW = 119.8 W.
    dev, chip, *_ = make(Ina226, Ina226Chip, cfg226())
    chip.current_a, chip.bus_voltage_v = 10.0, 11.98
    dev.open()
    sample = dev.read()
    assert (be(chip, 0x01), be(chip, 0x04), be(chip, 0x02), be(chip, 0x03)) == (8000, 10000, 9584, 4792)
    assert (sample.voltage_v, sample.current_a, sample.power_w) == (
        pytest.approx(11.98), pytest.approx(10.0), pytest.approx(119.8))


def test_ina226_overflow_in_mask_enable_raises():
    dev, chip, *_ = make(Ina226, Ina226Chip, cfg226())
    chip.current_a = 45.0                          # shunt clips at 81.92 mV; Current 40958 > 32767
    dev.open()
    with pytest.raises(DriverError, match="OVF") as exc:
        dev.read()
    assert exc.value.status & 0x0004


def test_ina226_refuses_an_ina219():
    dev, *_ = make(Ina226, Ina219Chip, cfg226())
    with pytest.raises(DriverError, match="IDs"):
        dev.open()


def test_ina226_cvrf_clear_counts_a_repeated_read():
    dev, _, _, clock, _ = make(Ina226, Ina226Chip, cfg226())
    dev.open()
    dev.read()
    dev.read()
    assert dev.repeated_reads == 1


def test_emulator_current_and_power_read_zero_until_calibrated():
    clock = ManualClock()
    chip = Ina226Chip(shunt_ohm=0.002, clock=clock)
    bus = FakeSMBus({ADDR: chip})
    chip.current_a = 5.0
    clock.sleep(0.01)
    assert bus.read_word_data(ADDR, 0x01) != 0           # shunt converts
    assert bus.read_word_data(ADDR, 0x04) == 0 and bus.read_word_data(ADDR, 0x03) == 0
    assert bus.read_word_data(ADDR, 0x00) == 0x2741       # POR 0x4127, low byte first


def test_lifecycle():
    dev, *_ = make(Ina226, Ina226Chip, cfg226())
    with pytest.raises(DriverError, match="not open"):
        dev.read()
    dev.open()
    dev.close()
    dev.close()
    with pytest.raises(DeviceClosed):
        dev.read()
