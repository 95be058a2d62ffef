"""A power-cycled PCA9685 (a servo-rail brown-out: its registers back at power-on values, no I2C
error) is noticed by the bus thread's setup check, set up again with its last pulses, counted in the
servo's health and logged (agent/devices/i2cbus.py; docs/hardware.md). The real driver on the
simulated tank's emulated chip, the agent's Hardware."""

from __future__ import annotations

import pytest

from agent.config import AgentConfig
from agent.devices.hardware import Hardware
from agent.devices.simtank import SimTank
from drivers.pca9685 import MODE1_AI, MODE1_SLEEP, REG_MODE1
from tests.conftest import sim_config, wait_until


def _servo(hw: Hardware):
    return {h.name: h for h in hw.health()}["servo"]


def test_a_power_cycled_servo_chip_is_set_up_again_with_its_last_pulses_and_counted(caplog):
    cfg = sim_config()
    cfg["drivers"]["cameras"] = []
    cfg = AgentConfig.model_validate(cfg)
    sim = SimTank(cfg)
    hw = Hardware.from_config(cfg, sim)
    caplog.set_level("INFO", logger="agent.devices.supervisor")
    try:
        hw.start()
        chip, bus, address = sim.chip("pca9685"), sim.i2c_bus(), cfg.drivers.servo.address
        assert wait_until(lambda: _servo(hw).state == "ok", 10.0)
        hw.set_servo_pulses({0: 1500.0, 2: 1000.0})
        assert wait_until(lambda: chip.pulse_us(0) == pytest.approx(1500, abs=5)
                          and chip.pulse_us(2) == pytest.approx(1000, abs=5), 5.0)
        errors = _servo(hw).errors
        bus.power_cycle(address)      # brown-out: outputs off, asleep, AI clear (tests/drivers/test_pca9685.py)
        hw.set_servo_pulses({1: 2000.0})                      # written while the chip is still reset
        assert wait_until(lambda: all(chip.pulse_us(ch) == pytest.approx(us, abs=5)
                                      for ch, us in ((0, 1500), (1, 2000), (2, 1000))), 5.0), \
            [chip.pulse_us(ch) for ch in range(3)]
        assert chip.regs[REG_MODE1] & (MODE1_SLEEP | MODE1_AI) == MODE1_AI and chip.prescale == 121
        assert sim.physics.servo_pulse_us[0] == pytest.approx(1500, abs=5)
        assert wait_until(lambda: _servo(hw).errors == errors + 1 and _servo(hw).state == "ok", 5.0), _servo(hw)
        msgs = [r.getMessage() for r in caplog.records if r.getMessage().startswith("servo:")]
        assert any("-> degraded" in m and "lost its setup: MODE1 read 0x11" in m for m in msgs), msgs
        assert msgs[-1] == "servo: degraded -> ok", msgs
        assert hw.servo.driver.resets == 1
    finally:
        hw.close()
        sim.close()
