"""One abstract base class per device kind.

Drivers are synchronous: they talk pyserial, smbus2 and OpenCV, which block.
The agent calls them only from its control thread or a per-bus worker thread,
never from the asyncio event loop. Every driver:

- receives its transport (a ``serial.Serial``, an smbus2-compatible bus object,
  a ``cv2.VideoCapture`` factory) or a factory for it, never opens a global;
- raises only :class:`drivers.errors.DriverError` (or a subclass), wrapping the
  cause with ``raise ... from err`` and keeping ``errno`` / device ``status``;
- converts to SI at its edge (m/s^2, rad/s, V, A, W, s, rad);
- has an idempotent ``close()``; using a closed driver raises ``DeviceClosed``;
- is a context manager.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from drivers.errors import DriverError
from drivers.types import ImuSample, MotorFeedback, PowerSample


class Device(ABC):
    """Lifecycle shared by every driver."""

    #: Config name of the device, used in errors and health reports.
    name: str = ""

    @abstractmethod
    def open(self) -> None:
        """Bring the device up (register writes at init, controller timeout...). Raises DriverError."""

    @abstractmethod
    def close(self) -> None:
        """Put outputs in a safe state where possible, release the transport. Idempotent, never raises."""

    def __enter__(self):
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class MotorController(Device):
    """Two-channel motor controller driving the left and right tracks.

    Sign convention: positive duty drives that track forward (the robot moves
    +x when both are positive). Channel mapping and per-side inversion are
    configuration of the driver, not of the control loop.
    """

    @abstractmethod
    def set_duty(self, left: float, right: float) -> None:
        """Command open-loop duty, each -1..1 (clamped). Raises DriverError."""

    def stop(self) -> None:
        """Command zero on both tracks. Raises DriverError."""
        self.set_duty(0.0, 0.0)

    @abstractmethod
    def read_feedback(self) -> MotorFeedback:
        """Read encoders, battery, currents and status, whatever the device offers. Raises DriverError."""


class Imu(Device):
    """Inertial measurement unit, body frame x forward, y left, z up."""

    @abstractmethod
    def read(self) -> ImuSample:
        """One sample in SI units with the gyro bias removed. Raises DriverError."""

    def calibrate_gyro(self, samples: int = 200) -> tuple[float, float, float]:
        """Estimate the gyro bias at rest from ``samples`` reads; returns it, rad/s. Raises DriverError."""
        raise DriverError(f"{type(self).__name__} has no gyro calibration", device=self.name)


class PowerMonitor(Device):
    """Battery voltage / current monitor."""

    @abstractmethod
    def read(self) -> PowerSample:
        """Bus voltage V, current A (+ discharging), power W. Raises DriverError."""


class ServoController(Device):
    """Multi-channel hobby-servo PWM output."""

    @abstractmethod
    def set_pulse_us(self, channel: int, pulse_us: float) -> None:
        """Output ``pulse_us`` microseconds high per period on ``channel``. Raises DriverError."""

    @abstractmethod
    def release(self, channel: int) -> None:
        """Turn ``channel`` fully off (servo unpowered, limp). Raises DriverError."""


class SwitchInput(Device):
    """A two-state contact input, e.g. a normally-closed e-stop circuit."""

    @abstractmethod
    def read(self) -> bool:
        """True while the circuit is closed, False while it is open. Raises DriverError (line gone)."""

    @abstractmethod
    def wait(self, timeout_s: float) -> bool:
        """Block up to ``timeout_s`` s for a change of the line; True when one arrived. Raises DriverError."""
