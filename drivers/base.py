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
- is a context manager;
- declares its capabilities here, on its base class, with defaults (the agent never probes a
  driver with ``hasattr`` / ``getattr`` / ``isinstance``): :attr:`Device.poll_period_s`,
  :attr:`Device.rest_poll_period_s`,
  :attr:`MotorController.duty_may_slip`, :meth:`MotorController.own_timeout_s`,
  :meth:`MotorController.feedback_hz`, :meth:`Imu.gyro_calibration`,
  :attr:`ServoController.check_period_s` with :meth:`ServoController.check_setup`.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, ClassVar

from drivers.errors import DriverError
from drivers.types import ImuSample, MotorFeedback, PowerSample, Vec3

#: Feedback sets a motor controller is asked for per second when its config names no rate, Hz.
DEFAULT_FEEDBACK_HZ = 20.0

#: ``between()`` inside a feedback set: the duty (left, right) posted meanwhile, to write before the
#: next transaction, or None.
Between = Callable[[], "tuple[float, float] | None"]


class Device(ABC):
    """Lifecycle shared by every driver."""

    #: Config name of the device, used in errors and health reports.
    name: str = ""
    #: Shortest useful time between two reads, s: a driver that buffers samples (the MPU-6050's FIFO)
    #: is read at this period when it is longer than the configured rate's; 0: at the configured rate.
    poll_period_s: float = 0.0
    #: Longest time between two reads with no sample lost, s, for a reader that needs no fresh sample
    #: soon (the agent's I2C bus worker while the tank is at rest); 0: no longer than ``poll_period_s``.
    rest_poll_period_s: float = 0.0

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

    #: True when a duty posted while a feedback set (several transactions) is read may be written
    #: between its transactions: the agent then calls ``read_feedback(between)`` (:data:`Between`),
    #: else ``read_feedback()``.
    duty_may_slip: ClassVar[bool] = False

    @classmethod
    def own_timeout_s(cls, cfg: Any) -> float | None:
        """The controller's own stop timeout with config ``cfg`` (it zeroes its outputs after this long
        without a command), s; None (the default) when it has none. The agent refreshes an unchanged
        duty well within it."""
        return None

    @classmethod
    def feedback_hz(cls, cfg: Any) -> float:
        """Feedback sets worth reading per second with config ``cfg``, Hz (default :data:`DEFAULT_FEEDBACK_HZ`)."""
        return DEFAULT_FEEDBACK_HZ

    @abstractmethod
    def set_duty(self, left: float, right: float) -> None:
        """Command open-loop duty, each -1..1 (clamped: the driver's device edge; a non-finite duty
        raises DriverError and nothing is sent). Raises DriverError."""

    def stop(self) -> None:
        """Command zero on both tracks. Raises DriverError."""
        self.set_duty(0.0, 0.0)

    @abstractmethod
    def read_feedback(self) -> MotorFeedback:
        """Read encoders, battery, currents and status, whatever the device offers (one feedback set).
        A driver with :attr:`duty_may_slip` also takes ``between`` (:data:`Between`). Raises DriverError."""


class Imu(Device):
    """Inertial measurement unit, body frame x forward, y left, z up."""

    @abstractmethod
    def read(self) -> ImuSample:
        """One sample in SI units with the gyro bias removed. Raises DriverError."""

    def gyro_calibration(self, samples: int = 200) -> "GyroCalibrationSteps | None":
        """The gyro bias calibration from ``samples`` reads at rest, one read per ``step()``, or None
        (the default) when this IMU has none (a fusion chip calibrates itself). No I/O here.
        Raises DriverError (bad ``samples``)."""
        return None

    def calibrate_gyro(self, samples: int = 200) -> Vec3:
        """Estimate the gyro bias at rest from ``samples`` reads; returns it, rad/s. Raises DriverError
        (none on this IMU, bus error, not at rest)."""
        cal = self.gyro_calibration(samples)
        if cal is None:
            raise DriverError(f"{type(self).__name__} has no gyro calibration", device=self.name)
        while not cal.done:
            cal.step()
            time.sleep(cal.period_s)
        return cal.finish()


class GyroCalibrationSteps(ABC):
    """A gyro calibration taken one read at a time (:meth:`Imu.gyro_calibration`).

    Attributes:
        period_s: the pause to keep between two steps, s.
    """

    period_s: float = 0.0

    @property
    @abstractmethod
    def done(self) -> bool:
        """True once every sample was read."""

    @abstractmethod
    def step(self) -> None:
        """Read one sample. Raises DriverError (bus error)."""

    @abstractmethod
    def finish(self) -> Vec3:
        """Check the robot was still and keep the new bias; returns it, rad/s. Raises DriverError."""


class PowerMonitor(Device):
    """Battery voltage / current monitor."""

    @abstractmethod
    def read(self) -> PowerSample:
        """Bus voltage V, current A (+ discharging), power W. Raises DriverError."""


class ServoController(Device):
    """Multi-channel hobby-servo PWM output."""

    #: How often the agent asks the chip whether it kept its setup (:meth:`check_setup`), s; 0: never.
    check_period_s: float = 0.0

    def check_setup(self) -> None:
        """Check that the chip still holds the setup ``open()`` wrote; one that lost it (power-cycled
        with no bus error) is set up again with its last commanded outputs, then
        :class:`drivers.errors.DeviceReset` is raised. The default checks nothing.
        Raises DriverError (bus error), DeviceReset."""

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
