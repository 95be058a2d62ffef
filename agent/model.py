"""What the control loop gives out: the :class:`Snapshot` of each tick and the robot's description.

A :class:`Snapshot` comes *out* once per control tick; the commands that go in are in
:mod:`agent.commands`. Units are SI: m, s, rad, V, A; duty is dimensionless -1..1. Frames
follow REP-103: body x forward, y left, z up; positive ``omega`` turns left
(counter-clockwise seen from above). Adapters translate their protocol's telemetry out of
:class:`Snapshot`; they hold no robot logic.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

# The drivers' sample types, re-exported for the agent side.
from drivers.types import CameraFrame, ImuSample, MotorFeedback, PowerSample, Quat, Vec3  # noqa: F401


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
        resting: the control loop's next slot after this tick is a rest period away (agent/control/rest.py),
            False: ``1 / rate_hz`` away; None: not known (a snapshot the control loop did not make).
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
    resting: bool | None = None


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
