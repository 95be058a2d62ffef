"""probe(): I2C chips found on FakeSMBus buses, a pty serial device with by-id names, camera nodes."""

from __future__ import annotations

import json
import os

import pytest
import serial

from agent.config.drivers import DriversConfig
from agent.devices.probe import format_probe, probe, scan_bus
from drivers.emulators.bno055 import Bno055Chip
from drivers.emulators.i2c import FakeSMBus
from drivers.emulators.ina2xx import Ina219Chip, Ina226Chip
from drivers.emulators.mpu6050 import Mpu6050Chip
from drivers.emulators.pca9685 import Pca9685Chip


@pytest.fixture
def pty_dev(tmp_path):
    """A fake /dev: ttyACM0 -> a pty slave, with a by-id link naming an Arduino; two video nodes."""
    master, slave = os.openpty()
    dev = tmp_path / "dev"
    (dev / "serial" / "by-id").mkdir(parents=True)
    (dev / "v4l" / "by-id").mkdir(parents=True)
    (dev / "ttyACM0").symlink_to(os.ttyname(slave))
    by_id = dev / "serial" / "by-id" / "usb-Arduino__www.arduino.cc__0043_75735-if00"
    by_id.symlink_to("../../ttyACM0")
    (dev / "video0").touch()
    (dev / "video1").touch()
    (dev / "v4l" / "by-id" / "usb-Cam_HD_Webcam-video-index0").symlink_to("../../video0")
    yield dev, master, by_id
    os.close(master)
    os.close(slave)


def full_bus() -> FakeSMBus:
    return FakeSMBus({0x68: Mpu6050Chip(), 0x28: Bno055Chip(), 0x40: Ina226Chip(), 0x41: Pca9685Chip()})


def test_scan_identifies_every_supported_chip():
    result = scan_bus(full_bus())
    found = {d["address"]: d["kind"] for d in result["devices"]}
    assert found == {0x28: "bno055", 0x40: "ina226", 0x41: "pca9685", 0x68: "mpu6050"}
    assert result["bus"] == "sim://" and result["errors"] == [] and result["error"] is None


def test_scan_finds_an_ina219_at_power_on_and_an_mpu_at_0x69():
    result = scan_bus(FakeSMBus({0x45: Ina219Chip(), 0x69: Mpu6050Chip()}))
    assert {d["address"]: d["kind"] for d in result["devices"]} == {0x45: "ina219", 0x69: "mpu6050"}


def test_scan_reports_unsupported_mpu_family_and_allcall_alias():
    mpu9250 = Mpu6050Chip()
    mpu9250.regs[0x75] = 0x71
    bus = FakeSMBus({0x68: mpu9250, 0x40: Pca9685Chip(), 0x70: Pca9685Chip()})
    kinds = {d["address"]: d["kind"] for d in scan_bus(bus)["devices"]}
    assert kinds == {0x40: "pca9685", 0x68: "unsupported", 0x70: "pca9685-allcall"}


def test_scan_records_bus_errors_other_than_nack_and_goes_on():
    bus = full_bus()
    bus.inject(0x68, 110, 1)
    result = scan_bus(bus)
    assert [e["errno"] for e in result["errors"]] == [110]
    assert 0x28 in {d["address"] for d in result["devices"]}


def test_missing_bus_is_reported_not_raised():
    result = probe([250], serial_dir="/nonexistent")
    assert result["i2c"][0]["errno"] == 2
    assert any("does not exist" in n for n in result["notes"])


def test_probe_lists_the_pty_serial_port_with_its_by_id_name(pty_dev):
    dev, master, by_id = pty_dev
    result = probe([], serial_dir=str(dev))
    [port] = result["serial"]
    assert port["device"] == str(dev / "ttyACM0")
    assert port["by_id"] == [str(by_id)]
    assert port["access"] is True
    assert port["motor_guess"] == "line"
    assert result["drivers"]["motor"] == {"kind": "line", "port": str(by_id)}
    with serial.Serial(result["drivers"]["motor"]["port"], 115200, timeout=1) as link:   # the suggestion opens
        link.write(b"V\n")
        assert os.read(master, 2) == b"V\n"


def test_probe_suggests_a_drivers_section_that_validates(pty_dev):
    dev, _, _ = pty_dev
    result = probe([full_bus()], serial_dir=str(dev))
    drivers = result["drivers"]
    assert drivers["imu"] == {"kind": "bno055", "bus": "sim://", "address": 0x28}
    assert drivers["power"] == {"kind": "ina226", "bus": "sim://", "address": 0x40}
    assert drivers["servo"] == {"kind": "pca9685", "bus": "sim://", "address": 0x41}
    cam0 = dev / "v4l" / "by-id" / "usb-Cam_HD_Webcam-video-index0"
    assert drivers["cameras"][0] == {"id": "cam0", "source": str(cam0)}
    assert drivers["cameras"][1] == {"id": "cam1", "source": str(dev / "video1")}
    DriversConfig.model_validate(drivers)


def test_format_probe_is_readable_and_ends_with_json(pty_dev):
    dev, _, _ = pty_dev
    result = probe([full_bus()], serial_dir=str(dev))
    text = format_probe(result)
    assert "0x68  mpu6050" in text and "ttyACM0" in text and "video0" in text
    body = text.split('Suggested "drivers" section (review before use):\n', 1)[1]
    json_text = body.split("\nnote:", 1)[0]
    assert json.loads(json_text) == result["drivers"]


def test_nothing_found_gives_an_empty_suggestion(tmp_path):
    result = probe([FakeSMBus()], serial_dir=str(tmp_path))
    assert result["drivers"] == {}
    assert "(none)" in format_probe(result)
