"""Which real devices the hardware suite runs on: read from the environment.

==================================  ===============================================================
``ROBOT_AGENT_HW=1``                run the suite (otherwise every test is skipped)
``ROBOT_AGENT_HW_MOTOR``            motor controller port, e.g. ``/dev/ttyACM0``
``ROBOT_AGENT_HW_MOTOR_KIND``       ``roboclaw`` | ``sabertooth`` | ``line``
``ROBOT_AGENT_HW_I2C_BUS``          I2C bus: ``1``, ``/dev/i2c-1`` (``sim://``: emulated chips)
``ROBOT_AGENT_HW_IMU_KIND``         ``mpu6050`` | ``bno055`` (on that bus)
``ROBOT_AGENT_HW_POWER_KIND``       ``ina219`` | ``ina226``
``ROBOT_AGENT_HW_SERVO_KIND``       ``pca9685``
``ROBOT_AGENT_HW_ESTOP_KIND``       ``gpio``: the e-stop input (switch released), line in the
                                    options, e.g. ``{"line": "GPIO17"}``
``ROBOT_AGENT_HW_GPIO_CHIP``        its GPIO chip: ``/dev/gpiochip0`` (default), ``sim://``
``ROBOT_AGENT_HW_CAMERA``           camera source: ``0``, ``/dev/video0``, ``picam:0``, ``gst:...``
``ROBOT_AGENT_HW_<KIND>_OPTIONS``   JSON object merged into that device's config section, e.g.
                                    ``{"baud": 115200, "address": "0x81"}`` or ``{"shunt_ohm": 0.01}``
==================================  ===============================================================

Each device is built from its config section through the drivers' registry, the same way the
agent builds it, with the openers of the simulated tank: a ``sim://`` port or bus gives the
emulators (at rest), any other value the real device.
"""

from __future__ import annotations

import json
import os
from typing import Any

from agent.config import AgentConfig
from agent.devices.build import Buses, build_driver
from agent.devices.simtank import SimTank
from drivers.config import CameraConfig
from tests.drivers.contract import Rig

PREFIX = "ROBOT_AGENT_HW"
KINDS = ("motor", "imu", "power", "servo", "estop")


def enabled() -> bool:
    """True when ``ROBOT_AGENT_HW=1``."""
    return os.environ.get(PREFIX) == "1"


def _options(kind: str) -> dict[str, Any]:
    text = os.environ.get(f"{PREFIX}_{kind.upper()}_OPTIONS", "")
    return json.loads(text) if text else {}


def sections() -> dict[str, dict[str, Any]]:
    """Config section per configured device kind (``motor``, ``imu``, ``power``, ``servo``, ``estop``)."""
    out: dict[str, dict[str, Any]] = {}
    bus = os.environ.get(f"{PREFIX}_I2C_BUS", "1")
    for kind in KINDS:
        name = os.environ.get(f"{PREFIX}_{kind.upper()}_KIND", "")
        if not name:
            continue
        where = {"port": os.environ.get(f"{PREFIX}_MOTOR", "")} if kind == "motor" else {"bus": bus}
        if kind == "estop":
            where = {"chip": os.environ.get(f"{PREFIX}_GPIO_CHIP", "/dev/gpiochip0")}
        out[kind] = {"kind": name, **where, **_options(kind)}
    return out


def device_names() -> list[str]:
    """Device kinds to test: the configured ones plus ``camera`` when a camera source is set."""
    names = list(sections()) if enabled() else []
    return names + (["camera"] if enabled() and os.environ.get(f"{PREFIX}_CAMERA") else [])


class Devices:
    """Builds fresh rigs for the configured devices; closes the buses it opened."""

    def __init__(self) -> None:
        self._sections = sections()
        self._cfg = AgentConfig.model_validate({"server": None, "drivers": self._sections})
        self._tank = SimTank(self._cfg)
        self._buses = Buses(self._tank.openers())

    def rig(self, kind: str) -> Rig:
        """A new driver of ``kind`` (not opened) on the real device; no physics, no fault injection."""
        if kind == "camera":
            source = os.environ[f"{PREFIX}_CAMERA"]
            cfg = CameraConfig(id="hw", source=int(source) if source.isdigit() else source, **_options(kind))
            return Rig(build_driver(kind, cfg, self._buses))
        return Rig(build_driver(kind, getattr(self._cfg.drivers, kind), self._buses))

    def close(self) -> None:
        self._buses.close()
        self._tank.close()


__all__ = ["Devices", "device_names", "enabled", "sections"]
