"""The control loop: the robot port the adapters talk to, and the only writer to the motors and servos.

:class:`ControlLoop` implements ``RobotPort`` (docs/architecture.md, "The robot
port"): ``description``, ``submit``, ``release``, ``snapshot``,
``samples_since``, all thread-safe. It runs on its own thread at
``cfg.control.rate_hz``, timed with the injected monotonic clock and waiting on
an abortable ``threading.Event``; a late tick skips the missed slots instead of
bursting to catch up. When the deadline of the velocity command driving a
channel falls between two slots, the thread also wakes at that deadline and
runs one extra tick, so the watchdog's zero reaches the motor right after the
timeout rather than up to a tick later; a ``Stop`` or the release of a driving
source wakes it for an immediate tick too. Each tick (:meth:`ControlLoop.tick`):

1. arbitrates each channel (agent.arbitration) and updates the watchdog;
2. turns the winning base command into track speeds (agent.kinematics: skid-steer,
   speed limit preserving curvature, acceleration ramp) and duty; with no fresh
   base command the tracks get zero at once (no ramp);
3. steps the joints (agent.joints);
4. writes the duty first, then the servo pulses when they changed;
5. reads the motor controller (encoders, speeds, status), integrates odometry
   and publishes a :class:`~agent.model.Snapshot` (``tracks.left_mps`` is the
   encoder speed, or the commanded speed without encoders or feedback).

The safety path (design.md): a velocity command older than its source's timeout
stops the tracks at its deadline, never later than one tick after it; ``Stop`` from any
source wins; a released source that was driving stops at once; a failed duty
write drops every base command so the tracks stay at zero until a command
arrives after the motor answers again; :meth:`ControlLoop.close` writes zero and
confirms it.
"""

from __future__ import annotations

import concurrent.futures
import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import NamedTuple, Protocol

from agent.arbitration import BASE, JOINTS, Arbiter, Selection, Watchdog
from agent.config import AgentConfig
from agent.config.control import SOURCES
from agent.errors import CommandError
from agent.joints import JointController
from agent.kinematics import (
    Odometer,
    limited_tracks,
    ramp,
    scale_to_limit,
    tracks_to_duty,
)
from agent.model import (
    BaseVelocity,
    CalibrateImu,
    Command,
    DeviceHealth,
    Gripper,
    ImuSample,
    JointPosition,
    JointTrajectory,
    JointTrajectoryStop,
    JointVelocity,
    PowerSample,
    Reset,
    RobotDescription,
    Snapshot,
    Stop,
    TrackDuty,
    TrackState,
)
from agent.ratelimit import RateLimitedLog
from drivers.base import MotorFeedback

log = logging.getLogger(__name__)

#: Snapshots kept for :meth:`ControlLoop.samples_since` (about 10 s at 50 Hz).
RING_SIZE = 512
#: Measured track speed below which the base counts as still, m/s.
STILL_MPS = 0.01
#: Window of :meth:`ControlLoop.keeps_rate`, s, and the share of ``rate_hz`` it must reach.
RATE_WINDOW_S = 1.0
RATE_SHARE = 0.8
#: Repeated rejections of the same kind from one source are logged at most this often, s.
REJECT_LOG_INTERVAL_S = 5.0


class HardwarePort(Protocol):
    """What the loop needs from agent.hardware.Hardware (docs/architecture.md, "Hardware")."""

    def set_duty(self, left: float, right: float) -> bool: ...
    def read_motor(self) -> MotorFeedback | None: ...
    def set_servo_pulses(self, pulses: dict[int, float | None]) -> None: ...
    def latest_imu(self) -> ImuSample | None: ...
    def latest_power(self) -> PowerSample | None: ...
    def calibrate_imu(self) -> concurrent.futures.Future: ...
    def health(self) -> tuple[DeviceHealth, ...]: ...
    def faults(self, health: tuple[DeviceHealth, ...] | None = None) -> tuple[str, ...]: ...


class TickStats(NamedTuple):
    """Loop timing: ticks run; late ticks (started over half a period after their slot, or overran
    into the next slot); longest tick, s; rate over the last ~1 s, Hz."""

    ticks: int
    late_ticks: int
    max_tick_s: float
    achieved_hz: float


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


def _positive(name: str, value: object, top: float | None) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise CommandError(f"{name} must be a number, got {type(value).__name__}")
    v = float(value)
    if not math.isfinite(v) or v <= 0:
        raise CommandError(f"{name} must be a positive finite number, got {value!r}")
    if top is not None and v > top:
        raise CommandError(f"{name} {v} is above the configured {top}")
    return v


class ControlLoop:
    """The robot port and control thread; see the module docstring.

    Args:
        cfg: validated configuration (base geometry, sources, joints, rate).
        hardware: the supervised devices (agent.hardware.Hardware or the same interface).
        clock: monotonic clock, s; injected in tests to drive :meth:`tick` deterministically.
        wall: Unix clock, s, for ``Snapshot.t_unix_s``.

    Attributes:
        description: the robot (joints, limits, home, gripper, geometry, cameras).
        period_s: control period, s (1 / rate_hz).
    """

    def __init__(self, cfg: AgentConfig, hardware: HardwarePort, *,
                 clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time) -> None:
        self.cfg = cfg
        self.description = describe(cfg)
        self.period_s = 1.0 / cfg.control.rate_hz
        self._hw = hardware
        self._clock = clock
        self._wall = wall
        servo = cfg.drivers.servo
        self._joints = JointController(servo.joints if servo else (), servo.gripper if servo else None)
        self._arbiter = Arbiter.from_config(cfg)
        self._watchdog = Watchdog()
        self._odometer = Odometer(cfg.base.track_width_m, cfg.base.counts_per_m, cfg.base.max_speed_mps)
        self._full_duty_mps = cfg.base.max_speed_mps
        self._max_speed = cfg.base.max_speed_mps
        self._max_accel = cfg.base.max_accel_mps2
        self._lock = threading.Lock()
        self._cmd = (0.0, 0.0)            # commanded track speeds after the ramp, m/s
        self._stopped = False
        self._muted: dict[str, float] = {}  # source -> its last velocity command refused by the stop latch, s
        self._closed = False
        self._motor_ok = True
        self._base_source = ""
        self._last_pulses: dict[int, float] | None = None
        self._last_t: float | None = None
        self._counts = (0, 0)
        self._calibration: concurrent.futures.Future | None = None
        self._rejects = RateLimitedLog(log, REJECT_LOG_INTERVAL_S)
        self._tick_errors = RateLimitedLog(log, REJECT_LOG_INTERVAL_S)
        self._snap = Snapshot(joints=self._joints.state(), gripper=self._joints.gripper)
        self._ring: deque[Snapshot] = deque(maxlen=RING_SIZE)
        self._ring_lock = threading.Lock()
        self._halt = threading.Event()
        self._wake = threading.Event()    # set by close() and by stop/release: tick now
        self._thread: threading.Thread | None = None
        self._ticks = 0
        self._late = 0
        self._max_tick_s = 0.0
        self._tick_times: deque[float] = deque(maxlen=int(cfg.control.rate_hz * RATE_WINDOW_S * 2) + 8)
        self._first_tick: float | None = None

    # ================================================================== robot port
    def submit(self, source: str, command: Command) -> None:
        """Validate ``command`` against the robot and queue it; latest value wins per source.

        Raises:
            CommandError: with the reason (unknown source or command, wrong joint
                count, no gripper, refused by a higher-priority source, base not
                still for calibration); nothing changes then.
        """
        try:
            self._submit(source, command)
        except CommandError as err:
            if not err.source:
                err.source = source
            self._rejects.log(logging.WARNING, (source, str(err)), "rejected %s from %s: %s",
                              type(command).__name__, source, err)
            raise

    def _submit(self, source: str, command: Command) -> None:
        if source not in SOURCES:
            raise CommandError(f"unknown command source {source!r}; known: {', '.join(SOURCES)}")
        if self._closed:
            raise CommandError("the control loop is closed")
        if isinstance(command, Stop):
            self._stop(source)
        elif isinstance(command, CalibrateImu):
            self._calibrate_imu(source)
        elif isinstance(command, (BaseVelocity, TrackDuty)):
            with self._lock:
                now = self._clock()
                self._check_stop_latch(source, now)
                self._arbiter.offer(source, BASE, command, now)
                self._stopped = False
        elif isinstance(command, JointVelocity):
            self._joints.check_length("joint_velocity", len(command.qd))
            with self._lock:
                now = self._clock()
                self._check_stop_latch(source, now)
                self._arbiter.offer(source, JOINTS, command, now)
                self._stopped = False
        elif isinstance(command, JointTrajectoryStop):
            with self._lock:
                self._joints.hold()
            log.info("joint trajectory stop from %s: joints hold", source)
        elif isinstance(command, (JointPosition, JointTrajectory, Gripper, Reset)):
            self._latched(source, command)
        else:
            raise CommandError(f"unknown command {type(command).__name__}")

    def _latched(self, source: str, command: Command) -> None:
        joints = self._joints
        if isinstance(command, JointPosition):
            joints.check_length("joint_position", len(command.q))
        elif isinstance(command, JointTrajectory):
            joints.check_trajectory(command)
        elif isinstance(command, Gripper):
            joints.check_gripper()
        with self._lock:
            now = self._clock()
            if not isinstance(command, Reset) or joints.dof or joints.gripper_cfg is not None:
                above = self._arbiter.latch(source, JOINTS, now)
                if above is not None:
                    raise CommandError(
                        f"{type(command).__name__} refused: joints are held by {above.source} "
                        f"(priority {self._arbiter.priority(above.source)} > "
                        f"{self._arbiter.priority(source)})")
            if isinstance(command, JointPosition):
                joints.set_position(source, command.q)
            elif isinstance(command, JointTrajectory):
                joints.start_trajectory(source, command, now)
            elif isinstance(command, Gripper):
                joints.set_gripper(command.fraction)
            else:
                self._arbiter.drop([source], (BASE,))
                self._muted.pop(source, None)  # an explicit reset re-arms a source latched out by a stop
                joints.go_home(source)
            self._stopped = False
        if isinstance(command, Reset):
            log.info("reset from %s: its base command dropped, joints going home", source)

    def _check_stop_latch(self, source: str, now: float) -> None:
        """Refuse a velocity command from a source that was streaming when another source said stop.

        ``stop`` always wins: a source whose velocity commands were fresh when a different source
        stopped the robot does not simply drive on with its next command. Its velocity commands are
        refused until it has sent none for its own timeout (the stream stopped), or it sends a
        ``Reset``. Caller holds ``self._lock``.
        """
        last = self._muted.get(source)
        if last is None:
            return
        timeout = self._arbiter.timeout_s(source)
        if now - last < timeout:
            self._muted[source] = now
            raise CommandError(f"{source} was driving when a stop came from another source; its velocity "
                               f"commands are refused until it pauses for {timeout:.2f} s or sends reset")
        del self._muted[source]
        log.info("%s: velocity commands accepted again after the stop (its stream paused)", source)

    def _stop(self, source: str) -> None:
        with self._lock:
            now = self._clock()
            dropped = self._arbiter.drop()
            for claim in dropped:  # sources streaming velocity commands: latched out (see _check_stop_latch)
                if claim.command is not None and claim.source != source and claim.deadline_s > now:
                    self._muted[claim.source] = now
            moving = self._cmd != (0.0, 0.0) or self._joints.moving
            self._joints.hold()
            self._watchdog.reset()
            repeated = self._stopped and not dropped and not moving
            self._stopped = True
        if not repeated:
            self._wake.set()
        log.log(logging.DEBUG if repeated else logging.INFO,
                "stop from %s: tracks to zero, joints hold, %d pending claim(s) dropped", source, len(dropped))

    def _calibrate_imu(self, source: str) -> None:
        tracks = self._snap.tracks
        measured = max(abs(tracks.left_mps), abs(tracks.right_mps))
        with self._lock:
            holder = self._arbiter.holder(BASE, self._clock())
            target = self._base_target(holder.command) if holder is not None else (0.0, 0.0)
            commanded = self._cmd
            if commanded != (0.0, 0.0) or target != (0.0, 0.0) or measured > STILL_MPS:
                raise CommandError(
                    f"calibrate_imu needs the base still: commanded ({commanded[0]:.3f}, {commanded[1]:.3f}) "
                    f"m/s, target ({target[0]:.3f}, {target[1]:.3f}) m/s, measured {measured:.3f} m/s")
            if self._calibration is not None and not self._calibration.done():
                raise CommandError("calibrate_imu: a calibration is already running")
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
        with self._lock:
            now = self._clock()
            driving = []
            base = self._arbiter.holder(BASE, now)
            if base is not None and base.source == source:
                driving.append("base")
            jh = self._arbiter.holder(JOINTS, now)
            if (jh is not None and jh.source == source and jh.command is not None) or \
                    (self._joints.owner == source and self._joints.moving):
                driving.append("joints")
                self._joints.hold()
            dropped = self._arbiter.drop([source])
        if driving:
            self._wake.set()
            log.warning("%s released (%s) while driving %s: stopped at once", source, reason, " and ".join(driving))
        else:
            log.info("%s released (%s); %d pending claim(s) dropped", source, reason, len(dropped))

    def snapshot(self) -> Snapshot:
        """The newest tick's state (an immutable object; reading it takes no lock)."""
        return self._snap

    def samples_since(self, seq: int, limit: int = 256) -> list[Snapshot]:
        """Snapshots with ``seq`` greater than the given one still in the ring, oldest first, at most ``limit``."""
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValueError(f"samples_since limit must be a positive integer, got {limit!r}")
        with self._ring_lock:
            ring = list(self._ring)
        return [s for s in ring if s.seq > seq][:limit]

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
        speed = None if max_speed_mps is None else _positive("max_speed_mps", max_speed_mps, self._full_duty_mps)
        accel = None if max_accel_mps2 is None else _positive("max_accel_mps2", max_accel_mps2, None)
        with self._lock:
            if speed is not None:
                self._max_speed = speed
            if accel is not None:
                self._max_accel = accel
        log.info("base limits now max_speed %.3f m/s, max_accel %.3f m/s^2", self._max_speed, self._max_accel)

    def limits(self) -> tuple[float, float]:
        """Current (max_speed_mps, max_accel_mps2)."""
        return self._max_speed, self._max_accel

    # ================================================================== the tick
    def tick(self, now: float | None = None) -> Snapshot:
        """Run exactly one iteration at ``now`` (default: the clock) and return its snapshot.

        For tests and tools that drive time themselves; do not mix with :meth:`start`.
        """
        if self._thread is not None and self._thread.is_alive():
            raise RuntimeError("tick() called while the control thread runs")
        return self._tick(self._clock() if now is None else now)

    def _tick(self, now: float) -> Snapshot:
        started = time.monotonic()
        dt = self.period_s if self._last_t is None else now - self._last_t
        self._last_t = now
        with self._lock:
            if not self._motor_ok:
                self._arbiter.drop(channels=(BASE,))
            base = self._arbiter.select(BASE, now)
            joints = self._arbiter.select(JOINTS, now)
            watchdog = self._watchdog.update((base, joints))
            applied = self._cmd
            self._cmd = self._base_step(base, dt)
            cmd = self._cmd
            jv = joints.velocity
            self._joints.step(now, dt, jv.qd if isinstance(jv, JointVelocity) else None,
                              joints.winner.source if joints.winner else "")
            joint_state = self._joints.state()
            gripper = self._joints.gripper
            pulses = self._joints.pulses()
            overridden = self._arbiter.overridden()
            stopped = self._stopped
        duty = tracks_to_duty(cmd[0], cmd[1], self._full_duty_mps)
        self._write_duty(duty)
        if pulses != self._last_pulses:
            self._hw.set_servo_pulses(dict(pulses))
            self._last_pulses = pulses
        self._note_base_source(base)

        fb = self._hw.read_motor()      # after the write: feedback never delays the duty
        counts = cps = None
        if fb is not None and fb.left_counts is not None and fb.right_counts is not None:
            counts = (fb.left_counts, fb.right_counts)
            self._counts = counts
        if fb is not None and fb.left_cps is not None and fb.right_cps is not None:
            cps = (fb.left_cps, fb.right_cps)
        reading = self._odometer.measure(dt, counts, cps, applied)
        odom = self._odometer.update(dt, reading)

        devices = self._hw.health()
        snap = Snapshot(
            seq=self._snap.seq + 1,
            t_mono_s=now,
            t_unix_s=self._wall(),
            odom=odom,
            tracks=TrackState(cmd[0], cmd[1], duty[0], duty[1], reading.left_mps, reading.right_mps,
                              self._counts[0], self._counts[1]),
            joints=joint_state,
            gripper=gripper,
            imu=self._hw.latest_imu(),
            power=self._hw.latest_power(),
            active_source=base.winner.source if base.winner else "",
            overridden=overridden,
            watchdog=watchdog,
            stopped=stopped,
            faults=self._hw.faults(devices),
            devices=devices,
        )
        self._snap = snap
        with self._ring_lock:
            self._ring.append(snap)
        self._ticks += 1
        self._tick_times.append(now)
        if self._first_tick is None:
            self._first_tick = now
        self._max_tick_s = max(self._max_tick_s, time.monotonic() - started)
        return snap

    def _base_target(self, command: Command | None) -> tuple[float, float]:
        if isinstance(command, BaseVelocity):
            return limited_tracks(command.vx, command.omega, self.cfg.base.track_width_m, self._max_speed)
        if isinstance(command, TrackDuty):
            return scale_to_limit(command.left * self._full_duty_mps, command.right * self._full_duty_mps,
                                  self._max_speed)
        return 0.0, 0.0

    def _base_step(self, sel: Selection, dt: float) -> tuple[float, float]:
        """Track speeds for this tick: ramp to the winner's target, or zero at once without one."""
        if sel.velocity is None:
            return 0.0, 0.0
        return ramp(self._cmd, self._base_target(sel.velocity), self._max_accel * max(dt, 0.0))

    def _write_duty(self, duty: tuple[float, float]) -> None:
        ok = self._hw.set_duty(duty[0], duty[1])
        if ok == self._motor_ok:
            return
        self._motor_ok = ok
        if ok:
            log.info("motor: duty write confirmed again; tracks at zero until a new command arrives")
        else:
            log.error("motor: duty write failed; base commands dropped, tracks held at zero")
        if not ok:
            with self._lock:
                self._cmd = (0.0, 0.0)

    def _note_base_source(self, sel: Selection) -> None:
        src = sel.winner.source if sel.winner else ""
        if src != self._base_source:
            if src and self._base_source:
                log.info("base: %s takes over from %s", src, self._base_source)
            else:
                log.debug("base: driven by %s", src or "nobody")
            self._base_source = src

    # ================================================================== thread
    def start(self) -> None:
        """Start the control thread (once)."""
        if self._thread is not None:
            raise RuntimeError("control loop already started")
        self._thread = threading.Thread(target=self._run, name="control", daemon=True)
        self._thread.start()
        log.info("control loop running at %.0f Hz", self.cfg.control.rate_hz)

    def _run(self) -> None:
        period = self.period_s
        slot = self._clock()
        served = None           # the deadline the last extra tick was run for (never twice)
        while not self._halt.is_set():
            now = self._clock()
            with self._lock:    # deadlines of what drove at the last tick, even if past by now
                expiry = self._arbiter.next_expiry(now if self._last_t is None else self._last_t)
            wake = slot if expiry is None or expiry == served else min(slot, expiry)
            if now < wake:
                self._wake.wait(wake - now)
                if self._halt.is_set():
                    break
                now = self._clock()
                if self._wake.is_set():     # a stop or release: apply it without waiting for the slot
                    self._wake.clear()
                    self._safe_tick(now)
                    continue
                if now < wake:
                    continue
            if now < slot:      # a driving command's deadline fell between slots: zero it now
                served = expiry
                self._safe_tick(now)
                continue
            late = now - slot > period / 2
            self._safe_tick(now)
            slot += period
            after = self._clock()
            if after >= slot:  # overran: skip the missed slots rather than burst
                slot += (math.floor((after - slot) / period) + 1) * period
                late = True
            self._late += late

    def _safe_tick(self, now: float) -> None:
        try:
            self._tick(now)
        except Exception:  # the loop must outlive any bug in one tick
            # rate-limited: a bug that fails every tick would otherwise log 50 tracebacks a second
            self._tick_errors.log(logging.ERROR, "tick", "control tick failed; commanding zero and carrying on",
                                  exc_info=True)
            with self._lock:
                self._cmd = (0.0, 0.0)
            try:
                self._hw.set_duty(0.0, 0.0)
            except Exception:  # Hardware never raises; guard anyway
                log.exception("zero duty after a failed tick failed too")

    def close(self, timeout_s: float = 2.0) -> bool:
        """Stop the thread, command zero to the motors and confirm the write (SIGTERM path).

        Retries the zero write until it is acknowledged or ``timeout_s`` has passed.
        Idempotent. Returns True when the zero was confirmed.
        """
        self._closed = True
        self._halt.set()
        self._wake.set()
        deadline = time.monotonic() + timeout_s
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout_s)
            if self._thread.is_alive():
                log.error("control thread did not stop within %.1f s", timeout_s)
        with self._lock:
            self._arbiter.drop()
            self._joints.hold()
            self._cmd = (0.0, 0.0)
        pause = threading.Event()
        while True:
            if self._hw.set_duty(0.0, 0.0):
                log.info("control loop closed: zero duty confirmed")
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                log.error("control loop closed: zero duty NOT confirmed within %.1f s", timeout_s)
                return False
            pause.wait(min(0.05, left))

    # ================================================================== timing
    def tick_stats(self) -> TickStats:
        """(ticks, late_ticks, max_tick_s, achieved_hz); achieved over the last ~1 s."""
        return TickStats(self._ticks, self._late, self._max_tick_s, self._achieved_hz())

    def _achieved_hz(self) -> float:
        if self._first_tick is None:
            return 0.0
        now = self._clock()
        window = min(RATE_WINDOW_S, now - self._first_tick + self.period_s)
        if window <= 0:
            return 0.0
        times = list(self._tick_times)
        return sum(1 for t in times if t > now - window) / window

    def keeps_rate(self) -> bool:
        """True while the thread runs and the last ~1 s achieved >= 80 % of ``rate_hz`` (systemd WATCHDOG=1 gate)."""
        running = self._thread is not None and self._thread.is_alive()
        return running and self._achieved_hz() >= RATE_SHARE * self.cfg.control.rate_hz


def _log_calibration(fut: concurrent.futures.Future) -> None:
    err = fut.exception()
    if err is not None:
        log.error("IMU gyro calibration failed: %s", err)
    else:
        log.info("IMU gyro calibration done: bias %s rad/s", fut.result())
