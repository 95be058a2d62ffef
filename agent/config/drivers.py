"""``drivers`` section: which device, where, and how it is set up.

The models live next to the drivers (drivers/config.py, re-exported here);
this module builds the section from the drivers' registry: one optional
device per kind (``motor``, ``imu``, ``power``, ``servo``, ``estop``), a discriminated
union over the ``kind`` of its models, plus a list of cameras.

A device left out is absent; a configured device that fails at start is
"lost" and retried while the agent runs without it.
"""

from __future__ import annotations

from typing import Any, Union

from pydantic import Field, model_validator

from agent.config.base import Section
from drivers.transport import bus_key
from drivers.config import (  # noqa: F401 - the models, re-exported for the agent side
    KINDS, BatteryConfig, Bno055Config, CameraConfig, GpioEstopConfig, GripperConfig, I2cBus, Ina219Config,
    Ina226Config, LineMotorConfig, Mpu6050Config, Pca9685Config, RoboclawConfig,
    SabertoothConfig, ServoJointConfig,
)

MotorConfig = Union[KINDS["motor"]]  # type: ignore[valid-type]
ImuConfig = Union[KINDS["imu"]]  # type: ignore[valid-type]
PowerConfig = Union[KINDS["power"]]  # type: ignore[valid-type]
ServoConfig = Union[KINDS["servo"]]  # type: ignore[valid-type]
EstopConfig = Union[KINDS["estop"]]  # type: ignore[valid-type]

#: Device kinds configured as one optional section field each (cameras are a list).
SINGLE_KINDS = ("motor", "imu", "power", "servo", "estop")


def _by_kind(kind: str) -> Any:
    """Field default for one device kind: discriminated on ``kind`` when the kind has several models."""
    return Field(None, discriminator="kind") if len(KINDS[kind]) > 1 else Field(None)


class DriversConfig(Section):
    """Every device of the robot; each optional."""

    motor: MotorConfig | None = _by_kind("motor")
    imu: ImuConfig | None = _by_kind("imu")
    power: PowerConfig | None = _by_kind("power")
    servo: ServoConfig | None = _by_kind("servo")
    estop: EstopConfig | None = _by_kind("estop")
    cameras: list[CameraConfig] = Field(default_factory=list, max_length=8)

    @model_validator(mode="after")
    def _unique_cameras(self) -> "DriversConfig":
        ids = [c.id for c in self.cameras]
        if len(ids) != len(set(ids)):
            raise ValueError(f"camera ids used twice: {ids}")
        return self

    @model_validator(mode="after")
    def _unique_i2c_addresses(self) -> "DriversConfig":
        seen: dict[tuple[str, int], str] = {}
        for name, dev in self.devices():
            if dev.transport != "i2c":
                continue
            key = (bus_key(dev.bus), dev.address)
            if key in seen:
                raise ValueError(f"{name} and {seen[key]} both use address 0x{dev.address:02x} on I2C bus {dev.bus!r}")
            seen[key] = name
        return self

    def devices(self) -> list[tuple[str, Any]]:
        """``(kind, section)`` of every configured single device (motor, imu, power, servo, estop), in that order."""
        return [(k, getattr(self, k)) for k in SINGLE_KINDS if getattr(self, k) is not None]

    def transport_urls(self) -> list[tuple[str, str]]:
        """``(kind, port, bus or chip)`` of every configured single device, as text (``sim://``,
        ``/dev/ttyACM0``, ``1``, ``/dev/gpiochip0``)."""
        return [(k, str(dev.endpoint)) for k, dev in self.devices()]
