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
    """A command from a remote source was not carried out; nothing changed.

    The base of :class:`CommandRejected` (bad input) and :class:`CommandDeclined` (valid, but
    not now). Callers tell them apart by type (and ``reason``), never by message text.

    Attributes:
        source: the command source name (``artex``, ``sim2bot``, ``robot_msg``...).
        reason: short counter key (``invalid``, ``non_finite``, ``declined``...).
        detail: what tells this error from others of its reason in a rate-limited log's summary
            (``key 'vx'``, ``70000 bytes``: agent.support.ratelimit.RateLimitedLog), or ""; may hold a
            peer's text: escape it where it is shown (RateLimitedLog does).
    """

    default_reason = "invalid"

    def __init__(self, message: str, source: str = "", reason: str = "", *, detail: str = "") -> None:
        super().__init__(message)
        self.source = source
        self.reason = reason or self.default_reason
        self.detail = detail


class CommandRejected(CommandError):
    """Bad input: wrong shape or type, out-of-range value, unknown name or kind."""


class NonFiniteValue(CommandRejected):
    """A number in a command is NaN or infinite."""

    default_reason = "non_finite"


class CommandDeclined(CommandError):
    """A valid command the robot will not carry out now or at all: a stop-latched source, no
    such camera or gripper, too many streams, a closed control loop, a scene message on a tank."""

    default_reason = "declined"

