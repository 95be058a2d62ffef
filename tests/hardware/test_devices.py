"""The driver contract on real devices (pyserial's practice of re-running its suite on a real port).

Skipped unless ``ROBOT_AGENT_HW=1``; the devices come from environment variables (see
tests/hardware/devices.py). The checks are tests/drivers/contract.py's, the ones the emulator
suite runs; only the transport-fault check is left out (nothing here unplugs a real device).
Motors are commanded zero duty only; run with the tracks off the ground anyway.

    ROBOT_AGENT_HW=1 ROBOT_AGENT_HW_MOTOR=/dev/ttyACM0 ROBOT_AGENT_HW_MOTOR_KIND=roboclaw \\
    ROBOT_AGENT_HW_I2C_BUS=1 ROBOT_AGENT_HW_IMU_KIND=mpu6050 ROBOT_AGENT_HW_POWER_KIND=ina219 \\
    ROBOT_AGENT_HW_CAMERA=picam:0 .venv/bin/python -m pytest tests/hardware -v
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.drivers.contract import Rig, check_open_close, check_si
from tests.hardware.devices import Devices, device_names, enabled

pytestmark = [
    pytest.mark.hardware,
    pytest.mark.skipif(not enabled(), reason="real hardware not requested (set ROBOT_AGENT_HW=1 and the device variables)"),
]

NAMES = device_names() or ["none"]


@pytest.fixture(params=NAMES)
def rig(request) -> Iterator[tuple[str, Rig]]:
    if request.param == "none":
        pytest.skip("ROBOT_AGENT_HW=1 but no device variables set (ROBOT_AGENT_HW_MOTOR_KIND, ...)")
    devices = Devices()
    made = devices.rig(request.param)
    try:
        yield request.param, made
    finally:
        made.driver.close()
        devices.close()


def test_open_and_close_are_idempotent_and_a_closed_driver_raises_device_closed(rig):
    check_open_close(*rig)


def test_reads_are_in_si_units(rig):
    check_si(*rig)
