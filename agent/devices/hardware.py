"""The robot's devices, built from ``cfg.drivers`` and supervised.

:class:`Hardware` is what the control loop talks to (docs/architecture.md,
"Hardware"). Its methods never raise: a failing device is marked ``degraded``
or ``lost`` (agent/devices/supervisor.py) and reopened in the background while the
agent keeps running without it. The motor controller is served by its own
thread (agent/devices/motorio.py: the control thread posts the newest duty and
reads the published feedback, never waiting for the serial line); I2C devices (IMU, power
monitor, servo chip) are served by one thread per bus (agent/devices/i2cbus.py) so
transactions on a bus never interleave and a hung bus never stalls the control loop. Each
of these threads (agent/devices/worker.py) also reopens its lost devices after their backoff. The e-stop input (a normally-closed switch on a GPIO
line) is watched by its own thread (agent/devices/estopinput.py), which calls the
control loop's e-stop API through :meth:`Hardware.watch_estop`.

Drivers are built from their config sections by agent/devices/build.py (the registry's class
for the ``kind``; transports by value through an opener table, drivers/transport.py:
``sim://`` -> the simulated tank's emulators, agent/devices/simtank.py). Hardware owns the
I2C buses it opens and closes them.
"""

from __future__ import annotations

import concurrent.futures
import logging
from typing import Any, Callable

from agent.config import AgentConfig
from agent.devices.build import Buses, build_driver
from agent.devices.estopinput import EstopSink, EstopWatch
from agent.devices.health import LOST, OK
from agent.devices.i2cbus import I2cBusIO
from agent.devices.motorio import DUTY_REFRESH_S, MotorIO, duty_refresh_s, rest_period_s
from agent.devices.supervisor import Supervised
from agent.errors import DriverError
from agent.model import DeviceHealth, ImuSample, PowerSample
from drivers.base import (DEFAULT_FEEDBACK_HZ, Imu, MotorController, MotorFeedback, PowerMonitor, ServoController,
                          SwitchInput)
from drivers.i2c import bus_key
from drivers.registry import driver_class
from drivers.transport import Openers

log = logging.getLogger(__name__)

__all__ = ["Hardware"]


def _supervised(kind: str, dcfg: Any, buses: Buses) -> Supervised:
    """One supervised device of ``kind`` from its config section: a GPIO input is lost at its
    first error (a GPIO read does not fail transiently); a motor controller is written a zero duty
    at every open (a duty write, which feeds a controller's own watchdog: the line firmware's stop
    command ``S`` does not, docs/line-protocol.md)."""
    return Supervised(kind, lambda: build_driver(kind, dcfg, buses), lost_after=1 if dcfg.transport == "gpio" else 3,
                      on_open=(lambda drv: drv.set_duty(0.0, 0.0)) if kind == "motor" else None)


class Hardware:
    """Supervised devices of the robot; see module docstring. Construct with :meth:`from_config`
    or directly from :class:`Supervised` devices (tests, other rigs).

    Attributes:
        motor_io: the motor controller's thread (agent/devices/motorio.py), None without a motor.
        estop_watch: the e-stop input's thread (agent/devices/estopinput.py), None without an input.
    """

    def __init__(self, *, motor: Supervised[MotorController] | None = None,
                 imu: Supervised[Imu] | None = None, imu_rate_hz: float = 100.0,
                 power: Supervised[PowerMonitor] | None = None, power_rate_hz: float = 10.0,
                 servo: Supervised[ServoController] | None = None,
                 estop: Supervised[SwitchInput] | None = None, estop_debounce_s: float = 0.3,
                 estop_poll_hz: float = 100.0,
                 i2c_groups: list[tuple[str, list[str]]] | None = None,
                 motor_feedback_hz: float = DEFAULT_FEEDBACK_HZ, motor_refresh_s: float = DUTY_REFRESH_S,
                 motor_rest_s: float | None = None, buses: Buses | None = None) -> None:
        self.motor = motor
        self._buses = buses
        self.motor_io = None if motor is None else MotorIO(
            motor, feedback_hz=motor_feedback_hz, on_feedback=self._note_status, refresh_s=motor_refresh_s,
            rest_s=motor_rest_s, on_rest_end=self._rest_ended, zero_at_open=True)
        self.imu, self.power, self.servo = imu, power, servo
        self.estop = estop
        self.estop_watch = None if estop is None else EstopWatch(
            estop, debounce_s=estop_debounce_s, poll_hz=estop_poll_hz)
        self._devices = [d for d in (motor, imu, power, servo, estop) if d is not None]
        self._health_sources: list[Callable[[], tuple[DeviceHealth, ...]]] = []
        self._rest_listeners: list[Callable[[], None]] = []
        self._last_status: tuple[str, ...] = ()
        self._faults: tuple[object, tuple[str, ...]] = (None, ())     # (health and status, faults) last made
        groups = i2c_groups or [("i2c", [n for n, d in (("imu", imu), ("power", power), ("servo", servo)) if d])]
        by_name = {"imu": imu, "power": power, "servo": servo}
        self._buses_io: list[I2cBusIO] = []
        for bus_name, names in groups:
            if not names:
                continue
            self._buses_io.append(I2cBusIO(
                bus_name,
                imu=by_name["imu"] if "imu" in names else None, imu_rate_hz=imu_rate_hz,
                power=by_name["power"] if "power" in names else None, power_rate_hz=power_rate_hz,
                servo=by_name["servo"] if "servo" in names else None, resting=self._resting,
            ))

    def _resting(self) -> bool:
        """The tank is at rest (the motor line's view, agent/devices/motorio.py): the buses read a
        buffering IMU less often (agent/devices/i2cbus.py)."""
        return self.motor_io is not None and self.motor_io.resting

    def _rest_ended(self) -> None:
        """On the motor's thread: the rest ended; each bus reads its IMU at once, and the listeners hear it
        (the control loop ticks at once: agent/control/rest.py)."""
        for bus in self._buses_io:
            bus.hurry()
        for listener in self._rest_listeners:
            listener()

    def on_rest_end(self, listener: Callable[[], None]) -> None:
        """Call ``listener()`` on the motor's thread whenever the motor line's rest ends (a non-zero duty,
        a track that turns, a current, a status bit, a failed write or read); it must not block."""
        self._rest_listeners.append(listener)

    def motor_resting(self) -> bool:
        """The motor line is at rest (agent/devices/motorio.py: zero acknowledged, tracks still and healthy
        for 1 s); False without a motor controller."""
        return self._resting()

    # ------------------------------------------------------------------ building
    @classmethod
    def from_config(cls, cfg: AgentConfig, sim: Any = None) -> "Hardware":
        """Build every configured device from the drivers' registry. ``sim`` is the
        :class:`agent.devices.simtank.SimTank` whose openers serve ``sim://`` ports and buses."""
        d = cfg.drivers
        buses = Buses(sim.openers() if sim is not None else Openers())
        for kind, dcfg in d.devices():  # an unknown scheme fails here, not at every reopen
            buses.check(kind, dcfg)
        devices = {kind: _supervised(kind, dcfg, buses) for kind, dcfg in d.devices()}
        groups: dict[str, list[str]] = {}
        for kind, dcfg in d.devices():
            if dcfg.transport == "i2c":
                groups.setdefault(bus_key(dcfg.bus), []).append(kind)
        estop_timing = {"estop_debounce_s": d.estop.debounce_s,     # edges wake the watch: polls only back them up
                        "estop_poll_hz": d.estop.edge_poll_hz if d.estop.edge_events else d.estop.poll_hz,
                        } if d.estop else {}
        return cls(**devices, **estop_timing, imu_rate_hz=d.imu.rate_hz if d.imu else 100.0,
                   power_rate_hz=d.power.rate_hz if d.power else 10.0, i2c_groups=list(groups.items()),
                   motor_feedback_hz=driver_class(d.motor).feedback_hz(d.motor) if d.motor else DEFAULT_FEEDBACK_HZ,
                   motor_refresh_s=duty_refresh_s(d.motor) if d.motor else DUTY_REFRESH_S,
                   motor_rest_s=rest_period_s(d.motor) if d.motor else None, buses=buses)

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """Open every device once (a failure leaves it lost and retried by its thread), then start the
        threads; the motor's thread starts right after the motor's open, so the zero written at the open
        is kept fed (agent/devices/motorio.py) while the other devices open and until the control loop's
        first tick."""
        for dev in self._devices:
            dev.try_open()
            if dev is self.motor and self.motor_io is not None:
                self.motor_io.start()
        for w in self._buses_io:
            w.start()
        if self.estop_watch is not None:
            self.estop_watch.start()

    def close(self) -> None:
        """Stop the threads, command the motors to zero, close everything. Idempotent."""
        if self.estop_watch is not None:
            self.estop_watch.close()
        for w in self._buses_io:
            w.close()
        if self.motor_io is not None:
            self.motor_io.close()
        if self.motor is not None:
            self.motor.call(lambda d: d.stop())
        for dev in reversed(self._devices):
            dev.close()
        if self._buses is not None:
            self._buses.close()

    def watch_estop(self, sink: EstopSink) -> None:
        """Send the e-stop input's verdicts to ``sink`` (agent.devices.estopinput.LoopEstop on the control
        loop). No-op without an input; call before :meth:`start`."""
        if self.estop_watch is not None:
            self.estop_watch.connect(sink)

    def add_health_source(self, source: Callable[[], tuple[DeviceHealth, ...]]) -> None:
        """Include another component's device health (e.g. the cameras of the video hub)."""
        self._health_sources.append(source)

    # ------------------------------------------------------------------ control thread
    def set_duty(self, left: float, right: float, *, force: bool = False) -> bool:
        """Post track duty, each -1..1, to the motor's thread (latest wins; never blocks); ``force``:
        written even when unchanged since a recent write (the closing zero, whose answer is awaited).

        Returns True while the controller is present and acknowledged the last duty written;
        False with no motor or a lost one.
        """
        if self.motor_io is None:
            return False
        return self.motor_io.post(left, right, force=force)

    def settle_motor(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` until every duty posted so far was written; False with no motor or late.

        For callers that step time themselves (``ControlLoop.tick``) and for the closing zero.
        """
        return self.motor_io is not None and self.motor_io.settle(timeout_s)

    def has_motor(self) -> bool:
        """True when a motor controller is configured and not lost (a duty can be confirmed)."""
        return self.motor is not None and self.motor.state != LOST

    def read_motor(self) -> MotorFeedback | None:
        """The newest feedback the motor's thread read (encoders, battery, currents, status), or None.

        The controller is asked ``feedback_hz`` times a second (a RoboClaw feedback set is
        3 transactions, about 5.7 ms of wire time at 115200 baud) between duty writes. None
        while the controller is lost or its last read failed.
        """
        return None if self.motor_io is None else self.motor_io.feedback

    def read_motor_timed(self) -> tuple[MotorFeedback | None, tuple[float, float] | None]:
        """:meth:`read_motor` and the (start, end) monotonic span of the feedback set that read it, s
        (None with no feedback): one consistent pair, for odometry (agent.control.kinematics.Odometer)."""
        return (None, None) if self.motor_io is None else self.motor_io.timed

    def _note_status(self, fb: MotorFeedback) -> None:
        """Log a change of the controller's status flags once (motor thread)."""
        if fb.status_text != self._last_status:
            if fb.status_text:
                log.error("motor: controller reports %s", ", ".join(fb.status_text))
            else:
                log.info("motor: controller status normal")
            self._last_status = fb.status_text

    def set_servo_pulses(self, pulses: dict[int, float | None]) -> None:
        """Servo outputs, channel -> pulse in microseconds (None = release). Latest value wins."""
        for w in self._buses_io:
            if w.servo is not None:
                w.set_servo_pulses(pulses)

    # ------------------------------------------------------------------ sensors
    def latest_imu(self) -> ImuSample | None:
        """Newest IMU sample (SI, body frame), or None: no IMU, none read yet, or the IMU is lost."""
        for w in self._buses_io:
            if w.imu is not None:
                return w.latest_imu
        return None

    def latest_power(self) -> PowerSample | None:
        """Newest power-monitor sample (V, A, W, %), or None: no monitor, none read yet, or it is lost."""
        for w in self._buses_io:
            if w.power is not None:
                return w.latest_power
        return None

    def calibrate_imu(self, samples: int = 200) -> concurrent.futures.Future:
        """Gyro bias calibration on the IMU's bus thread; the future gives the bias, rad/s."""
        for w in self._buses_io:
            if w.imu is not None:
                return w.calibrate_imu(samples)
        fut: concurrent.futures.Future = concurrent.futures.Future()
        fut.set_exception(DriverError("no IMU configured", device="imu"))
        return fut

    # ------------------------------------------------------------------ health
    def health(self) -> tuple[DeviceHealth, ...]:
        """One DeviceHealth per configured device (``ok`` / ``degraded`` / ``lost``), then the added sources'."""
        out = [d.health() for d in self._devices]
        for src in self._health_sources:
            out.extend(src())
        return tuple(out)

    def faults(self, health: tuple[DeviceHealth, ...] | None = None) -> tuple[str, ...]:
        """Active faults as short strings: ``motor: lost (timeout)``, ``motor: E-Stop``.

        Args:
            health: this tick's :meth:`health`, when the caller already has it (saves gathering it twice).
        """
        health = self.health() if health is None else health
        key = (health, self._last_status)
        if key != self._faults[0]:      # the same reports (each reused while unchanged): the same faults
            out = [f"{h.name}: {h.state} ({h.last_error})" if h.last_error else f"{h.name}: {h.state}"
                   for h in health if h.state != OK]
            out.extend(f"motor: {t}" for t in self._last_status)
            self._faults = (key, tuple(out))
        return self._faults[1]
