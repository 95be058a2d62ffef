"""The commands adapters give the control loop, and the edge where a wire value becomes one.

Commands go *in* to the control loop (:meth:`agent.control.ControlLoop.submit`); what comes
out is in :mod:`agent.model` (the :class:`agent.model.Snapshot`). Units are SI: m, s, rad;
duty is dimensionless -1..1. Frames follow REP-103: body x forward, y left, z up; positive
``omega`` turns left (counter-clockwise seen from above). Adapters translate their protocol's
messages into these commands; they hold no robot logic.

This module is the edge where a wire value becomes a model value, for every
protocol (docs/architecture.md, "One check per command"). Constructors validate
what can be checked without knowing the robot (finite numbers, ranges that are
universal) and raise :class:`agent.errors.CommandRejected`: :func:`finite_number`
is the one finite check, and nothing downstream checks finiteness again.
:meth:`Reach.check` is the one magnitude refusal (a velocity more than
:data:`OVER_LIMIT_FACTOR` times the robot's maximum); the robot port runs it on every
velocity command before anything else. The control loop checks the rest of what
depends on the robot (joint count, joint limits) and clamps to the speed limit
with one function (agent.control.kinematics.scale_to_limit).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Union

from agent.errors import CommandRejected, NonFiniteValue

#: Most joint values one command may carry (the Sim2Bot runtime ceiling).
MAX_JOINTS = 32
#: Most points one trajectory may carry.
MAX_TRAJECTORY_POINTS = 10_000
#: A velocity command more than this many times the robot's maximum is refused, not clamped
#: (:meth:`Reach.check`: vx vs the max speed, omega vs the max yaw rate, qd vs each joint's max speed).
OVER_LIMIT_FACTOR = 10.0


def finite_number(name: str, value: object) -> float:
    """``value`` (an int or float, not a bool) as a finite float: the one finite check. The command
    constructors below call it on every value they hold; parsers call it only on wire numbers that
    never become a model value (an ignored ``vy``, a camera ``fps``), so each number is checked once.

    Raises:
        CommandRejected: not a number, or an integer beyond the float range.
        NonFiniteValue: NaN or infinite.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise CommandRejected(f"{name} must be a number, got {type(value).__name__}")
    try:
        value = float(value)
    except OverflowError as err:
        raise CommandRejected(f"{name} is out of range") from err
    if not math.isfinite(value):
        raise NonFiniteValue(f"{name} must be finite, got {value!r}")
    return value


def _vector(name: str, values: object, limit: int = MAX_JOINTS) -> tuple[float, ...]:
    if isinstance(values, (str, bytes)) or not hasattr(values, "__len__"):
        raise CommandRejected(f"{name} must be a list of numbers, got {type(values).__name__}")
    if len(values) > limit:  # type: ignore[arg-type]
        raise CommandRejected(f"{name} has {len(values)} values, at most {limit} allowed")  # type: ignore[arg-type]
    return tuple(finite_number(f"{name}[{i}]", v) for i, v in enumerate(values))  # type: ignore[arg-type]


# --------------------------------------------------------------------------- commands


@dataclass(frozen=True, slots=True)
class BaseVelocity:
    """Body twist for the tracked base. A velocity command: watchdog applies.

    Attributes:
        vx: forward speed, m/s (+ forward).
        omega: yaw rate, rad/s (+ counter-clockwise / left turn).
    """

    vx: float
    omega: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "vx", finite_number("vx", self.vx))
        object.__setattr__(self, "omega", finite_number("omega", self.omega))


@dataclass(frozen=True, slots=True)
class TrackDuty:
    """Open-loop duty per track, -1..1 (+ drives that track forward). Watchdog applies."""

    left: float
    right: float

    def __post_init__(self) -> None:
        for name in ("left", "right"):
            v = finite_number(name, getattr(self, name))
            if not -1.0 <= v <= 1.0:
                raise CommandRejected(f"{name} duty must be within -1..1, got {v}")
            object.__setattr__(self, name, v)


@dataclass(frozen=True, slots=True)
class JointPosition:
    """Target angle per servo joint, rad, shape (n,) with n <= dof.

    A shorter vector sets the first n joints and leaves the others' targets as they are.
    """

    q: tuple[float, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "q", _vector("q", self.q))


@dataclass(frozen=True, slots=True)
class JointVelocity:
    """Joint velocity per servo joint, rad/s, shape (n,) with n <= dof; integrated each tick.

    A velocity command: the watchdog holds the joints when it goes stale.
    """

    qd: tuple[float, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "qd", _vector("qd", self.qd))


@dataclass(frozen=True, slots=True)
class TrajectoryPoint:
    """One waypoint: ``t`` seconds from trajectory start, ``q`` joint angles, rad."""

    t: float
    q: tuple[float, ...]

    def __post_init__(self) -> None:
        t = finite_number("t", self.t)
        if t < 0:
            raise CommandRejected(f"trajectory time must be >= 0, got {t}")
        object.__setattr__(self, "t", t)
        object.__setattr__(self, "q", _vector("q", self.q))


@dataclass(frozen=True, slots=True)
class JointTrajectory:
    """Joint-space trajectory, linearly interpolated; holds the last point when done.

    Attributes:
        points: waypoints with strictly increasing ``t``; every ``q`` the same length.
        loop: restart from the first point after the last.
    """

    points: tuple[TrajectoryPoint, ...]
    loop: bool = False

    def __post_init__(self) -> None:
        pts = tuple(self.points)
        if not pts:
            raise CommandRejected("trajectory has no points")
        if len(pts) > MAX_TRAJECTORY_POINTS:
            raise CommandRejected(f"trajectory has {len(pts)} points, at most {MAX_TRAJECTORY_POINTS}")
        n = len(pts[0].q)
        for i, p in enumerate(pts):
            if len(p.q) != n:
                raise CommandRejected(f"points[{i}].q has {len(p.q)} values, points[0].q has {n}")
            if i and p.t <= pts[i - 1].t:
                raise CommandRejected(f"points[{i}].t={p.t} is not after points[{i - 1}].t={pts[i - 1].t}")
        if not isinstance(self.loop, bool):
            raise CommandRejected(f"loop must be a boolean, got {type(self.loop).__name__}")
        object.__setattr__(self, "points", pts)


@dataclass(frozen=True, slots=True)
class JointTrajectoryStop:
    """Cancel trajectory playback and hold the current pose."""


@dataclass(frozen=True, slots=True)
class Gripper:
    """Gripper opening, 0 closed .. 1 open, mapped onto the gripper servo's range."""

    fraction: float

    def __post_init__(self) -> None:
        v = finite_number("fraction", self.fraction)
        if not 0.0 <= v <= 1.0:
            raise CommandRejected(f"gripper fraction must be within 0..1, got {v}")
        object.__setattr__(self, "fraction", v)


@dataclass(frozen=True, slots=True)
class Stop:
    """Stop the tracks and freeze the joints where they are. Always obeyed, from any source."""


@dataclass(frozen=True, slots=True)
class Reset:
    """Release this source's external targets: base stops, joints return to home."""


@dataclass(frozen=True, slots=True)
class CalibrateImu:
    """Estimate the gyro bias at rest (robot must be still)."""


@dataclass(frozen=True, slots=True)
class Reach:
    """The robot's velocity maxima, for the edge's over-limit refusal (:meth:`check`).

    Attributes:
        vx_mps: track speed at full duty, m/s (``base.max_speed_mps``).
        omega_radps: yaw rate at full opposite track speeds, rad/s (``2 * vx_mps / track_width_m``).
        joints: (name, max speed rad/s) per servo joint, in joint order.
    """

    vx_mps: float
    omega_radps: float
    joints: tuple[tuple[str, float], ...] = ()

    def check(self, command: "Command") -> None:
        """Refuse a finite but absurd velocity (more than :data:`OVER_LIMIT_FACTOR` x the maximum)
        instead of clamping it to full speed; below that the control loop clamps it to the limit.
        Other commands pass (TrackDuty outside -1..1 is refused by its constructor).

        Raises:
            CommandRejected: naming the field, the value and the maximum.
        """
        k = OVER_LIMIT_FACTOR
        if isinstance(command, BaseVelocity):
            for name, value, top, unit in (("vx", command.vx, self.vx_mps, "m/s"),
                                           ("omega", command.omega, self.omega_radps, "rad/s")):
                if abs(value) > k * top:
                    raise CommandRejected(f"base_velocity {name} {value:g} {unit} is more than {k:g}x the maximum "
                                          f"{top:g} {unit}; refused (not clamped to full speed)")
        elif isinstance(command, JointVelocity):
            for (name, top), qd in zip(self.joints, command.qd):
                if abs(qd) > k * top:
                    raise CommandRejected(f"joint_velocity {name} {qd:g} rad/s is more than {k:g}x its "
                                          f"max_speed_radps {top:g}; refused")


Command = Union[
    BaseVelocity, TrackDuty, JointPosition, JointVelocity, JointTrajectory,
    JointTrajectoryStop, Gripper, Stop, Reset, CalibrateImu,
]

#: Commands that carry a deadline: the watchdog stops them when no fresh one arrives.
VELOCITY_COMMANDS = (BaseVelocity, TrackDuty, JointVelocity)
