"""The pure control tick: state, commands and time in; duty, servo pulses and a snapshot out.

No device I/O, no threads, no clock reads: every input is an argument, so a test
can drive it with made-up times and readings (tests/agent/test_control_tick.py).
One tick is two calls with the device I/O between them (agent.control.loop does
that I/O: the duty goes out before the feedback is read, so feedback never
delays the duty):

1. :func:`command` at ``now``: arbitrates each channel (agent.control.arbitration),
   updates the watchdog, turns the winning base command into track speeds
   (agent.control.kinematics: skid-steer, speed limit preserving curvature, acceleration
   ramp; no fresh base command gives zero at once, no ramp) and duty, steps the
   joints (agent.control.joints). Returns the :class:`Plan`: duty and servo pulses to write.
2. :func:`motor_answered` with the duty write's result: a failed write drops every
   base command, so the tracks stay at zero until a command arrives after the
   motor answers again.
3. :func:`check_failsafes` with the device :class:`Readings` (under the lock): the robot's own
   failsafes (agent.control.failsafes) trip, clear or cap through ``state.safety``; a trip
   zeroes the duty at the next tick (the loop wakes one at once).
4. :func:`observe` with the device :class:`Readings`: integrates odometry and
   builds the :class:`~agent.model.Snapshot` (``tracks.left_mps`` is the encoder
   speed, or the commanded speed without encoders or feedback).

:class:`~agent.control.state.ControlState` (agent.control.state) is shared with the robot port
(agent.control.front), which changes it only through its transitions; callers hold
``state.lock`` around :func:`command`, :func:`motor_answered` and :func:`check_failsafes`.
:func:`observe` touches only tick-private state (odometer, counts, seq).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import NamedTuple

from agent.control.arbitration import BASE, JOINTS, Selection
from agent.control.kinematics import ramp
from agent.control.state import STALL_CHECK_S, ControlState, Pair
from agent.commands import JointVelocity
from agent.model import DeviceHealth, ImuSample, JointState, PowerSample, SafetyState, Snapshot, TrackState
from drivers.base import MotorFeedback

log = logging.getLogger(__name__)


class Plan(NamedTuple):
    """What one tick commands (output of :func:`command`).

    Attributes:
        now: tick time, s. dt: time since the previous tick, s.
        applied: track speeds commanded over the last interval, m/s (odometry without encoders).
        cmd: track speeds commanded from now on, m/s. duty: the same as duty in [-1, 1].
        pulses: servo channel -> pulse, us, for every joint and the gripper.
        joints: joint state after this step. gripper: gripper fraction, or None.
        base: the base channel's selection (its winner is ``active_source``).
        watchdog: ``idle`` / ``ok`` / ``expired``. stopped: a stop is latched.
        overridden: source -> commands overridden so far.
        safety: the halts and speed cap in force at this tick.
    """

    now: float
    dt: float
    applied: Pair
    cmd: Pair
    duty: Pair
    pulses: Mapping[int, float]
    joints: JointState
    gripper: float | None
    base: Selection
    watchdog: str
    stopped: bool
    overridden: tuple[tuple[str, int], ...]
    safety: SafetyState = SafetyState()


class Readings(NamedTuple):
    """What the devices said after the duty write (input of :func:`observe`).

    Attributes:
        feedback: motor controller feedback, or None (not read this tick, or failed).
        imu, power: latest sensor samples, or None.
        devices: health of every device. faults: active faults as short strings.
        t_unix_s: Unix time of the tick, s.
        resting: the motor line is at rest (agent/devices/motorio.py: zero acknowledged, tracks still).
        feedback_span: (start, end) monotonic time of the read that got ``feedback``, s, or None.
    """

    feedback: MotorFeedback | None = None
    imu: ImuSample | None = None
    power: PowerSample | None = None
    devices: tuple[DeviceHealth, ...] = ()
    faults: tuple[str, ...] = ()
    t_unix_s: float = 0.0
    resting: bool = False
    feedback_span: tuple[float, float] | None = None


def command(state: ControlState, now: float) -> Plan:
    """Arbitrate, ramp and step the joints at ``now``, s; returns what to write. Caller holds the loop's lock."""
    dt = state.period_s if state.last_t is None else now - state.last_t
    # after a rest slot (up to 0.15 s) the tracks' ramp and the joints' step move by one full-rate period
    # at most, as the first step of a command at 50 Hz: the time at rest was no motion time (a command
    # 0.149 s after a rest tick stepped the tracks to 0.298 m/s at once, 7.5x the acceleration limit's step)
    motion_dt = min(dt, state.period_s) if state.rested else dt
    if state.last_t is not None and now - state.last_t > STALL_CHECK_S:    # ControlState.check_stall's own first test
        state.check_stall(now)
    state.last_t = now
    if not state.motor_ok:
        state.arbiter.drop(channels=(BASE,))
    if state.safety.latched():     # e-stop or failsafe: nothing drives, joints hold where they are
        state.arbiter.halt()
        if state.joints.moving:
            state.joints.hold()
    base = state.arbiter.select(BASE, now)
    joints = state.arbiter.select(JOINTS, now)
    watchdog = state.watchdog.update((base, joints))
    applied = state.cmd
    if base.velocity is None:
        state.cmd = (0.0, 0.0)
    else:
        target = state.base_target(base.velocity)
        if state.cmd is not target:     # at the target (the ramp returned it): ramp() would return it again
            state.cmd = ramp(state.cmd, target, state.max_accel_mps2 * max(motion_dt, 0.0))
    jv = joints.velocity
    state.joints.step(now, motion_dt, jv.qd if isinstance(jv, JointVelocity) else None,
                      joints.winner.source if joints.winner else "")
    if base.driver != state.base_source:
        _note_base_source(state, base)
    return Plan(now=now, dt=dt, applied=applied, cmd=state.cmd, duty=state.duty(),
                pulses=state.joints.pulses(), joints=state.joints.state(), gripper=state.joints.gripper,
                base=base, watchdog=watchdog, stopped=state.stopped, overridden=state.arbiter.overridden(),
                safety=state.safety.state())


def motor_answered(state: ControlState, ok: bool, now: float) -> None:
    """Fold in the duty write's result at ``now``, s: a failure zeroes the tracks, (next tick) drops base
    commands and latches out the sources streaming then (they re-engage as after a stop, so a key
    held through the failure does not drive off when the controller answers again)."""
    if ok == state.motor_ok:
        return
    state.motor_ok = ok
    if ok:
        latched = state.motor_back(now)
        log.info("motor: duty write confirmed again; tracks at zero until a new command arrives%s",
                 f"; {', '.join(latched)} streamed during the failure: latched out until re-engaged" if latched else "")
    else:
        latched = state.arbiter.latch_out_streaming("robot", "a motor controller failure", now)
        # handled (tracks held at zero, the controller reopened): WARNING, once per failure spell
        log.warning("motor: duty write failed; base commands dropped, tracks held at zero%s",
                    f"; {', '.join(latched)} latched out until re-engaged" if latched else "")
        state.cmd = (0.0, 0.0)


def check_failsafes(state: ControlState, plan: Plan, readings: Readings) -> tuple[Plan, bool]:
    """Run the failsafe detectors on this tick's readings and apply their verdict to ``state.safety``
    (``trip`` with the reason, ``condition_cleared``, ``set_speed_cap``). Caller holds the loop's lock.

    Returns:
        The plan carrying the safety state after the verdict (the snapshot shows a trip at once),
        and True when a failsafe newly tripped (its zero duty goes out with the next tick).
    """
    verdict = state.failsafes.update(plan.now, duty=plan.duty, feedback=readings.feedback,
                                     imu=readings.imu, power=readings.power)
    tripped = False
    for kind, reason in verdict.trips:
        tripped |= state.safety.trip(kind, reason, readings.t_unix_s)
    for kind in verdict.cleared:
        state.safety.condition_cleared(kind)
    cap = (verdict.speed_cap_mps, verdict.speed_cap_reason)
    if cap != state.failsafe_cap:       # on change only: the cap is the latches' to hold
        state.failsafe_cap = cap
        state.safety.set_speed_cap(*cap)
    safety = state.safety.state()
    return (plan if safety is plan.safety else plan._replace(safety=safety)), tripped


def observe(state: ControlState, plan: Plan, readings: Readings, resting: bool | None = None) -> Snapshot:
    """Odometry from the readings and the tick's snapshot (``seq`` one above the last); ``resting``: the
    loop's next slot is a rest period away (Snapshot.resting)."""
    fb = readings.feedback
    counts = cps = None
    if fb is not None and fb.left_counts is not None and fb.right_counts is not None:
        counts = (fb.left_counts, fb.right_counts)
        state.counts = counts
    if fb is not None and fb.left_cps is not None and fb.right_cps is not None:
        cps = (fb.left_cps, fb.right_cps)
    reading = state.odometer.measure(plan.dt, counts, cps, plan.applied, readings.feedback_span)
    odom = state.odometer.update(plan.dt, reading)
    cmd, duty = plan.cmd, plan.duty
    state.seq += 1
    return Snapshot(
        seq=state.seq,
        t_mono_s=plan.now,
        t_unix_s=readings.t_unix_s,
        odom=odom,
        tracks=TrackState(cmd[0], cmd[1], duty[0], duty[1], reading.left_mps, reading.right_mps,
                          state.counts[0], state.counts[1]),
        joints=plan.joints,
        gripper=plan.gripper,
        imu=readings.imu,
        power=readings.power,
        active_source=plan.base.driver,
        overridden=plan.overridden,
        watchdog=plan.watchdog,
        stopped=plan.stopped,
        faults=readings.faults,
        devices=readings.devices,
        safety=plan.safety,
        resting=resting,
    )


def _note_base_source(state: ControlState, sel: Selection) -> None:
    src = sel.driver
    if src != state.base_source:
        if src and state.base_source:
            log.info("base: %s takes over from %s", src, state.base_source)
        else:
            log.debug("base: driven by %s", src or "nobody")
        state.base_source = src
