"""One exception tree for the agent and its drivers.

Every error the agent raises derives from :class:`RobotError`; the subclasses
also inherit the matching builtin so callers catching ``OSError`` or
``ValueError`` keep working. Boundaries translate foreign errors with
``raise ... from err`` (pyserial, smbus2 ``OSError``, zmq, socket.io).
"""

from __future__ import annotations


class RobotError(Exception):
    """Base of every robot-agent error."""


class ConfigError(RobotError, ValueError):
    """Configuration is invalid.

    Attributes:
        problems: list of ``(json_path, message)`` pairs, one per problem.
    """

    def __init__(self, message: str, problems: list[tuple[str, str]] | None = None) -> None:
        super().__init__(message)
        self.problems = problems or []


class CommandError(RobotError, ValueError):
    """A command from a remote source was not carried out; nothing changed.

    The base of :class:`CommandRejected` (bad input) and :class:`CommandDeclined` (valid, but
    not now). Callers tell them apart by type (and ``reason``), never by message text.

    Attributes:
        source: the command source name (``artex``, ``sim2bot``, ``robot_msg``...).
        reason: short counter key (``invalid``, ``non_finite``, ``declined``...).
    """

    default_reason = "invalid"

    def __init__(self, message: str, source: str = "", reason: str = "") -> None:
        super().__init__(message)
        self.source = source
        self.reason = reason or self.default_reason


class CommandRejected(CommandError):
    """Bad input: wrong shape or type, out-of-range value, unknown name or kind."""


class NonFiniteValue(CommandRejected):
    """A number in a command is NaN or infinite."""

    default_reason = "non_finite"


class CommandDeclined(CommandError):
    """A valid command the robot will not carry out now or at all: a stop-latched source, no
    such camera or gripper, too many streams, a closed control loop, a scene message on a tank."""

    default_reason = "declined"


class DriverError(RobotError, IOError):
    """A device driver failed.

    Attributes:
        device: configured device name (``motor``, ``imu``...).
        errno: OS errno when the cause was an ``OSError`` (121 NACK, 110 timeout, 5 EIO...).
        status: device status word when the device itself reported the fault.
    """

    def __init__(self, message: str, device: str = "", errno: int | None = None,
                 status: int | None = None) -> None:
        super().__init__(message)
        self.device = device
        self.errno = errno
        self.status = status


class DeviceClosed(DriverError):
    """The driver was used after ``close()``."""


class DeviceTimeout(DriverError, TimeoutError):
    """The device did not answer in time (missing ack, short read)."""


class ChecksumError(DriverError):
    """A reply failed its CRC / checksum."""
