"""The robot's devices, built from ``cfg.drivers`` and supervised.

:class:`Hardware` is what the control loop talks to (docs/architecture.md,
"Hardware"). Its methods never raise: a failing device is marked ``degraded``
or ``lost`` (agent/supervisor.py) and reopened in the background while the
agent keeps running without it. Motor calls happen on the control thread;
I2C devices (IMU, power monitor, servo chip) are served by one worker thread
per bus so transactions on a bus never interleave and a hung bus never
stalls the control loop.

Driver classes are found by the config ``kind`` in the drivers' registry
(drivers/registry.py); transports by value through an opener table
(drivers/transport.py: ``sim://`` -> the simulated tank's emulators,
agent/simtank.py). Hardware owns the I2C buses it opens and closes them.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import time
from typing import Any, Callable

from agent.config import AgentConfig
from agent.errors import DriverError
from agent.health import LOST, OK
from agent.model import DeviceHealth, ImuSample, PowerSample
from agent.supervisor import Reopener, Supervised
from drivers.base import Imu, MotorController, MotorFeedback, PowerMonitor, ServoController
from drivers.i2c import bus_key, open_bus
from drivers.registry import driver_class
from drivers.transport import Openers

log = logging.getLogger(__name__)

__all__ = ["Buses", "Hardware", "I2cWorker", "driver_class"]


class Buses:
    """The I2C buses Hardware opens: one handle per bus (``1`` and ``/dev/i2c-1`` are one), opened
    on first use by a device, closed by :meth:`close`. Thread-safe."""

    def __init__(self, openers: Openers) -> None:
        self._openers = openers
        self._lock = threading.Lock()
        self._open: dict[str, Any] = {}

    def getter(self, value: int | str) -> Callable[[], Any]:
        """A function returning the open bus ``value`` names (opening it on first call)."""
        key = bus_key(value)

        def get() -> Any:
            with self._lock:
                if key not in self._open:
                    self._open[key] = open_bus(value, openers=self._openers)
                return self._open[key]
        return get

    def close(self) -> None:
        """Close every bus opened here. Idempotent; a failing close is logged."""
        with self._lock:
            opened, self._open = self._open, {}
        for key, bus in opened.items():
            try:
                bus.close()
            except OSError as err:
                log.warning("I2C bus %s: close failed: %s", key, err)


def _transport(dcfg: Any) -> tuple[str, int | str]:
    """``("serial", port)`` or ``("i2c", bus)`` of a device's config section."""
    return ("serial", dcfg.port) if hasattr(dcfg, "port") else ("i2c", dcfg.bus)


def _supervised(kind: str, dcfg: Any, openers: Openers, buses: Buses) -> Supervised:
    """One supervised device of ``kind`` from its config section: serial (``port``) or I2C (``bus``)."""
    klass = driver_class(dcfg)
    if hasattr(dcfg, "port"):
        return Supervised(kind, lambda: klass(dcfg, name=kind, openers=openers),
                          on_open=(lambda drv: drv.stop()) if kind == "motor" else None)
    get_bus = buses.getter(dcfg.bus)
    return Supervised(kind, lambda: klass(dcfg, get_bus(), name=kind))


class I2cWorker:
    """One thread per I2C bus: servo writes (latest wins), IMU and power reads at their rates."""

    def __init__(self, bus_name: str, *, imu: Supervised[Imu] | None, imu_rate_hz: float,
                 power: Supervised[PowerMonitor] | None, power_rate_hz: float,
                 servo: Supervised[ServoController] | None) -> None:
        self.bus_name = bus_name
        self.imu, self.power, self.servo = imu, power, servo
        self._imu_period = 1.0 / imu_rate_hz
        self._power_period = 1.0 / power_rate_hz
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._pending: dict[int, float | None] = {}
        self._written: dict[int, float | None] = {}
        self._calibrations: list[tuple[concurrent.futures.Future, int]] = []
        self.latest_imu: ImuSample | None = None
        self.latest_power: PowerSample | None = None
        self.reads = 0
        self._thread = threading.Thread(target=self._run, name=f"i2c-{bus_name}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def set_servo_pulses(self, pulses: dict[int, float | None]) -> None:
        with self._lock:
            self._pending.update(pulses)
        self._wake.set()

    def calibrate_imu(self, samples: int) -> concurrent.futures.Future:
        fut: concurrent.futures.Future = concurrent.futures.Future()
        with self._lock:
            self._calibrations.append((fut, samples))
        self._wake.set()
        return fut

    def _run(self) -> None:
        # [device, attribute holding its latest sample, period, next due time]
        sensors = [[dev, attr, period, time.monotonic()]
                   for dev, attr, period in ((self.imu, "latest_imu", self._imu_period),
                                             (self.power, "latest_power", self._power_period))
                   if dev is not None]
        while not self._stop.is_set():
            self._write_servos()
            self._run_calibrations()
            now = time.monotonic()
            for entry in sensors:
                dev, attr, period, due = entry
                if now < due:
                    continue
                sample = dev.call(lambda d: d.read())
                if sample is not None:
                    setattr(self, attr, sample)
                    self.reads += 1
                elif dev.state == LOST:
                    setattr(self, attr, None)  # publish "unavailable", never a stale value
                entry[3] = max(due + period, now)
            timeout = max(0.0, min(e[3] for e in sensors) - time.monotonic()) if sensors else 0.5
            self._wake.wait(timeout)
            self._wake.clear()

    def _write_servos(self) -> None:
        if self.servo is None:
            return
        with self._lock:
            pending, self._pending = self._pending, {}
        if self.servo.state == LOST:
            self._written.clear()  # rewrite everything once the chip is back
            with self._lock:
                for ch, us in pending.items():
                    self._pending.setdefault(ch, us)
            return
        for ch, us in pending.items():
            if self._written.get(ch, -1.0) == us:
                continue
            ok = self.servo.call(
                (lambda d, ch=ch: d.release(ch)) if us is None else (lambda d, ch=ch, us=us: d.set_pulse_us(ch, us)),
                default=False,
            )
            if ok is not False:
                self._written[ch] = us
            else:
                with self._lock:
                    self._pending.setdefault(ch, us)

    def _run_calibrations(self) -> None:
        with self._lock:
            jobs, self._calibrations = self._calibrations, []
        for fut, samples in jobs:
            if self.imu is None or self.imu.driver is None:
                fut.set_exception(DriverError("IMU is not available", device="imu"))
                continue
            try:
                bias = self.imu.driver.calibrate_gyro(samples)
            except DriverError as err:
                fut.set_exception(err)
            except Exception as err:  # noqa: BLE001 - a driver bug must not end this bus's thread
                log.exception("imu: calibrate_gyro raised %s instead of DriverError", type(err).__name__)
                fut.set_exception(DriverError(f"unexpected {type(err).__name__}: {err}", device="imu"))
            else:
                fut.set_result(bias)

    def close(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout=3.0)


class Hardware:
    """Supervised devices of the robot; see module docstring. Construct with :meth:`from_config`
    or directly from :class:`Supervised` devices (tests, other rigs)."""

    def __init__(self, *, motor: Supervised[MotorController] | None = None,
                 imu: Supervised[Imu] | None = None, imu_rate_hz: float = 100.0,
                 power: Supervised[PowerMonitor] | None = None, power_rate_hz: float = 10.0,
                 servo: Supervised[ServoController] | None = None,
                 i2c_groups: list[tuple[str, list[str]]] | None = None,
                 motor_feedback_hz: float = 20.0, clock: Callable[[], float] = time.monotonic,
                 buses: Buses | None = None) -> None:
        self.motor = motor
        self._buses = buses
        self._feedback_period = 1.0 / motor_feedback_hz
        self._next_feedback = 0.0
        self._feedback: MotorFeedback | None = None
        self._clock = clock
        self.imu, self.power, self.servo = imu, power, servo
        self._devices = [d for d in (motor, imu, power, servo) if d is not None]
        self._health_sources: list[Callable[[], tuple[DeviceHealth, ...]]] = []
        self._last_status: tuple[str, ...] = ()
        groups = i2c_groups or [("i2c", [n for n, d in (("imu", imu), ("power", power), ("servo", servo)) if d])]
        by_name = {"imu": imu, "power": power, "servo": servo}
        self._workers: list[I2cWorker] = []
        for bus_name, names in groups:
            if not names:
                continue
            self._workers.append(I2cWorker(
                bus_name,
                imu=by_name["imu"] if "imu" in names else None, imu_rate_hz=imu_rate_hz,
                power=by_name["power"] if "power" in names else None, power_rate_hz=power_rate_hz,
                servo=by_name["servo"] if "servo" in names else None,
            ))
        self._reopener = Reopener(self._devices)

    # ------------------------------------------------------------------ building
    @classmethod
    def from_config(cls, cfg: AgentConfig, sim: Any = None) -> "Hardware":
        """Build every configured device from the drivers' registry. ``sim`` is the
        :class:`agent.simtank.SimTank` whose openers serve ``sim://`` ports and buses."""
        d = cfg.drivers
        openers = sim.openers() if sim is not None else Openers()
        for kind, dcfg in d.devices():  # an unknown scheme fails here, not at every reopen
            openers.check(*_transport(dcfg), kind)
        buses = Buses(openers)
        devices = {kind: _supervised(kind, dcfg, openers, buses) for kind, dcfg in d.devices()}
        groups: dict[str, list[str]] = {}
        for kind, dcfg in d.devices():
            if hasattr(dcfg, "bus"):
                groups.setdefault(bus_key(dcfg.bus), []).append(kind)
        return cls(**devices, imu_rate_hz=d.imu.rate_hz if d.imu else 100.0,
                   power_rate_hz=d.power.rate_hz if d.power else 10.0, i2c_groups=list(groups.items()),
                   motor_feedback_hz=getattr(d.motor, "feedback_hz", 20.0), buses=buses)

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """Open every device once (a failure leaves it lost and retried), then start the workers."""
        for dev in self._devices:
            dev.try_open()
        for w in self._workers:
            w.start()
        self._reopener.start()

    def close(self) -> None:
        """Stop the workers, command the motors to zero, close everything. Idempotent."""
        self._reopener.close()
        for w in self._workers:
            w.close()
        if self.motor is not None:
            self.motor.call(lambda d: d.stop())
        for dev in reversed(self._devices):
            dev.close()
        if self._buses is not None:
            self._buses.close()

    def add_health_source(self, source: Callable[[], tuple[DeviceHealth, ...]]) -> None:
        """Include another component's device health (e.g. the cameras of the video hub)."""
        self._health_sources.append(source)

    # ------------------------------------------------------------------ control thread
    def set_duty(self, left: float, right: float) -> bool:
        """Command track duty, each -1..1. True when the write was acknowledged. Control thread only."""
        if self.motor is None:
            return False
        return bool(self.motor.call(lambda d: (d.set_duty(left, right), True)[1], default=False))

    def read_motor(self) -> MotorFeedback | None:
        """Encoders, battery, currents, status from the motor controller, or None. Control thread only.

        The controller is asked at most ``feedback_hz`` times a second (a RoboClaw feedback set is
        7 transactions, about 15 ms of wire time at 38400 baud); between reads the last feedback is
        returned. None while the controller is lost.
        """
        if self.motor is None:
            return None
        now = self._clock()
        if now < self._next_feedback and self.motor.state != LOST:
            return self._feedback
        self._next_feedback = now + self._feedback_period
        fb = self.motor.call(lambda d: d.read_feedback())
        self._feedback = fb
        if fb is not None:
            if fb.status_text != self._last_status:
                if fb.status_text:
                    log.error("motor: controller reports %s", ", ".join(fb.status_text))
                else:
                    log.info("motor: controller status normal")
                self._last_status = fb.status_text
        return fb

    def set_servo_pulses(self, pulses: dict[int, float | None]) -> None:
        """Servo outputs, channel -> pulse in microseconds (None = release). Latest value wins."""
        for w in self._workers:
            if w.servo is not None:
                w.set_servo_pulses(pulses)

    # ------------------------------------------------------------------ sensors
    def latest_imu(self) -> ImuSample | None:
        """Newest IMU sample (SI, body frame), or None: no IMU, none read yet, or the IMU is lost."""
        for w in self._workers:
            if w.imu is not None:
                return w.latest_imu
        return None

    def latest_power(self) -> PowerSample | None:
        """Newest power-monitor sample (V, A, W, %), or None: no monitor, none read yet, or it is lost."""
        for w in self._workers:
            if w.power is not None:
                return w.latest_power
        return None

    def calibrate_imu(self, samples: int = 200) -> concurrent.futures.Future:
        """Gyro bias calibration on the IMU's bus thread; the future gives the bias, rad/s."""
        for w in self._workers:
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
        out = [f"{h.name}: {h.state} ({h.last_error})" if h.last_error else f"{h.name}: {h.state}"
               for h in (self.health() if health is None else health) if h.state != OK]
        out.extend(f"motor: {t}" for t in self._last_status)
        return tuple(out)
