"""The robot port's front: what adapters call, thread-safe (docs/architecture.md, "The robot port").

:class:`Front` validates commands and writes them into the tick's
:class:`~agent.control.tick.ControlState` under the loop's lock: velocity
commands become arbitration claims (agent.control.arbitration), latched commands set
joint targets, ``Stop`` drops every claim and latches out the *other* sources that
were streaming until they re-engage (the stop latch, docs/safety.md). It also holds
the snapshot ring the tick publishes into (``snapshot``, ``samples_since``) and the
runtime base limits. A ``Stop`` or the release of a driving source calls ``wake`` so
the scheduler runs a tick at once, and so does a velocity command whose value differs from its source's last one (a repeat
only refreshes the watchdog). A velocity more than ``agent.model.OVER_LIMIT_FACTOR`` (10)
times the configured maximum is refused with a CommandRejected, not clamped to full speed:
:meth:`agent.model.Reach.check`, the edge's one magnitude refusal, runs first on every velocity
command (docs/architecture.md, "One check per command").
Before any motion command the halts are asked (``ControlState.safety.check``,
agent.control.safety): while the e-stop or a failsafe latch holds it is refused;
``estop`` / ``release_estop`` set and release the e-stop (docs/safety.md).
"""

from __future__ import annotations

import concurrent.futures
import logging
import math
import threading
from collections import deque
from collections.abc import Callable

from agent.control.arbitration import BASE, JOINTS, is_zero
from agent.config import AgentConfig
from agent.config.control import SOURCES
from agent.control.devices import HardwarePort
from agent.control.tick import ControlState
from agent.errors import CommandDeclined, CommandError, CommandRejected
from agent.model import (
    BaseVelocity,
    CalibrateImu,
    Command,
    Gripper,
    Halt,
    JointPosition,
    JointTrajectory,
    JointTrajectoryStop,
    JointVelocity,
    Reach,
    Reset,
    RobotDescription,
    Snapshot,
    Stop,
    TrackDuty,
)
from agent.support.ratelimit import RateLimitedLog

log = logging.getLogger(__name__)

#: Sources whose protocol has a reset (Sim2Bot ``reset``, robot_msg ctrl_mode home): the stop latch's
#: refusal names it as a way to re-engage; ARTEX and the console have none.
RESET_SOURCES = ("sim2bot", "robot_msg")

#: Snapshots kept for :meth:`Front.samples_since` (about 10 s at 50 Hz).
RING_SIZE = 512
#: Measured track speed below which the base counts as still, m/s.
STILL_MPS = 0.01
#: Repeated rejections of the same kind from one source are logged at most this often, s.
REJECT_LOG_INTERVAL_S = 5.0


def describe(cfg: AgentConfig) -> RobotDescription:
    """The robot's static description from its config (what adapters announce)."""
    servo = cfg.drivers.servo
    joints = servo.joints if servo is not None else []
    return RobotDescription(
        name=cfg.name,
        kind=cfg.type,
        joint_names=tuple(j.name for j in joints),
        joint_limits=tuple((j.min_rad, j.max_rad) for j in joints),
        home=tuple(j.home_rad for j in joints),
        has_gripper=servo is not None and servo.gripper is not None,
        track_width_m=cfg.base.track_width_m,
        max_speed_mps=cfg.base.max_speed_mps,
        max_omega_radps=2.0 * cfg.base.max_speed_mps / cfg.base.track_width_m,
        cameras=tuple(c.id for c in cfg.drivers.cameras),
    )


class Front:
    """What adapters call; see the module docstring.

    Args:
        state: the tick's state; read and written only under ``lock``.
        lock: the loop's lock (shared with the tick).
        hardware: used for ``calibrate_imu`` only.
        clock: monotonic clock, s (the same one the tick runs on).
        wake: asks the scheduler for a tick now (a new velocity value, a stop, a release of a driving source).
    """

    def __init__(self, state: ControlState, lock: threading.Lock, hardware: HardwarePort, *,
                 clock: Callable[[], float], wake: Callable[[], None]) -> None:
        self._state = state
        self._lock = lock
        self._hw = hardware
        self._clock = clock
        self._wake = wake
        self._closed = False
        self._calibration: concurrent.futures.Future | None = None
        self._estop_listeners: list[Callable[[Halt | None], None]] = []
        self._command_taps: list[Callable[[str, Command, CommandError | None], None]] = []
        self._rejects = RateLimitedLog(log, REJECT_LOG_INTERVAL_S)
        # the maxima of the edge's over-limit refusal (agent.model.Reach); config, fixed for the loop's life
        self._reach = Reach(state.full_duty_mps, 2.0 * state.full_duty_mps / state.track_width_m,
                            tuple((j.name, j.max_speed_radps) for j in state.joints.joints))
        self._snap = Snapshot(joints=state.joints.state(), gripper=state.joints.gripper)
        self._ring: deque[Snapshot] = deque(maxlen=RING_SIZE)
        self._ring_lock = threading.Lock()

    # ================================================================== commands
    def submit(self, source: str, command: Command) -> None:
        """Validate ``command`` against the robot and queue it; latest value wins per source.

        Raises:
            CommandRejected: bad input (unknown source or command, wrong joint count, no gripper).
            CommandDeclined: valid but not now (stop-latched, joints held by a higher-priority
                source, base not still for calibration, loop closed). Nothing changes then.
        """
        try:
            self._submit(source, command)
        except CommandError as err:
            if not err.source:
                err.source = source
            self._rejects.log(logging.WARNING, (source, str(err)), "rejected %s from %s: %s",
                              type(command).__name__, source, err)
            self._tap(source, command, err)
            raise
        self._tap(source, command, None)

    def on_command(self, tap: Callable[[str, Command, CommandError | None], None]) -> None:
        """Call ``tap(source, command, error)`` after every submitted command, accepted (``error`` None) or
        refused, on the submitter's thread, outside the lock. It must not block: the flight recorder
        (agent.recorder) appends to a bounded queue."""
        self._command_taps.append(tap)

    def _tap(self, source: str, command: Command, err: CommandError | None) -> None:
        for tap in self._command_taps:
            try:
                tap(source, command, err)
            except Exception:  # noqa: BLE001 - a tap's bug must not change the command's outcome
                log.exception("command tap failed")

    def _submit(self, source: str, command: Command) -> None:
        if source not in SOURCES:
            raise CommandRejected(f"unknown command source {source!r}; known: {', '.join(SOURCES)}")
        if self._closed:
            raise CommandDeclined("the control loop is closed")
        if isinstance(command, Stop):
            self._stop(source)  # never refused by a halt; it re-engages its source (agent.control.arbitration)
        elif isinstance(command, CalibrateImu):
            self._calibrate_imu(source)
        elif isinstance(command, (BaseVelocity, TrackDuty, JointVelocity)):
            self._velocity(source, command)
        elif isinstance(command, JointTrajectoryStop):
            with self._lock:
                self._state.joints.hold()
            log.info("joint trajectory stop from %s: joints hold", source)
        elif isinstance(command, (JointPosition, JointTrajectory, Gripper, Reset)):
            self._latched(source, command)
        else:
            raise CommandRejected(f"unknown command {type(command).__name__}")

    def _velocity(self, source: str, command: BaseVelocity | TrackDuty | JointVelocity) -> None:
        channel = BASE
        if isinstance(command, JointVelocity):
            self._state.joints.check_length("joint_velocity", len(command.qd))
            channel = JOINTS
        self._reach.check(command)      # the edge's over-limit refusal (agent.model.Reach)
        with self._lock:
            now = self._clock()
            self._check_halts(source, channel, command, now)
            self._check_stop_latch(source, channel, command, now)
            self._state.safety.admitted(source, command)      # ends cleared failsafe latches
            # a repeat of the command the source's fresh claim already carries changes nothing; the same
            # value after its claim timed out, was dropped or stopped is a new command
            prev = self._state.arbiter.claim(source, channel)
            changed = (prev is None or prev.command != command or not prev.fresh(now)
                       or self._state.stopped)
            self._state.arbiter.offer(source, channel, command, now)
            self._state.stopped = False
        if changed:     # a new value runs a tick at once; a repeated one only refreshes the watchdog
            self._wake()

    def _latched(self, source: str, command: Command) -> None:
        state, joints = self._state, self._state.joints
        if isinstance(command, JointPosition):
            joints.check_position(command.q)
        elif isinstance(command, JointTrajectory):
            joints.check_trajectory(command)
        elif isinstance(command, Gripper):
            joints.check_gripper()
        with self._lock:
            now = self._clock()
            state.safety.admit(source, command)     # e-stop / failsafe halts (agent.control.safety)
            if not isinstance(command, Reset) or joints.dof or joints.gripper_cfg is not None:
                above = state.arbiter.latch(source, JOINTS, now)
                if above is not None:
                    raise CommandDeclined(
                        f"{type(command).__name__} refused: joints are held by {above.source} "
                        f"(priority {state.arbiter.priority(above.source)} > "
                        f"{state.arbiter.priority(source)})")
            if isinstance(command, JointPosition):
                joints.set_position(source, command.q)
            elif isinstance(command, JointTrajectory):
                joints.start_trajectory(source, command, now)
            elif isinstance(command, Gripper):
                joints.set_gripper(command.fraction)
            else:
                state.arbiter.drop([source], (BASE,))
                state.arbiter.re_engage(source)  # a reset re-engages a source latched out by a stop
                joints.go_home(source)
            state.stopped = False
        if isinstance(command, Reset):
            log.info("reset from %s: its base command dropped, joints going home", source)

    def _check_halts(self, source: str, channel: str, command: BaseVelocity | TrackDuty | JointVelocity,
                     now: float) -> None:
        """Refuse a velocity command while a halt holds (agent.control.safety). A source streaming
        motion into the halt is latched out as by a stop (``Arbiter.latch_out``): when the halt
        ends it re-engages before it drives, and its claim held at zero keeps lower-priority
        sources off meanwhile. Caller holds the lock."""
        safety = self._state.safety
        try:
            safety.check(source, command)
        except CommandDeclined:
            if not is_zero(command):
                self._state.arbiter.latch_out(source, channel, safety.setter(), safety.cause(), now)
            raise

    def _check_stop_latch(self, source: str, channel: str, command: Command, now: float) -> None:
        """Refuse a velocity command from a source latched out by another source's stop.

        The source re-engages (docs/safety.md) with a command after a pause of its timeout since
        the stop or its last refused command, or with an explicit zero (``is_zero``); its own stop
        or a reset re-engages it elsewhere. Otherwise the command is refused (CommandDeclined saying
        how to re-engage) and its claim on ``channel`` is held at zero, so the tank stays still and
        lower-priority sources stay off. Caller holds the lock.
        """
        arbiter = self._state.arbiter
        latched = arbiter.latched_out(source)
        if latched is None:
            return
        timeout = arbiter.timeout_s(source)
        if now - latched.last_s >= timeout:
            how = f"its commands paused for {timeout:.2f} s"
        elif is_zero(command):
            how = "it sent a zero velocity command"
        else:
            arbiter.hold(source, channel, now)
            raise CommandDeclined(f"{source} was driving when {latched.cause}; its velocity commands "
                                  f"are refused and the tank held still until it re-engages: "
                                  f"{_re_engage_hint(source, timeout)}", reason="reengage")
        arbiter.re_engage(source)
        log.info("%s re-engaged after %s: %s", source, latched.after, how)

    def _stop(self, source: str) -> None:
        state = self._state
        with self._lock:
            now = self._clock()
            dropped = state.arbiter.stop(source, now)
            moving = state.cmd != (0.0, 0.0) or state.joints.moving
            state.joints.hold()
            state.watchdog.reset()
            repeated = state.stopped and not moving and all(c.command is None for c in dropped)
            state.stopped = True
            held = sorted({c.source for c in dropped if state.arbiter.claim(c.source, c.channel) is not None})
        if not repeated:
            self._wake()
        log.log(logging.DEBUG if repeated else logging.INFO,
                "stop from %s: tracks to zero, joints hold, %d pending claim(s) dropped%s", source, len(dropped),
                f"; latched out until they re-engage: {', '.join(held)}" if held else "")

    def _calibrate_imu(self, source: str) -> None:
        tracks = self._snap.tracks
        measured = max(abs(tracks.left_mps), abs(tracks.right_mps))
        with self._lock:
            holder = self._state.arbiter.holder(BASE, self._clock())
            target = self._state.base_target(holder.command) if holder is not None else (0.0, 0.0)
            commanded = self._state.cmd
            if commanded != (0.0, 0.0) or target != (0.0, 0.0) or measured > STILL_MPS:
                raise CommandDeclined(
                    f"calibrate_imu needs the base still: commanded ({commanded[0]:.3f}, {commanded[1]:.3f}) "
                    f"m/s, target ({target[0]:.3f}, {target[1]:.3f}) m/s, measured {measured:.3f} m/s")
            if self._calibration is not None and not self._calibration.done():
                raise CommandDeclined("calibrate_imu: a calibration is already running")
            fut = self._hw.calibrate_imu()  # non-blocking: runs on the IMU's bus thread
            self._calibration = fut
        log.info("IMU gyro calibration requested by %s", source)
        fut.add_done_callback(_log_calibration)

    def release(self, source: str, reason: str) -> None:
        """``source`` disconnected: if it was driving base or joints, stop that at once; drop its claims.

        Another source with a fresh command keeps (or takes) control; with none
        the tracks get zero on the next tick and the joints hold where they are.
        """
        if source not in SOURCES:
            log.error("release of unknown command source %r (%s) ignored", source, reason)
            return
        state = self._state
        with self._lock:
            now = self._clock()
            driving = []
            base = state.arbiter.holder(BASE, now)
            if base is not None and base.source == source and base.command is not None:
                driving.append("base")
            jh = state.arbiter.holder(JOINTS, now)
            if (jh is not None and jh.source == source and jh.command is not None) or \
                    (state.joints.owner == source and state.joints.moving):
                driving.append("joints")
                state.joints.hold()
            dropped = state.arbiter.drop([source])
        if driving:
            self._wake()
            log.warning("%s released (%s) while driving %s: stopped at once", source, reason, " and ".join(driving))
        else:
            log.info("%s released (%s); %d pending claim(s) dropped", source, reason, len(dropped))

    # ================================================================== e-stop
    def estop(self, by: str, reason: str, now_unix_s: float) -> bool:
        """Set the e-stop (agent.control.safety.SafetyLatches.estop): every claim dropped, joints hold,
        a tick at once. True when newly set.

        Raises:
            CommandRejected: ``by`` is not console, cli or input; ``reason`` not a string.
        """
        try:
            with self._lock:
                new = self._state.safety.estop(by, reason, now_unix_s)
                if new:
                    self._state.arbiter.drop()
                    self._state.joints.hold()
                estop = self._state.safety.state().estop
        except CommandError as err:
            log.log(_refusal_level(err), "emergency stop refused: %s", err)
            raise
        self._wake()
        if new:
            self._estop_changed(estop)
        return new

    def restore_estop(self, halt: Halt) -> bool:
        """Put back an e-stop kept across a restart (SafetyLatches.restore_estop); wakes a tick."""
        with self._lock:
            new = self._state.safety.restore_estop(halt)
            if new:
                self._state.arbiter.drop()
                self._state.joints.hold()
        self._wake()
        return new

    def on_estop_change(self, listener: Callable[[Halt | None], None]) -> None:
        """Call ``listener(halt)`` after the e-stop is set (the Halt) or released (None), on the caller's
        thread, outside the lock; it must not block (agent.ops.estopctl hands the write to its own thread)."""
        self._estop_listeners.append(listener)

    def _estop_changed(self, halt: Halt | None) -> None:
        for listener in self._estop_listeners:
            try:
                listener(halt)
            except Exception:  # noqa: BLE001 - a listener's bug must not undo or block the e-stop
                log.exception("e-stop listener failed")

    def release_estop(self, by: str) -> None:
        """Release the e-stop; moves nothing (claims were dropped), wakes a tick.

        Raises:
            CommandRejected: ``by`` is not console, cli or input.
            CommandDeclined: no e-stop is set.
        """
        try:
            with self._lock:
                self._state.safety.release_estop(by)
        except CommandError as err:
            log.log(_refusal_level(err), "emergency stop release refused: %s", err)
            raise
        self._released()

    def release_own_estop(self, by: str) -> bool:
        """Release the e-stop only if ``by`` set it (checked and released under one lock: never
        another setter's); wakes a tick and tells the listeners as :meth:`release_estop` does.
        Returns True when released."""
        with self._lock:
            halt = self._state.safety.state().estop
            if halt is None or halt.by != by:
                return False
            self._state.safety.release_estop(by)
        self._released()
        return True

    def _released(self) -> None:
        self._wake()
        self._estop_changed(None)

    def close(self) -> None:
        """Refuse every command from now on (the loop is closing)."""
        self._closed = True

    # ================================================================== snapshots
    def publish(self, snap: Snapshot) -> None:
        """Make ``snap`` the newest snapshot and keep it in the ring (the tick calls this)."""
        self._snap = snap
        with self._ring_lock:
            self._ring.append(snap)

    def snapshot(self) -> Snapshot:
        """The newest tick's state (an immutable object; reading it takes no lock)."""
        return self._snap

    def samples_since(self, seq: int, limit: int = 256) -> list[Snapshot]:
        """Snapshots with ``seq`` greater than the given one still in the ring, oldest first, at most ``limit``."""
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValueError(f"samples_since limit must be a positive integer, got {limit!r}")
        with self._ring_lock:   # seq rises by one per snapshot: index from the newest, no scan
            ring, n = self._ring, len(self._ring)
            count = min(ring[-1].seq - seq, n) if n else 0
            start = n - count
            return [ring[i] for i in range(start, min(start + limit, n))] if count > 0 else []

    # ================================================================== settings
    def set_limits(self, max_speed_mps: float | None = None, max_accel_mps2: float | None = None) -> None:
        """Runtime base limits (ARTEX ``web_settings``), applied from the next tick.

        Args:
            max_speed_mps: track speed limit, m/s, in (0, base.max_speed_mps]: the
                configured value is the speed at full duty, so it cannot be raised.
            max_accel_mps2: track acceleration limit, m/s^2, any positive finite value.

        Raises:
            CommandError: a value is not a positive finite number or above the configured
                speed; nothing changes then.
        """
        state = self._state
        speed = None if max_speed_mps is None else _positive("max_speed_mps", max_speed_mps, state.full_duty_mps)
        accel = None if max_accel_mps2 is None else _positive("max_accel_mps2", max_accel_mps2, None)
        with self._lock:
            if speed is not None:
                state.max_speed_mps = speed
            if accel is not None:
                state.max_accel_mps2 = accel
        log.info("base limits now max_speed %.3f m/s, max_accel %.3f m/s^2",
                 state.max_speed_mps, state.max_accel_mps2)

    def limits(self) -> tuple[float, float]:
        """Current (max_speed_mps, max_accel_mps2)."""
        return self._state.max_speed_mps, self._state.max_accel_mps2


def _re_engage_hint(source: str, timeout_s: float) -> str:
    """How ``source`` re-engages after a stop latched it out, for its refusal (docs/safety.md)."""
    if source == "console":
        return f"let go and press again (a new press sends a zero first), or send nothing for {timeout_s:.2f} s"
    reset = ", a reset" if source in RESET_SOURCES else ""
    return f"send a zero velocity command, a stop{reset}, or nothing for {timeout_s:.2f} s"


def _positive(name: str, value: object, top: float | None) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise CommandRejected(f"{name} must be a number, got {type(value).__name__}")
    v = float(value)
    if not math.isfinite(v) or v <= 0:
        raise CommandRejected(f"{name} must be a positive finite number, got {value!r}")
    if top is not None and v > top:
        raise CommandRejected(f"{name} {v} is above the configured {top}")
    return v


def _refusal_level(err: CommandError) -> int:
    """A request the robot's state declines is INFO; a malformed one WARNING (docs/architecture.md, log levels)."""
    return logging.INFO if isinstance(err, CommandDeclined) else logging.WARNING


def _log_calibration(fut: concurrent.futures.Future) -> None:
    err = fut.exception()
    if err is not None:
        log.warning("IMU gyro calibration failed: %s; the previous bias stays", err)
    else:
        log.info("IMU gyro calibration done: bias %s rad/s", fut.result())
