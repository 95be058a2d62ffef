"""FakeSMBus: smbus2 call semantics, byte order on the wire, fault injection, unplug, general call."""

from __future__ import annotations

import errno

import pytest
from smbus2 import i2c_msg

from agent.config.drivers import Bno055Config, DriversConfig, Ina219Config
from drivers.errors import DriverConfigError
from drivers.emulators.bno055 import Bno055Chip
from drivers.emulators.i2c import FakeSMBus, ManualClock, RegisterChip
from drivers.emulators.ina2xx import Ina219Chip, Ina226Chip
from drivers.emulators.mpu6050 import Mpu6050Chip
from drivers.emulators.pca9685 import Pca9685Chip
from drivers.emulators.tank import TankPhysics


class Recorder(RegisterChip):
    """A plain register chip: 0x10.. holds 0x12 0x34 0x56 at power-on."""

    POR = {0x10: 0x12, 0x11: 0x34, 0x12: 0x56}


@pytest.fixture
def bus() -> FakeSMBus:
    return FakeSMBus({0x20: Recorder()})


def test_word_read_returns_low_byte_first_as_smbus_does(bus):
    # Bytes on the wire 0x12 then 0x34: an SMBus word puts the first byte low.
    assert bus.read_word_data(0x20, 0x10) == 0x3412


def test_word_write_sends_low_byte_first(bus):
    bus.write_word_data(0x20, 0x00, 0xBEEF)
    assert bus.writes(0x20)[-1] == bytes([0x00, 0xEF, 0xBE])
    assert bus.chip(0x20).regs[0:2] == bytes([0xEF, 0xBE])


def test_byte_and_block_transfers_use_the_register_pointer(bus):
    assert bus.read_byte_data(0x20, 0x11) == 0x34
    assert bus.read_i2c_block_data(0x20, 0x10, 3) == [0x12, 0x34, 0x56]
    bus.write_i2c_block_data(0x20, 0x40, [1, 2, 3])
    assert bus.chip(0x20).regs[0x40:0x43] == bytes([1, 2, 3])
    bus.write_byte(0x20, 0x11)              # pointer only
    assert bus.read_byte(0x20) == 0x34
    bus.write_byte_data(0x20, 0x05, 0x99)
    assert bus.read_byte_data(0x20, 0x05) == 0x99


def test_blocks_over_32_bytes_are_refused_like_smbus2(bus):
    with pytest.raises(ValueError):
        bus.read_i2c_block_data(0x20, 0, 33)
    with pytest.raises(ValueError):
        bus.write_i2c_block_data(0x20, 0, [0] * 33)


def test_unknown_address_nacks_with_errno_121(bus):
    with pytest.raises(OSError) as exc:
        bus.read_byte_data(0x21, 0)
    assert exc.value.errno == errno.EREMOTEIO == 121


def test_address_above_0x7f_is_einval(bus):
    with pytest.raises(OSError) as exc:
        bus.read_byte_data(0x80, 0)
    assert exc.value.errno == errno.EINVAL


@pytest.mark.parametrize("code", [121, 110, 5])
def test_inject_fails_exactly_count_transactions_then_recovers(bus, code):
    bus.inject(0x20, code, 3)
    for _ in range(3):
        with pytest.raises(OSError) as exc:
            bus.read_byte_data(0x20, 0x10)
        assert exc.value.errno == code
    assert bus.read_byte_data(0x20, 0x10) == 0x12


def test_injected_fault_on_a_write_does_not_land(bus):
    bus.inject(0x20, 5, 1)
    with pytest.raises(OSError):
        bus.write_byte_data(0x20, 0x30, 0xAA)
    assert bus.chip(0x20).regs[0x30] == 0


def test_inject_touches_only_its_address():
    bus = FakeSMBus({0x20: Recorder(), 0x21: Recorder()})
    bus.inject(0x20, 110, 5)
    assert bus.read_byte_data(0x21, 0x10) == 0x12


def test_remove_unplugs_and_restore_keeps_or_resets_state(bus):
    bus.write_byte_data(0x20, 0x10, 0xAA)
    bus.remove(0x20)
    with pytest.raises(OSError) as exc:
        bus.read_byte_data(0x20, 0x10)
    assert exc.value.errno == 121
    assert bus.addresses() == []
    bus.restore(0x20)
    assert bus.read_byte_data(0x20, 0x10) == 0xAA
    bus.remove(0x20)
    bus.restore(0x20, power_cycle=True)
    assert bus.read_byte_data(0x20, 0x10) == 0x12


def test_general_call_software_reset_resets_only_chips_that_support_it():
    bus = FakeSMBus({0x20: Recorder(), 0x40: Pca9685Chip()})
    bus.write_byte_data(0x20, 0x10, 0xAA)
    bus.write_byte_data(0x40, 0x01, 0x10)
    bus.write_byte(0x00, 0x06)
    assert bus.read_byte_data(0x40, 0x01) == 0x04          # PCA9685 MODE2 back to POR
    assert bus.read_byte_data(0x20, 0x10) == 0xAA          # the other chip ignores the general call


def test_i2c_rdwr_with_real_smbus2_messages(bus):
    write, read = i2c_msg.write(0x20, [0x10]), i2c_msg.read(0x20, 3)
    bus.i2c_rdwr(write, read)
    assert list(read) == [0x12, 0x34, 0x56]


def test_i2c_rdwr_read_not_last_fails_like_bcm2835(bus):
    with pytest.raises(OSError) as exc:
        bus.i2c_rdwr(i2c_msg.read(0x20, 1), i2c_msg.write(0x20, [0x10]))
    assert exc.value.errno == errno.EOPNOTSUPP


def test_closed_bus_raises_ebadf(bus):
    with bus:
        pass
    with pytest.raises(OSError) as exc:
        bus.read_byte_data(0x20, 0x10)
    assert exc.value.errno == errno.EBADF


def test_log_is_bounded_and_counts_transactions():
    bus = FakeSMBus({0x20: Recorder()}, history=4)
    for _ in range(10):
        bus.read_byte_data(0x20, 0x10)
    assert len(bus.log) == 4
    assert bus.transactions[0x20] == 10


def test_attach_refuses_a_second_chip_at_one_address():
    bus = FakeSMBus({0x40: Ina219Chip()})
    with pytest.raises(DriverConfigError, match="0x40"):
        bus.attach(0x40, Pca9685Chip())
    with pytest.raises(DriverConfigError):
        bus.attach(0x80, Recorder())
    assert isinstance(bus.chip(0x40), Ina219Chip)


def test_chips_from_config_take_the_physical_parameters():
    physics = TankPhysics(clock=ManualClock())
    cfg = DriversConfig.model_validate({
        "imu": {"kind": "mpu6050", "bus": "sim://"},
        "power": {"kind": "ina226", "bus": "sim://", "shunt_ohm": 0.005},
        "servo": {"kind": "pca9685", "bus": "sim://", "address": 0x41, "oscillator_hz": 26e6},
    })
    imu = Mpu6050Chip.from_config(cfg.imu, physics, gyro_bias_radps=(0.0, 0.0, 0.01))
    power = Ina226Chip.from_config(cfg.power, physics)
    servo = Pca9685Chip.from_config(cfg.servo, physics)
    assert imu.motion.physics is physics and imu.motion.gyro_bias_radps == (0.0, 0.0, 0.01)
    assert (power.shunt_ohm, power.physics) == (0.005, physics)
    assert servo.oscillator_hz == 26e6
    assert Bno055Chip.from_config(Bno055Config(kind="bno055"), physics).motion.physics is physics
    assert Ina219Chip.from_config(Ina219Config(kind="ina219"), None).shunt_ohm == 0.1
