"""The control loop's state and its transitions: what a command, a stop, a release or an e-stop does.

:class:`ControlState` is what the tick (agent.control.tick) carries from one iteration to the
next, and it owns the rules that keep its parts consistent (docs/safety.md): a velocity
command becomes an arbitration claim unless a halt or the stop latch refuses it; a stop
drops every claim, latches out the other sources that were streaming, holds the joints and
sets ``stopped``; an accepted motion command clears ``stopped``; an e-stop drops every claim
and holds the joints. Each transition takes :attr:`ControlState.lock` and reads the clock
under it; it returns what happened, and its caller (agent.control.front.Front, after
validating the command's values) logs and wakes the scheduler. The pure tick functions are
called under the same lock by agent.control.loop.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import NamedTuple

from agent.config import AgentConfig
from agent.control.arbitration import BASE, JOINTS, Arbiter, Claim, Watchdog
from agent.control.failsafes import resolve as resolve_failsafes
from agent.control.joints import JointController
from agent.control.kinematics import Odometer, limited_tracks, scale_to_limit, tracks_to_duty
from agent.control.safety import SafetyLatches
from agent.control.stoplatch import Engage, is_zero
from agent.errors import CommandDeclined
from agent.commands import (
    BaseVelocity, Command, Gripper, JointPosition, JointTrajectory, JointVelocity, Reset, TrackDuty,
)
from agent.model import Halt

Pair = tuple[float, float]

#: Sources whose protocol has a reset (Sim2Bot ``reset``, robot_msg ctrl_mode home): the stop latch's
#: refusal names it as a way to re-engage; ARTEX and the console have none.
RESET_SOURCES = ("sim2bot", "robot_msg")

log = logging.getLogger("agent.control.tick")     # the stall is the loop's: one logger for it

#: A gap since the last tick longer than this is checked for a stall (Arbiter.latch_out_stalled: a
#: source is latched out when the gap outlasted its own timeout, 0.5 s by default), s; shorter
#: gaps are a late tick.
STALL_CHECK_S = 0.1


class Offered(NamedTuple):
    """What :meth:`ControlState.offer_velocity` did.

    Attributes:
        changed: a new value (or the same after its claim ended, or after a stop): run a tick now;
            False for a repeat that only refreshes the watchdog.
        engaged: the source was latched out and re-engaged with this command (the latch, and how), or None.
    """

    changed: bool
    engaged: Engage | None = None


class Stopped(NamedTuple):
    """What :meth:`ControlState.stop` did.

    Attributes:
        repeated: nothing changed (already stopped, nothing moving, no velocity claim dropped).
        dropped: the claims dropped.
        held: the sources latched out until they re-engage, sorted.
    """

    repeated: bool
    dropped: tuple[Claim, ...]
    held: tuple[str, ...]


class ControlState:
    """What the tick carries from one iteration to the next, the commands it executes, and the
    transitions that change them; see the module docstring.

    Args:
        cfg: validated configuration (base geometry, sources, joints, rate).
        clock: monotonic clock, s, the tick's (transitions read it under the lock).

    Attributes:
        lock: held by every transition, and by the loop around the tick functions.
        arbiter, watchdog, joints: claims per channel (and the stop latch), velocity freshness,
            servo joints.
        cmd: track speeds commanded at the last tick, after the ramp, m/s.
        stopped: a ``Stop`` came and no motion command was accepted since (docs/safety.md).
        safety: the e-stop, failsafe latches and speed cap (agent.control.safety); while a halt
            holds every claim is dropped and the tracks are commanded to zero (no ramp).
        failsafes: the configured failsafe detectors (agent.control.failsafes; ``warnings``
            names those off for want of a device). failsafe_cap: the last speed cap they set.
        motor_ok: the last duty write was confirmed.
        outage_streams: while ``motor_ok`` is False, source -> the time of its last non-zero base
            velocity command (its zero, stop or reset removes it): those streaming when the controller
            answers again are latched out then (:meth:`motor_back`).
        max_speed_mps, max_accel_mps2: runtime base limits (:meth:`set_limits`).
        full_duty_mps: track speed at duty 1.0, m/s (``base.max_speed_mps``).
        period_s: control period, s; the ``dt`` of the first tick.
        last_t: time of the last tick, s, or None before the first.
        rested: the last tick began or kept a rest (agent/control/rest.py): the time since it is not motion
            time (agent.control.tick.command ramps the first step from it over one ``period_s`` at most).
        counts: last encoder counts (left, right). seq: ``seq`` of the last snapshot.
    """

    def __init__(self, cfg: AgentConfig, *, clock: Callable[[], float] = time.monotonic) -> None:
        servo = cfg.drivers.servo
        self.lock = threading.Lock()
        self._clock = clock
        self.joints = JointController(servo.joints if servo else (), servo.gripper if servo else None)
        self.arbiter = Arbiter.from_config(cfg)
        self.watchdog = Watchdog()
        self.safety = SafetyLatches()
        self.failsafes = resolve_failsafes(cfg)
        self.failsafe_cap: tuple[float | None, str] = (None, "")
        self.odometer = Odometer(cfg.base.track_width_m, cfg.base.counts_per_m, cfg.base.max_speed_mps)
        self.track_width_m = cfg.base.track_width_m
        self.full_duty_mps = cfg.base.max_speed_mps
        self.max_speed_mps = cfg.base.max_speed_mps
        self.max_accel_mps2 = cfg.base.max_accel_mps2
        self.period_s = 1.0 / cfg.control.rate_hz
        self.cmd: Pair = (0.0, 0.0)
        self._target: tuple[Command | None, float, Pair] | None = None     # base_target's last (command, limit, out)
        self._duty: tuple[Pair | None, Pair] = (None, (0.0, 0.0))           # duty()'s last (cmd, duty)
        self.stopped = False
        self.motor_ok = True
        self.outage_streams: dict[str, float] = {}
        self.base_source = ""
        self.last_t: float | None = None
        self.rested = False
        self.counts = (0, 0)
        self.seq = 0

    def base_target(self, command: Command | None) -> Pair:
        """Track speeds, m/s, that ``command`` asks for under the current limits (the runtime
        ``max_speed_mps`` and the failsafe speed cap, the lower one); (0, 0) for None.

        The same command object under the same limit gives the same pair object (computed once: a
        claim's command drives every tick until the next one arrives); a new command or a new limit
        (``set_limits``, a failsafe's cap) computes it anew."""
        limit = self.safety.cap(self.max_speed_mps)
        known = self._target
        if known is not None and known[0] is command and known[1] == limit:
            return known[2]
        if isinstance(command, BaseVelocity):
            out = limited_tracks(command.vx, command.omega, self.track_width_m, limit)
        elif isinstance(command, TrackDuty):
            out = scale_to_limit(command.left * self.full_duty_mps, command.right * self.full_duty_mps, limit)
        else:
            out = 0.0, 0.0
        self._target = (command, limit, out)
        return out

    def duty(self) -> Pair:
        """:attr:`cmd` as duty in [-1, 1] (agent.control.kinematics.tracks_to_duty); computed again only when
        ``cmd`` is another object (the ramp gives the target itself once there, a still tank one constant)."""
        known = self._duty
        if known[0] is not self.cmd:
            known = self._duty = (self.cmd, tracks_to_duty(self.cmd[0], self.cmd[1], self.full_duty_mps))
        return known[1]

    def next_deadline(self, now: float) -> float | None:
        """Earliest deadline of the velocity commands that drove at the last tick (at ``now`` before any), s.
        Caller holds the lock."""
        return self.arbiter.next_expiry(now if self.last_t is None else self.last_t)

    # ================================================================== transitions (each takes the lock)
    def check_stall(self, now: float) -> list[str]:
        """No tick since ``last_t`` for longer than :data:`STALL_CHECK_S` at ``now``: latch out the sources
        streaming before the stall whose timeout it outlasted (agent.control.arbitration.Arbiter.latch_out_stalled),
        logged once. The tick calls it, and so does every velocity command before it is arbitrated: after
        a frozen process the event loop may read the commands queued meanwhile before the control
        thread's first tick. Caller holds the lock. Returns the sources latched out."""
        if self.last_t is None or now - self.last_t <= STALL_CHECK_S:
            return []
        stalled = self.arbiter.latch_out_stalled(self.last_t, now)
        if stalled:
            log.warning("control: no tick for %.2f s (the agent stalled); %s latched out: what was sent before "
                        "or queued during the stall does not drive; re-engage as after a stop (docs/safety.md)",
                        now - self.last_t, ", ".join(stalled))
        return stalled

    def offer_velocity(self, source: str, command: BaseVelocity | TrackDuty | JointVelocity) -> Offered:
        """A validated velocity command from ``source`` becomes its claim on its channel (``joints``
        for JointVelocity, else ``base``) and ends ``stopped``.

        Raises:
            CommandDeclined: a halt holds (reason ``halted``; a non-zero command latches ``source``
                out as by a stop, its claim held at zero), or ``source`` is latched out by another
                source's stop or a halt that ended and did not re-engage (reason ``reengage``; its
                claim is held at zero, its pause starts again). Nothing else changes then.
        """
        channel = JOINTS if isinstance(command, JointVelocity) else BASE
        arbiter, safety = self.arbiter, self.safety
        with self.lock:
            now = self._clock()
            self.check_stall(now)       # a command read after a stall, before the first tick after it
            try:
                safety.check(source, command)
            except CommandDeclined:
                if not is_zero(command):
                    arbiter.latch_out(source, channel, safety.setter(), safety.cause(), now)
                raise
            engaged = arbiter.velocity_latched(source, channel, command, now)
            if engaged is not None and engaged.refused:
                timeout = arbiter.timeout_s(source)
                raise CommandDeclined(f"{source} was driving when {engaged.latched.cause}; its velocity commands "
                                      f"are refused and the tank held still until it re-engages: "
                                      f"{re_engage_hint(source, timeout)}", reason="reengage")
            safety.admitted(source, command)      # ends cleared failsafe latches
            if not self.motor_ok and channel == BASE:     # dropped at the next tick; noted for motor_back
                if is_zero(command):
                    self.outage_streams.pop(source, None)
                else:
                    self.outage_streams[source] = now
            # a repeat of the command the source's fresh claim already carries changes nothing; the same
            # value after its claim timed out, was dropped or stopped is a new command
            prev = arbiter.claim(source, channel)
            changed = prev is None or prev.command != command or not prev.fresh(now) or self.stopped
            arbiter.offer(source, channel, command, now)
            self.stopped = False
        return Offered(changed, engaged)

    def motor_back(self, now: float) -> list[str]:
        """The motor controller answers again at ``now`` after a failure: every source that streamed
        non-zero base velocity commands during the outage and still did (its last one less than its
        timeout before ``now``, and no zero, stop or reset of its own after it) is latched out as by the failure, so it
        re-engages after the outage before it drives (docs/safety.md): a zero sent during the outage
        and a key pressed again before it ended do not drive off when the controller answers.
        Caller holds the lock. Returns those sources, sorted."""
        streams, self.outage_streams = self.outage_streams, {}
        out = sorted(s for s, t in streams.items() if now - t < self.arbiter.timeout_s(s))
        for source in out:
            self.arbiter.latch_out(source, BASE, "robot", "a motor controller failure", now)
        return out

    def set_joints(self, source: str, command: JointPosition | JointTrajectory | Gripper | Reset) -> None:
        """A validated latched command from ``source``: claims the joints, sets their target (a
        ``Reset`` also drops its base claim, re-engages it after a stop and sends the joints home),
        ends ``stopped``.

        Raises:
            CommandDeclined: a halt holds, or a higher-priority source holds the joints. Nothing changes then.
        """
        joints, arbiter = self.joints, self.arbiter
        with self.lock:
            now = self._clock()
            self.safety.admit(source, command)     # e-stop / failsafe halts (agent.control.safety)
            if not isinstance(command, Reset) or joints.dof or joints.gripper_cfg is not None:
                above = arbiter.latch(source, JOINTS, now)
                if above is not None:
                    raise CommandDeclined(
                        f"{type(command).__name__} refused: joints are held by {above.source} "
                        f"(priority {arbiter.priority(above.source)} > {arbiter.priority(source)})")
            if isinstance(command, JointPosition):
                joints.set_position(source, command.q)
            elif isinstance(command, JointTrajectory):
                joints.start_trajectory(source, command, now)
            elif isinstance(command, Gripper):
                joints.set_gripper(command.fraction)
            else:
                arbiter.drop([source], (BASE,))
                arbiter.re_engage(source)  # a reset re-engages a source latched out by a stop
                self.outage_streams.pop(source, None)
                joints.go_home(source)
            self.stopped = False

    def hold_joints(self) -> None:
        """The joints hold where they are (a joint trajectory stop); claims and ``stopped`` unchanged."""
        with self.lock:
            self.joints.hold()

    def stop(self, source: str) -> Stopped:
        """A stop from ``source``: every claim dropped, the other sources that were streaming latched out
        (agent.control.arbitration.Arbiter.stop), joints hold, watchdog idle, ``stopped`` set. Never refused."""
        with self.lock:
            now = self._clock()
            dropped = self.arbiter.stop(source, now)
            self.outage_streams.pop(source, None)     # its own stop: not streaming when the motor is back
            moving = self.cmd != (0.0, 0.0) or self.joints.moving
            self.joints.hold()
            self.watchdog.reset()
            repeated = self.stopped and not moving and all(c.command is None for c in dropped)
            self.stopped = True
            held = sorted({c.source for c in dropped if self.arbiter.claim(c.source, c.channel) is not None})
        return Stopped(repeated, tuple(dropped), tuple(held))

    def release(self, source: str) -> tuple[tuple[str, ...], int]:
        """``source`` disconnected: its claims dropped; if it drove the joints they hold.

        Returns:
            What it was driving (``base``, ``joints``: stop them at once) and how many claims were dropped.
        """
        with self.lock:
            now = self._clock()
            driving = []
            base = self.arbiter.holder(BASE, now)
            if base is not None and base.source == source and base.command is not None:
                driving.append("base")
            jh = self.arbiter.holder(JOINTS, now)
            if (jh is not None and jh.source == source and jh.command is not None) or \
                    (self.joints.owner == source and self.joints.moving):
                driving.append("joints")
                self.joints.hold()
            dropped = self.arbiter.drop([source])
        return tuple(driving), len(dropped)

    def base_motion(self) -> tuple[Pair, Pair]:
        """(commanded at the last tick, target of the command driving now) track speeds, m/s."""
        with self.lock:
            holder = self.arbiter.holder(BASE, self._clock())
            return self.cmd, (self.base_target(holder.command) if holder is not None else (0.0, 0.0))

    def estop(self, by: str, reason: str, now_unix_s: float) -> tuple[bool, Halt | None]:
        """Set the e-stop (SafetyLatches.estop); newly set, every claim is dropped and the joints hold.
        Returns (newly set, the e-stop in force). Raises as SafetyLatches.estop (nothing changes then)."""
        with self.lock:
            new = self.safety.estop(by, reason, now_unix_s)
            if new:
                self._drop_all()
            return new, self.safety.state().estop

    def restore_estop(self, halt: Halt) -> bool:
        """Put back an e-stop kept across a restart (SafetyLatches.restore_estop), as :meth:`estop`."""
        with self.lock:
            new = self.safety.restore_estop(halt)
            if new:
                self._drop_all()
            return new

    def release_estop(self, by: str, *, own: bool = False) -> bool:
        """Release the e-stop (SafetyLatches.release_estop); moves nothing. With ``own``, only when ``by``
        set it (checked and released under one lock). Returns True when released.

        Raises:
            CommandRejected, CommandDeclined: as SafetyLatches.release_estop (not with ``own`` and another setter).
        """
        with self.lock:
            if own:
                halt = self.safety.state().estop
                if halt is None or halt.by != by:
                    return False
            self.safety.release_estop(by)
            return True

    def set_limits(self, max_speed_mps: float | None, max_accel_mps2: float | None) -> None:
        """Set the runtime base limits (validated by the caller; None: unchanged), from the next tick."""
        with self.lock:
            if max_speed_mps is not None:
                self.max_speed_mps = max_speed_mps
            if max_accel_mps2 is not None:
                self.max_accel_mps2 = max_accel_mps2

    def zero_tracks(self) -> None:
        """Command zero track speed (the tick failed: the loop zeroes the duty)."""
        with self.lock:
            self.cmd = (0.0, 0.0)

    def halt(self) -> None:
        """Drop every claim, hold the joints, command zero (closing)."""
        with self.lock:
            self._drop_all()
            self.cmd = (0.0, 0.0)

    def _drop_all(self) -> None:
        self.arbiter.drop()
        self.joints.hold()


def re_engage_hint(source: str, timeout_s: float) -> str:
    """How ``source`` re-engages after a stop latched it out, for its refusal (docs/safety.md)."""
    if source == "console":
        return f"let go and press again (a new press sends a zero first), or send nothing for {timeout_s:.2f} s"
    reset = ", a reset" if source in RESET_SOURCES else ""
    return f"send a zero velocity command, a stop{reset}, or nothing for {timeout_s:.2f} s"
