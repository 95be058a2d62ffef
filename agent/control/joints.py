"""Servo joints and gripper: targets, slew limit, trajectories, angle -> pulse.

Hobby servos have no feedback, so ``q`` is the angle last commanded. Each tick
:meth:`JointController.step` moves ``q`` towards ``target`` by at most
``max_speed_radps * dt`` per joint (cfg.drivers.servo.joints), within
``[min_rad, max_rad]``. Modes:

- ``hold``: target = q (start at home, after Stop / JointTrajectoryStop / a stale velocity).
- ``position``: JointPosition sets the first n targets; q slews there.
- ``velocity``: the arbitrated JointVelocity is integrated into the target each
  tick; with no fresh one the joints hold where they are.
- ``trajectory``: JointTrajectory, linear interpolation in time from the pose
  at its arrival through its points; the last point is held, or with ``loop``
  playback wraps from the last point back to the first.

Pulses: angle ``[min_rad, max_rad]`` maps linearly onto ``[min_us, max_us]``
(either may be the larger: a reversed servo); gripper fraction 0..1 onto
``[closed_us, open_us]`` (hardware-reference §6.6 turns microseconds into
PCA9685 counts).

Targets outside the joint limits are clamped with one warning per source and
command kind, up to :data:`TARGET_MARGIN_RAD` (one full turn) beyond a limit; a target
farther out is refused (:meth:`JointController.check_position`, ``check_trajectory``:
:class:`~agent.errors.CommandRejected` naming the field and the joint), the same for
every protocol, as a velocity more than 10x the maximum is. Wrong shapes are
:class:`~agent.errors.CommandRejected`. Not thread-safe: the control loop calls it under its lock.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise

from agent.config.drivers import GripperConfig, ServoJointConfig
from agent.errors import CommandError, CommandRejected
from agent.commands import JointTrajectory
from agent.model import JointState

log = logging.getLogger(__name__)

HOLD, POSITION, VELOCITY, TRAJECTORY = "hold", "position", "velocity", "trajectory"

#: A position target more than this beyond its joint's limit is refused, not clamped, rad: one full
#: turn. Within it a target is clamped to the limit (a controller's small overshoot, an angle given
#: in another turn); beyond it no servo angle is meant (``1e300``, a value in degrees or counts).
TARGET_MARGIN_RAD = 2.0 * math.pi


def angle_to_pulse_us(q_rad: float, joint: ServoJointConfig) -> float:
    """Joint angle, rad -> servo pulse, us (linear, clamped to the joint's range).

    Example: min -1.5708 rad/500 us, max 1.5708 rad/2500 us; 0.7854 rad -> 2000 us.
    """
    q = min(max(q_rad, joint.min_rad), joint.max_rad)
    frac = (q - joint.min_rad) / (joint.max_rad - joint.min_rad)
    return joint.min_us + frac * (joint.max_us - joint.min_us)


def gripper_pulse_us(fraction: float, gripper: GripperConfig) -> float:
    """Gripper opening 0 (closed) .. 1 (open) -> pulse, us. Example: 0.25 of 1000..2000 us -> 1250 us."""
    f = min(max(fraction, 0.0), 1.0)
    return gripper.closed_us + f * (gripper.open_us - gripper.closed_us)


def interpolate(points: Sequence[tuple[float, Sequence[float]]], t: float) -> list[float]:
    """Piecewise-linear value at time ``t`` through ``(t, q)`` points with strictly increasing t.

    Before the first point: the first q; after the last: the last q.
    """
    if t <= points[0][0]:
        return list(points[0][1])
    for (t0, q0), (t1, q1) in pairwise(points):
        if t <= t1:
            a = (t - t0) / (t1 - t0)
            return [x0 + a * (x1 - x0) for x0, x1 in zip(q0, q1)]
    return list(points[-1][1])


@dataclass
class _Trajectory:
    points: list[tuple[float, tuple[float, ...]]]   # t from start, clamped q (n values)
    start_s: float
    loop: bool
    q0: tuple[float, ...]                          # first n joints' pose when it arrived

    @property
    def end_s(self) -> float:
        return self.points[-1][0]

    def sample(self, now: float) -> tuple[list[float], bool]:
        """Target at ``now`` and whether playback is finished (never for a loop)."""
        t = now - self.start_s
        if t >= self.end_s:
            if not self.loop:
                return list(self.points[-1][1]), True
            t = t % self.end_s if self.end_s > 0 else 0.0
            lead = self.points[-1][1]     # later cycles start from the last point
        else:
            lead = self.q0
        pts = self.points if self.points[0][0] == 0.0 else [(0.0, lead), *self.points]
        return interpolate(pts, t), False


class JointController:
    """Targets and commanded angles of the servo joints and the gripper; see the module docstring.

    Args:
        joints: servo joint configs, shape (dof,) (cfg.drivers.servo.joints).
        gripper: gripper servo config, or None.
    """

    def __init__(self, joints: Sequence[ServoJointConfig], gripper: GripperConfig | None) -> None:
        self.joints = tuple(joints)
        self.gripper_cfg = gripper
        self.names = tuple(j.name for j in self.joints)
        self.home = tuple(j.home_rad for j in self.joints)
        self.q = list(self.home)
        self.target = list(self.home)
        self.qd = [0.0] * self.dof
        self.qdd = [0.0] * self.dof
        self.qddd = [0.0] * self.dof
        self.gripper = gripper.home_fraction if gripper is not None else None
        self.mode = HOLD
        self.owner = ""
        self._traj: _Trajectory | None = None
        self._warned: set[tuple[str, str]] = set()
        # per-tick work skipped while nothing moves (the control loop asks every tick):
        self._settled = False        # the last step changed nothing: the next one without a command won't either
        self._state: JointState | None = None               # state() until q, target or a derivative changes
        self._pulses: tuple[tuple, dict[int, float]] | None = None  # (q and gripper, pulses()) last computed

    @property
    def dof(self) -> int:
        """Number of servo joints (gripper excluded)."""
        return len(self.joints)

    @property
    def moving(self) -> bool:
        """True while a trajectory or velocity runs or q has not reached the target."""
        return self.mode in (TRAJECTORY, VELOCITY) or any(a != b for a, b in zip(self.q, self.target))

    # ------------------------------------------------------------------ validation
    def check_length(self, what: str, n: int) -> None:
        """Raise CommandRejected unless 1 <= n <= dof."""
        if self.dof == 0:
            raise CommandRejected(f"{what}: this robot has no servo joints")
        if n == 0:
            raise CommandRejected(f"{what}: no values")
        if n > self.dof:
            raise CommandRejected(f"{what}: {n} values for {self.dof} joints ({', '.join(self.names)})")

    def check_targets(self, what: str, q: Sequence[float]) -> None:
        """Raise CommandRejected (reason ``out_of_range``) when a target angle lies more than
        :data:`TARGET_MARGIN_RAD` outside its joint's ``[min_rad, max_rad]``.

        Args:
            what: the field, for the message (``joint_position q``); each value is named
                ``what[i]`` with its joint's name.
            q: target angles, rad, for the first len(q) joints.
        """
        for i, (v, j) in enumerate(zip(q, self.joints)):
            if not j.min_rad - TARGET_MARGIN_RAD <= v <= j.max_rad + TARGET_MARGIN_RAD:
                raise CommandRejected(
                    f"{what}[{i}] ({j.name}) {v:g} rad is more than a full turn ({TARGET_MARGIN_RAD:.4g} rad) "
                    f"outside the joint's limits {j.min_rad:g}..{j.max_rad:g} rad; refused (not clamped)",
                    reason="out_of_range")

    def check_position(self, q: Sequence[float]) -> None:
        """Raise CommandRejected when a JointPosition's ``q`` (rad) does not fit the joints: wrong
        length, or a target far outside its limits (:meth:`check_targets`)."""
        self.check_length("joint_position q", len(q))
        self.check_targets("joint_position q", q)

    def check_trajectory(self, traj: JointTrajectory) -> None:
        """Raise CommandRejected when the trajectory's points do not fit the joints: wrong length,
        or a point's target far outside its limits (:meth:`check_targets`)."""
        self.check_length("joint_trajectory points[0].q", len(traj.points[0].q))
        for i, point in enumerate(traj.points):
            self.check_targets(f"joint_trajectory points[{i}].q", point.q)

    def check_gripper(self) -> None:
        """Raise CommandRejected when no gripper is configured."""
        if self.gripper_cfg is None:
            raise CommandRejected("gripper: this robot has no gripper")

    def _clamp(self, source: str, what: str, values: Sequence[float], rates: bool = False) -> list[float]:
        """Clamp angles to the joint limits (or rates to +-max_speed_radps), warning once per source."""
        out = []
        bad = []
        for v, j in zip(values, self.joints):
            lo, hi = (-j.max_speed_radps, j.max_speed_radps) if rates else (j.min_rad, j.max_rad)
            c = min(max(v, lo), hi)
            if c != v:
                bad.append(f"{j.name}={v:.4g} outside {lo:.4g}..{hi:.4g}")
            out.append(c)
        if bad and (source, what) not in self._warned:
            self._warned.add((source, what))
            log.warning("%s from %s: clamped to %s: %s (warned once per source)", what, source,
                        "max_speed_radps" if rates else "joint limits", "; ".join(bad))
        return out

    # ------------------------------------------------------------------ commands
    def set_position(self, source: str, q: Sequence[float]) -> None:
        """Targets for the first len(q) joints, rad, clamped to limits; cancels trajectory/velocity.
        Raises CommandError as :meth:`check_position` (nothing changes then)."""
        self.check_position(q)
        self.target[:len(q)] = self._clamp(source, "joint_position", q)
        self._traj = None
        self.mode = POSITION
        self.owner = source
        self._moved()

    def start_trajectory(self, source: str, traj: JointTrajectory, now: float) -> None:
        """Play ``traj`` from ``now`` (t = 0), from the current pose to its first point."""
        self.check_trajectory(traj)
        pts = [(p.t, tuple(self._clamp(source, "joint_trajectory", p.q))) for p in traj.points]
        n = len(pts[0][1])
        self._traj = _Trajectory(pts, now, traj.loop, tuple(self.q[:n]))
        self.mode = TRAJECTORY
        self.owner = source
        self._moved()

    def hold(self) -> None:
        """Cancel trajectory/velocity/position motion; hold the angles last written."""
        self._traj = None
        self.target = list(self.q)
        self.mode = HOLD
        self._moved()

    def go_home(self, source: str) -> None:
        """Targets back to every joint's ``home_rad`` and the gripper to ``home_fraction``."""
        self._traj = None
        self.target = list(self.home)
        self.mode = POSITION
        self.owner = source
        self._moved()
        if self.gripper_cfg is not None:
            self.gripper = self.gripper_cfg.home_fraction

    def set_gripper(self, fraction: float) -> None:
        """Gripper opening 0..1 (validated by agent.commands.Gripper)."""
        self.check_gripper()
        self.gripper = min(max(fraction, 0.0), 1.0)

    # ------------------------------------------------------------------ tick
    def step(self, now: float, dt: float, qd: Sequence[float] | None, source: str = "") -> None:
        """Advance one tick of ``dt`` seconds.

        Args:
            now: tick time, s (trajectory clock).
            dt: time since the previous tick, s (<= 0: no motion, derivatives kept).
            qd: the arbitrated joint velocity, rad/s, shape (n <= dof,), or None when
                no fresh one; joints beyond n get 0.
            source: the source of ``qd``.
        """
        if self._settled and qd is None and dt > 0 and self._traj is None and self.mode != VELOCITY:
            return      # the last step was a fixed point (q at target, derivatives zero): so is this one
        self._moved()
        if qd is not None:
            if self.mode != VELOCITY:
                self._traj = None
                self.target = list(self.q)
                self.mode = VELOCITY
                self.owner = source
            if dt > 0:
                rates = self._clamp(source, "joint_velocity", qd, rates=True)
                for i, rate in enumerate(rates):
                    j = self.joints[i]
                    self.target[i] = min(max(self.target[i] + rate * dt, j.min_rad), j.max_rad)
        elif self.mode == VELOCITY:
            self.hold()
        elif self._traj is not None:
            q, done = self._traj.sample(now)
            self.target[:len(q)] = q
            if done:
                self._traj = None
                self.mode = POSITION
        if dt <= 0:
            return
        new_q = []
        for i, j in enumerate(self.joints):
            step = j.max_speed_radps * dt
            d = self.target[i] - self.q[i]
            new_q.append(self.target[i] if abs(d) <= step else self.q[i] + math.copysign(step, d))
        qd_new = [(a - b) / dt for a, b in zip(new_q, self.q)]
        qdd_new = [(a - b) / dt for a, b in zip(qd_new, self.qd)]
        qddd_new = [(a - b) / dt for a, b in zip(qdd_new, self.qdd)]
        self._settled = (new_q == self.q and qd_new == self.qd and qdd_new == self.qdd and qddd_new == self.qddd
                         and qd is None and self._traj is None)
        self.q, self.qd, self.qdd, self.qddd = new_q, qd_new, qdd_new, qddd_new

    def _moved(self) -> None:
        """Something may change q, target or the derivatives: the next step computes, state() builds anew."""
        self._settled = False
        self._state = None

    # ------------------------------------------------------------------ outputs
    def state(self) -> JointState:
        """Snapshot of the joints (agent.model.JointState); the same object while nothing changed."""
        if self._state is None:
            self._state = JointState(self.names, tuple(self.q), tuple(self.target), tuple(self.qd),
                                     tuple(self.qdd), tuple(self.qddd))
        return self._state

    def pulses(self) -> dict[int, float]:
        """Servo channel -> pulse, us, for every joint and the gripper (rounded to 0.01 us); the same
        dict while q and the gripper are unchanged (do not modify it)."""
        key = (*self.q, self.gripper)
        if self._pulses is not None and self._pulses[0] == key:
            return self._pulses[1]
        out = {j.channel: round(angle_to_pulse_us(q, j), 2) for j, q in zip(self.joints, self.q)}
        if self.gripper_cfg is not None and self.gripper is not None:
            out[self.gripper_cfg.channel] = round(gripper_pulse_us(self.gripper, self.gripper_cfg), 2)
        self._pulses = (key, out)
        return out
