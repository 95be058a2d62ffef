"""One exception tree for the agent and its drivers.

Every error the agent raises derives from :class:`RobotError`, every error a
driver raises from :class:`drivers.errors.DriverError`; the subclasses also
inherit the matching builtin so callers catching ``OSError`` or ``ValueError``
keep working. Boundaries translate foreign errors with
``raise ... from err`` (pyserial, smbus2 ``OSError``, zmq, socket.io).
"""

from __future__ import annotations

# The drivers' own tree (drivers/errors.py), re-exported: ``except agent.errors.DriverError``
# catches every driver failure. Driver errors are OSErrors, not RobotErrors: catch both
# where any robot-agent failure is meant.
from drivers.errors import (  # noqa: F401
    ChecksumError, DeviceClosed, DeviceTimeout, DriverConfigError, DriverError,
)


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
    """A command from a remote source was rejected (bad shape, non-finite, out of range).

    Attributes:
        source: the command source name (``artex``, ``sim2bot``, ``robot_msg``...).
    """

    def __init__(self, message: str, source: str = "") -> None:
        super().__init__(message)
        self.source = source

