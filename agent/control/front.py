"""The robot port's front: what adapters call, thread-safe (docs/architecture.md, "The robot port").

:class:`Front` validates each command's values (one function, ``_validate``) and hands it to
the transitions of :class:`~agent.control.state.ControlState` (agent.control.state), which
keep stopped, the commanded tracks, the stop latch and the claims consistent: velocity
commands become arbitration claims (agent.control.arbitration), latched commands set joint
targets, ``Stop`` drops every claim and latches out the *other* sources that were streaming
until they re-engage (the stop latch, docs/safety.md). It logs what they did and refused,
and holds the snapshot ring the tick publishes into (``snapshot``, ``samples_since``). A
``Stop`` or the release of a driving source calls ``wake`` so the scheduler runs a tick at
once, and so does a velocity command whose value differs from its source's last one (a
repeat only refreshes the watchdog). A velocity more than ``agent.commands.OVER_LIMIT_FACTOR`` (10)
times the configured maximum is refused with a CommandRejected, not clamped to full speed
(:meth:`agent.commands.Reach.check`, the edge's one over-limit refusal; docs/architecture.md,
"One check per command"). While
the e-stop or a failsafe latch holds every motion command is refused (agent.control.safety);
``estop`` / ``release_estop`` set and release the e-stop (docs/safety.md).
"""

from __future__ import annotations

import concurrent.futures
import logging
import math
import threading
from collections import deque
from collections.abc import Callable

from agent.config import AgentConfig
from agent.config.control import SOURCES
from agent.control.devices import HardwarePort
from agent.control.state import ControlState
from agent.errors import CommandDeclined, CommandError, CommandRejected
from agent.commands import (
    BaseVelocity, CalibrateImu, Command, Gripper, JointPosition, JointTrajectory, JointTrajectoryStop,
    JointVelocity, Reach, Reset, Stop, TrackDuty,
)
from agent.model import Halt, RobotDescription, Snapshot
from agent.support.ratelimit import RateLimitedLog

log = logging.getLogger(__name__)

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
        state: the tick's state, changed only through its transitions.
        hardware: used for ``calibrate_imu`` only.
        wall: Unix clock, s (the e-stop's time).
        wake: asks the scheduler for a tick now (a new velocity value, a stop, a release of a driving source).
        rouse: asks for a tick now only while the loop rests (agent.control.rest): a joint, gripper or reset
            command, which the next slot serves at the full rate.
    """

    def __init__(self, state: ControlState, hardware: HardwarePort, *,
                 wall: Callable[[], float], wake: Callable[[], None],
                 rouse: Callable[[], None] = lambda: None) -> None:
        self._state = state
        self._hw = hardware
        self._wall = wall
        self._wake = wake
        self._rouse = rouse
        self._closed = False
        self._calibration: concurrent.futures.Future | None = None
        self._calibration_lock = threading.Lock()
        self._estop_listeners: list[Callable[[Halt | None], None]] = []
        self._command_taps: list[Callable[[str, Command, CommandError | None], None]] = []
        self._rejects = RateLimitedLog(log, REJECT_LOG_INTERVAL_S)
        # the maxima of the edge's over-limit refusal (agent.commands.Reach); config, fixed for the loop's life
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
        self._validate(command)
        state = self._state
        if isinstance(command, Stop):
            self._stop(source)  # never refused by a halt; it re-engages its source (agent.control.stoplatch)
        elif isinstance(command, CalibrateImu):
            self._calibrate_imu(source)
        elif isinstance(command, (BaseVelocity, TrackDuty, JointVelocity)):
            offered = state.offer_velocity(source, command)
            if offered.engaged is not None:
                log.info("%s re-engaged after %s: %s", source, offered.engaged.latched.after, offered.engaged.how)
            if offered.changed:     # a new value runs a tick at once; a repeated one only refreshes the watchdog
                self._wake()
        elif isinstance(command, JointTrajectoryStop):
            state.hold_joints()
            self._rouse()
            log.info("joint trajectory stop from %s: joints hold", source)
        elif isinstance(command, (JointPosition, JointTrajectory, Gripper, Reset)):
            state.set_joints(source, command)
            self._rouse()       # at rest the next slot is a rest period away: tick now
            if isinstance(command, Reset):
                log.info("reset from %s: its base command dropped, joints going home", source)
        else:
            raise CommandRejected(f"unknown command {type(command).__name__}")

    def _validate(self, command: Command) -> None:
        """Refuse a command whose values do not fit the robot (CommandRejected); the robot's state is
        the transitions' to judge. Joint counts, targets and the gripper are the joints' to check
        (agent.control.joints); a finite but absurd velocity (more than agent.commands.OVER_LIMIT_FACTOR x the
        maximum) is refused instead of clamped to full speed, by the edge's one over-limit refusal
        (agent.commands.Reach.check). TrackDuty outside -1..1 is refused by the model already."""
        joints = self._state.joints
        if isinstance(command, JointVelocity):
            joints.check_length("joint_velocity", len(command.qd))
        elif isinstance(command, JointPosition):
            joints.check_position(command.q)
        elif isinstance(command, JointTrajectory):
            joints.check_trajectory(command)
        elif isinstance(command, Gripper):
            joints.check_gripper()
        self._reach.check(command)      # the edge's over-limit refusal (agent.commands.Reach)

    def _stop(self, source: str) -> None:
        stopped = self._state.stop(source)
        if not stopped.repeated:
            self._wake()
        held = stopped.held
        log.log(logging.DEBUG if stopped.repeated else logging.INFO,
                "stop from %s: tracks to zero, joints hold, %d pending claim(s) dropped%s", source,
                len(stopped.dropped), f"; latched out until they re-engage: {', '.join(held)}" if held else "")

    def _calibrate_imu(self, source: str) -> None:
        tracks = self._snap.tracks
        measured = max(abs(tracks.left_mps), abs(tracks.right_mps))
        commanded, target = self._state.base_motion()
        if commanded != (0.0, 0.0) or target != (0.0, 0.0) or measured > STILL_MPS:
            raise CommandDeclined(
                f"calibrate_imu needs the base still: commanded ({commanded[0]:.3f}, {commanded[1]:.3f}) "
                f"m/s, target ({target[0]:.3f}, {target[1]:.3f}) m/s, measured {measured:.3f} m/s")
        with self._calibration_lock:
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
        driving, dropped = self._state.release(source)
        if driving:
            self._wake()
            log.warning("%s released (%s) while driving %s: stopped at once", source, reason, " and ".join(driving))
        else:
            log.info("%s released (%s); %d pending claim(s) dropped", source, reason, dropped)

    # ================================================================== e-stop
    def estop(self, by: str, reason: str = "") -> bool:
        """Set the emergency stop (agent.control.safety.SafetyLatches.estop) at the wall clock's time:
        tracks to zero at once (every claim dropped, joints hold, a tick woken), every motion command from
        every source refused until :meth:`release_estop`. ``by``: ``console``, ``cli`` or ``input``.
        Returns True when newly set, False when it already held (first setter kept).

        Raises:
            CommandRejected: ``by`` may not set it; ``reason`` is not a string.
        """
        try:
            new, estop = self._state.estop(by, reason, self._wall())
        except CommandError as err:
            log.log(_refusal_level(err), "emergency stop refused: %s", err)
            raise
        self._wake()
        if new:
            self._estop_changed(estop)
        return new

    def restore_estop(self, halt: Halt) -> bool:
        """Put back an e-stop kept across a restart (SafetyLatches.restore_estop: its setter and time
        unchanged); wakes a tick. True when set now."""
        new = self._state.restore_estop(halt)
        self._wake()
        return new

    def on_estop_change(self, listener: Callable[[Halt | None], None]) -> None:
        """Call ``listener(halt)`` after the e-stop is set (the Halt) or released (None), on the caller's
        thread, outside the lock; it must not block (agent.ops.estopstore hands the write to its own thread)."""
        self._estop_listeners.append(listener)

    def _estop_changed(self, halt: Halt | None) -> None:
        for listener in self._estop_listeners:
            try:
                listener(halt)
            except Exception:  # noqa: BLE001 - a listener's bug must not undo or block the e-stop
                log.exception("e-stop listener failed")

    def release_estop(self, by: str) -> None:
        """Release the e-stop; moves nothing (claims were dropped): motion needs a fresh command (a source
        that streamed into the e-stop re-engages first, as after a stop). Wakes a tick.

        Raises:
            CommandRejected: ``by`` is not console, cli or input.
            CommandDeclined: no e-stop is set.
        """
        try:
            self._state.release_estop(by)
        except CommandError as err:
            log.log(_refusal_level(err), "emergency stop release refused: %s", err)
            raise
        self._released()

    def release_own_estop(self, by: str) -> bool:
        """Release the e-stop only if ``by`` set it (checked and released under one lock: never
        another setter's); wakes a tick and tells the listeners as :meth:`release_estop` does.
        Returns True when released."""
        if not self._state.release_estop(by, own=True):
            return False
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
        state.set_limits(speed, accel)
        log.info("base limits now max_speed %.3f m/s, max_accel %.3f m/s^2",
                 state.max_speed_mps, state.max_accel_mps2)

    def limits(self) -> tuple[float, float]:
        """Current (max_speed_mps, max_accel_mps2)."""
        return self._state.max_speed_mps, self._state.max_accel_mps2


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
