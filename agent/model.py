"""The robot model shared by the control loop and every adapter.

Commands go *in* to the control loop (:meth:`agent.control.ControlLoop.submit`);
a :class:`Snapshot` comes *out* once per control tick. Units are SI: m, s,
rad, V, A; duty is dimensionless -1..1. Frames follow REP-103: body x forward,
y left, z up; positive ``omega`` turns left (counter-clockwise seen from above).

Adapters translate their protocol's messages into these commands and their
protocol's telemetry out of :class:`Snapshot`; they hold no robot logic.

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
import time
from dataclasses import dataclass, field
from typing import Union

from agent.errors import CommandError, CommandRejected, NonFiniteValue
# The drivers' sample types, re-exported for the agent side.
from drivers.types import CameraFrame, ImuSample, MotorFeedback, PowerSample, Quat, Vec3  # noqa: F401

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


# --------------------------------------------------------------------------- state


@dataclass(frozen=True, slots=True)
class Odometry:
    """Dead-reckoned pose and twist of the base in the ``odom`` frame.

    Attributes:
        x_m, y_m: position, m. yaw_rad: heading, rad (wrapped to -pi..pi).
        vx_mps: forward speed, m/s. omega_radps: yaw rate, rad/s.
        distance_m: total path length travelled, m.
    """

    x_m: float = 0.0
    y_m: float = 0.0
    yaw_rad: float = 0.0
    vx_mps: float = 0.0
    omega_radps: float = 0.0
    distance_m: float = 0.0


@dataclass(frozen=True, slots=True)
class TrackState:
    """Left and right track: commanded speed (m/s), duty sent (-1..1), measured speed and encoder counts."""

    cmd_left_mps: float = 0.0
    cmd_right_mps: float = 0.0
    duty_left: float = 0.0
    duty_right: float = 0.0
    left_mps: float = 0.0
    right_mps: float = 0.0
    left_counts: int = 0
    right_counts: int = 0


@dataclass(frozen=True, slots=True)
class JointState:
    """Servo joints (gripper excluded), each shape (dof,).

    Attributes:
        names: joint names. q: measured/commanded angle, rad (hobby servos have no
        feedback: q is the angle last written). target: the goal, rad.
        qd, qdd, qddd: rad/s, rad/s^2, rad/s^3 by finite differences over ticks.
    """

    names: tuple[str, ...] = ()
    q: tuple[float, ...] = ()
    target: tuple[float, ...] = ()
    qd: tuple[float, ...] = ()
    qdd: tuple[float, ...] = ()
    qddd: tuple[float, ...] = ()


@dataclass(frozen=True, slots=True)
class DeviceHealth:
    """Supervision state of one configured device.

    Attributes:
        name: config name (``motor``, ``imu``, ``power``, ``servo``, ``camera.front``).
        state: ``ok`` | ``degraded`` (recent errors, still answering) | ``lost`` (not answering, being reopened)
            | ``starting`` (not opened yet, or a camera before its first frame; no failure so far).
        last_error: text of the last error, or "".
        errors: error count since start.
    """

    name: str
    state: str
    last_error: str = ""
    errors: int = 0


@dataclass(frozen=True, slots=True)
class Halt:
    """A latched state that refuses every motion command (docs/safety.md).

    Attributes:
        kind: ``estop``, or a failsafe: ``battery``, ``tilt``, ``stall``.
        reason: one sentence with figures, e.g. "battery 6.1 V below critical 6.4 V for 5.0 s".
        by: who set it: e-stop ``console``, ``cli`` or ``input``; failsafes ``robot``.
        since_unix_s: Unix time it was set, s.
        cleared: failsafes only: the condition is gone; the latch ends with the next fresh motion command.
    """

    kind: str
    reason: str
    by: str
    since_unix_s: float
    cleared: bool = False

    def describe(self) -> str:
        """One line: ``emergency stop set by console since 2026-12-01 18:07:45 UTC: <reason>``."""
        what = "emergency stop" if self.kind == "estop" else f"{self.kind} failsafe"
        when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(self.since_unix_s))
        text = f"{what} set by {self.by} since {when}"
        if self.reason:
            text += f": {self.reason}"
        if self.cleared:
            text += " (condition cleared; ends with the next motion command)"
        return text

    def as_dict(self) -> dict[str, object]:
        """JSON-ready: ``kind``, ``reason``, ``by``, ``since_unix_s`` (s), ``since`` (ISO 8601 UTC), ``cleared``."""
        return {"kind": self.kind, "reason": self.reason, "by": self.by,
                "since_unix_s": round(self.since_unix_s, 3),
                "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.since_unix_s)),
                "cleared": self.cleared}


@dataclass(frozen=True, slots=True)
class SafetyState:
    """Halts and limits in force (agent.control.safety.SafetyLatches.state).

    Attributes:
        halts: latched states that refuse motion now, the e-stop first, then failsafes by kind.
        speed_cap_mps: a failsafe's track speed limit in force (battery low), m/s, or None.
        speed_cap_reason: why the cap is in force ("" without a cap).
    """

    halts: tuple[Halt, ...] = ()
    speed_cap_mps: float | None = None
    speed_cap_reason: str = ""

    @property
    def estop(self) -> Halt | None:
        """The e-stop halt, or None when it is not set."""
        return next((h for h in self.halts if h.kind == "estop"), None)

    @property
    def halted(self) -> bool:
        """Some halt holds (motion refused, tracks at zero)."""
        return bool(self.halts)

    def summary(self) -> str:
        """One line for status text: every halt described, then the speed cap; "" when nothing holds."""
        parts = [h.describe() for h in self.halts]
        if self.speed_cap_mps is not None:
            parts.append(f"speed capped at {self.speed_cap_mps:g} m/s: {self.speed_cap_reason}")
        return "; ".join(parts)

    def as_dict(self) -> dict[str, object]:
        """The one JSON shape every channel shows (docs/safety.md, "Emergency stop"):

        ``estop`` (bool: the e-stop is set), ``halted`` (bool: some halt refuses motion),
        ``halt`` (str: every halt described, "" when none), ``halts`` (list of :meth:`Halt.as_dict`),
        ``speed_cap_mps`` (m/s or None), ``speed_cap_reason`` (str).
        """
        return {"estop": self.estop is not None, "halted": self.halted,
                "halt": "; ".join(h.describe() for h in self.halts),
                "halts": [h.as_dict() for h in self.halts],
                "speed_cap_mps": self.speed_cap_mps, "speed_cap_reason": self.speed_cap_reason}


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything the robot knows after one control tick. Immutable; adapters read it.

    Attributes:
        seq: tick counter (increases by 1 per tick).
        t_mono_s: tick time, s, agent monotonic clock. t_unix_s: the same instant, Unix s.
        active_source: command source in control of the base, or "".
        overridden: source -> count of its commands overridden by a higher-priority source.
        watchdog: ``idle`` (no velocity command), ``ok`` (fresh), ``expired`` (stopped by timeout).
        stopped: a ``stop`` is latched (cleared by the next motion command).
        faults: short strings for active faults (``motor: lost``, ``motor: status 0x0001 E-Stop``).
        safety: the e-stop and failsafe halts in force and the speed cap (:class:`SafetyState`).
    """

    seq: int = 0
    t_mono_s: float = 0.0
    t_unix_s: float = 0.0
    odom: Odometry = field(default_factory=Odometry)
    tracks: TrackState = field(default_factory=TrackState)
    joints: JointState = field(default_factory=JointState)
    gripper: float | None = None
    imu: ImuSample | None = None
    power: PowerSample | None = None
    active_source: str = ""
    overridden: tuple[tuple[str, int], ...] = ()
    watchdog: str = "idle"
    stopped: bool = False
    faults: tuple[str, ...] = ()
    devices: tuple[DeviceHealth, ...] = ()
    safety: SafetyState = field(default_factory=SafetyState)


@dataclass(frozen=True, slots=True)
class RobotDescription:
    """Static description of the robot, from config; what adapters announce.

    Attributes:
        name: robot name (params.json ``name``). kind: params.json ``type``.
        joint_names: servo joints (gripper excluded), shape (dof,).
        joint_limits: (min_rad, max_rad) per joint, shape (dof, 2).
        home: home angle per joint, rad, shape (dof,).
        has_gripper: a gripper servo is configured.
        track_width_m, max_speed_mps: base geometry and limit.
        max_omega_radps: yaw rate at full opposite track speeds, rad/s.
        cameras: configured camera ids, in config order.
    """

    name: str
    kind: str
    joint_names: tuple[str, ...]
    joint_limits: tuple[tuple[float, float], ...]
    home: tuple[float, ...]
    has_gripper: bool
    track_width_m: float
    max_speed_mps: float
    max_omega_radps: float
    cameras: tuple[str, ...]

    @property
    def dof(self) -> int:
        """Number of servo joints (gripper excluded)."""
        return len(self.joint_names)
