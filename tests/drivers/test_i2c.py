"""drivers/i2c.py: opening buses from config values, BE words, errno-keeping errors."""

from __future__ import annotations

import pytest

from drivers.errors import DeviceClosed, DriverConfigError, DriverError
from drivers.emulators.i2c import FakeSMBus, RegisterChip
from drivers.i2c import I2cDevice, bus_key, open_bus, swap16, to_s16
from drivers.transport import Openers


class Chip(RegisterChip):
    POR = {0x02: 0x80, 0x03: 0x01}


def test_open_bus_url_uses_its_registered_opener():
    bus = FakeSMBus()
    openers = Openers()
    openers.register("i2c", "sim", lambda url: bus)
    assert open_bus("sim://", openers=openers) is bus
    with pytest.raises(DriverConfigError, match="sim://"):       # the message names what would work
        open_bus("mem://", openers=openers)


@pytest.mark.parametrize("value", [1, "1", "/dev/i2c-1"])
def test_bus_key_names_a_bus_once(value):
    assert bus_key(value) == "/dev/i2c-1"
    assert bus_key("sim://") == "sim://"


@pytest.mark.parametrize("value", ["sim://", "sim://x", "ftp://1", "i2c-1", True, -1, 1.5])
def test_open_bus_rejects_values_it_cannot_open(value):
    with pytest.raises(DriverConfigError):
        open_bus(value)


@pytest.mark.parametrize("value", [250, "250", "/dev/i2c-250"])
def test_open_bus_missing_device_is_driver_error_with_errno(value):
    with pytest.raises(DriverError) as exc:
        open_bus(value)
    assert exc.value.errno == 2


def test_word_helpers():
    assert swap16(0x3412) == 0x1234
    assert to_s16(0xFFFF) == -1
    assert to_s16(0x8000) == -32768
    assert to_s16(0x7FFF) == 32767


def test_device_reads_big_endian_words_and_signed_values():
    dev = I2cDevice(FakeSMBus({0x30: Chip()}), 0x30, device="x", chip="TEST")
    assert dev.read_u16_be(0x02) == 0x8001
    assert to_s16(dev.read_u16_be(0x02)) == -32767
    dev.write_u16_be(0x10, 0x1234)
    assert dev.read_block(0x10, 2) == bytes([0x12, 0x34])


@pytest.mark.parametrize("code", [121, 110, 5])
def test_device_wraps_oserror_keeping_errno_and_cause(code):
    bus = FakeSMBus({0x30: Chip()})
    dev = I2cDevice(bus, 0x30, device="imu", chip="TEST")
    bus.inject(0x30, code, 1)
    with pytest.raises(DriverError) as exc:
        dev.read_u8(0x02)
    assert exc.value.errno == code
    assert exc.value.device == "imu"
    assert isinstance(exc.value.__cause__, OSError)
    assert "0x30" in str(exc.value) and "0x02" in str(exc.value)


def test_device_lifecycle_states():
    dev = I2cDevice(FakeSMBus({0x30: Chip()}), 0x30, device="x", chip="TEST")
    with pytest.raises(DriverError, match="not open"):
        dev.require_ready()
    dev.ready = True
    dev.require_ready()
    dev.close()
    dev.close()
    with pytest.raises(DeviceClosed):
        dev.read_u8(0)
    with pytest.raises(DeviceClosed):
        dev.require_ready()
