"""The control loop: the robot port the adapters talk to, and the only writer to the motors and servos.

:class:`ControlLoop` implements ``RobotPort`` (docs/architecture.md, "The robot
port") and puts together the five parts of agent.control:

- agent.control.front: what adapters call (``submit``, ``release``, ``snapshot``,
  ``samples_since``, ``set_limits``, the e-stop), thread-safe: the loop exposes the
  front's methods as its own;
- agent.control.state: the tick's state and its transitions (a command, a stop, a
  release, the e-stop), under its lock;
- agent.control.tick: the pure tick (state + commands + time -> duty, servo
  pulses; device readings -> snapshot);
- agent.control.devices: the tick's device I/O (duty first, then pulses, then
  feedback and sensors) and the zero writes;
- agent.control.scheduler: the control thread (fixed-rate slots, wake at a
  command deadline and on stop or release, late ticks skipped, tick figures);
- agent.control.rest: when a standing tank's loop ticks at the motor line's rest period
  instead of ``rate_hz`` (docs/safety.md, "The control loop at rest").

The safety path (docs/safety.md): a velocity command older than its source's timeout
stops the tracks at its deadline, never later than one tick after it; ``Stop`` from any
source wins; a released source that was driving stops at once; a failed duty
write drops every base command so the tracks stay at zero until a command
arrives after the motor answers again; :meth:`ControlLoop.close` writes zero and
confirms it; while the emergency stop (:meth:`ControlLoop.estop`) or a failsafe latch holds,
every motion command is refused and the tracks are held at zero (agent.control.safety). The
robot's own failsafes (battery, tilt, stall: agent.control.failsafes) are checked on every
tick's readings; a trip wakes a tick at once, so its zero goes out within milliseconds. A standing
tank's loop rests (agent.control.rest): it ticks at the motor line's rest period until anything
that matters wakes it, and a velocity command is applied at once as at the full rate.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable

from agent.config import AgentConfig
from agent.control.devices import DeviceIO, HardwarePort
from agent.control.front import Front, describe
from agent.control.rest import Rest, quiet
from agent.control.scheduler import Scheduler, TickStats
from agent.control.state import ControlState
from agent.control.tick import check_failsafes, command, motor_answered, observe
from agent.devices.motorio import rest_period_s
from agent.model import Snapshot

log = logging.getLogger(__name__)

#: The interpreter's thread switch interval the loop asks for, s (CPython's default is 5 ms: a
#: woken control or motor thread could wait that long for the GIL behind a busy thread).
SWITCH_INTERVAL_S = 0.001


class ControlLoop:
    """The robot port and control thread; see the module docstring.

    Args:
        cfg: validated configuration (base geometry, sources, joints, rate).
        hardware: the supervised devices (agent.devices.hardware.Hardware or the same interface).
        clock: monotonic clock, s; injected in tests to drive :meth:`tick` deterministically.
        wall: Unix clock, s, for ``Snapshot.t_unix_s``.

    Attributes:
        description: the robot (joints, limits, home, gripper, geometry, cameras).
        period_s: control period, s (1 / rate_hz).
        rest_period_s: the period at rest, s (agent.control.rest; the motor line's rest period), or None:
            the loop never rests (no motor controller, or its rest period not longer than ``period_s``).
        submit, release, snapshot, samples_since, set_limits, limits: the robot port
            (agent.ports.RobotPort): the methods of the loop's :class:`~agent.control.front.Front`.
        estop, release_estop, release_own_estop, restore_estop, on_estop_change, on_command: the
            e-stop and the command tap, the front's methods too (docs/safety.md, agent.recorder).
    """

    def __init__(self, cfg: AgentConfig, hardware: HardwarePort, *,
                 clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time) -> None:
        self.cfg = cfg
        self.description = describe(cfg)
        self.period_s = 1.0 / cfg.control.rate_hz
        self._clock = clock
        self._wall = wall
        self._state = state = ControlState(cfg, clock=clock)
        self._lock = state.lock
        for warning in state.failsafes.warnings:
            log.warning("%s", warning)
        self._io = DeviceIO(hardware, wall)
        self._scheduler = sched = Scheduler(self._step, self._recover, self._deadline,
                                            rate_hz=cfg.control.rate_hz, clock=clock)
        motor = cfg.drivers.motor
        self._rest = Rest(rest_period_s(motor) if motor is not None else None, self.period_s)
        self.rest_period_s = self._rest.period_s
        hardware.on_rest_end(sched.rouse)       # a track pushed, a current, a status bit: tick at once
        self._front = front = Front(state, hardware, wall=wall, wake=sched.wake, rouse=sched.rouse)
        # the robot port (agent.ports.RobotPort), the e-stop and the command tap: the front's own methods
        self.submit, self.release, self.snapshot = front.submit, front.release, front.snapshot
        self.samples_since, self.set_limits, self.limits = front.samples_since, front.set_limits, front.limits
        self.estop, self.release_estop, self.restore_estop = front.estop, front.release_estop, front.restore_estop
        self.release_own_estop, self.on_estop_change = front.release_own_estop, front.on_estop_change
        self.on_command = front.on_command
        self._rouse_listeners: list[Callable[[], None]] = []
        sched.on_roused = self._roused

    def on_rouse(self, listener: Callable[[], None]) -> None:
        """Call ``listener()`` on the control thread after each tick woken while the loop rested (a command,
        a stop, the e-stop, the motor line's rest end) has published its snapshot: telemetry pollers that
        skip their polls at rest (agent.support.beat.RestPolls) look at once. It must not block."""
        self._rouse_listeners.append(listener)

    def _roused(self) -> None:
        for listener in self._rouse_listeners:
            try:
                listener()
            except Exception:  # noqa: BLE001 - a listener's bug must not stop the control thread
                log.exception("rouse listener failed")

    @property
    def safety(self):  # -> agent.control.safety.SafetyLatches
        """The halts (e-stop, failsafe latches) and speed cap; use under :meth:`locked`."""
        return self._state.safety

    def locked(self) -> threading.Lock:
        """The loop's lock: hold it around calls to :attr:`safety` (``trip``, ``condition_cleared``, ...)."""
        return self._lock

    # ================================================================== one tick
    def tick(self, now: float | None = None) -> Snapshot:
        """Run exactly one iteration at ``now`` (default: the clock) and return its snapshot.

        For tests and tools that drive time themselves; do not mix with :meth:`start`.
        """
        return self._scheduler.tick(self._clock() if now is None else now)

    def _step(self, now: float) -> Snapshot:
        with self._lock:
            plan = command(self._state, now)
        ok = self._io.write_duty(plan.duty, wait=not self._scheduler.on_thread())   # self-stepped: this duty's answer
        self._io.write_pulses(plan.pulses)
        readings = self._io.read()      # never waits on a device: published values
        with self._lock:    # the lock twice per tick: the write's answer and the failsafes together
            motor_answered(self._state, ok, now)
            plan, tripped = check_failsafes(self._state, plan, readings)
            still = quiet(self._state, plan, readings)
        rest_s = self._rest.update(now, still)
        self._state.rested = rest_s is not None     # read by the next tick (agent.control.tick.command)
        self._scheduler.rest(rest_s)
        if tripped:         # the zero duty goes out now, not at the next slot
            self._scheduler.wake()
        snap = observe(self._state, plan, readings, resting=rest_s is not None)
        self._front.publish(snap)
        return snap

    def _recover(self) -> None:
        self._state.zero_tracks()
        self._io.zero_after_failure()

    def _deadline(self, now: float) -> float | None:
        with self._lock:    # deadlines of what drove at the last tick, even if past by now
            return self._state.next_deadline(now)

    # ================================================================== thread
    def start(self) -> None:
        """Start the control thread (once); lowers the interpreter's switch interval to ``SWITCH_INTERVAL_S``."""
        if sys.getswitchinterval() > SWITCH_INTERVAL_S:
            sys.setswitchinterval(SWITCH_INTERVAL_S)
        self._scheduler.start()

    def close(self, timeout_s: float = 2.0) -> bool:
        """Stop the thread, command zero to the motors and confirm the write (SIGTERM path).

        Retries the zero write until it is acknowledged or ``timeout_s`` has passed; with no
        controller (none configured, or lost) says so once and does not wait. Idempotent.
        Returns True when the zero was confirmed.
        """
        self._front.close()
        deadline = time.monotonic() + timeout_s
        self._scheduler.stop(timeout_s)
        self._state.halt()
        confirmed = self._io.zero_confirmed(deadline)
        if confirmed:
            log.info("control loop closed: zero duty confirmed")
        elif confirmed is None:
            log.warning("control loop closed: no motor controller to stop (none configured, or lost)")
        else:
            log.error("control loop closed: zero duty NOT confirmed within %.1f s", timeout_s)
        return bool(confirmed)

    def tick_stats(self) -> TickStats:
        """(ticks, late_ticks, max_tick_s, achieved_hz); achieved over the last ~1 s."""
        return self._scheduler.stats()

    def keeps_rate(self) -> bool:
        """True while the thread runs and the last ~1 s achieved >= 80 % of ``rate_hz`` (systemd WATCHDOG=1 gate)."""
        return self._scheduler.keeps_rate()
