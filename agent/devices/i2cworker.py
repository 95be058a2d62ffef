"""One worker thread per I2C bus: servo writes (latest wins), IMU and power reads at their rates.

Part of agent/devices/hardware.py's Hardware (docs/architecture.md, "Hardware"): the
transactions of one bus never interleave and a hung bus never stalls the
control loop. A sensor is read every ``1 / rate_hz``, or every ``poll_period_s`` of its
driver when that is longer (the MPU-6050 gathers samples in its FIFO and is polled
every 4 samples: 25 wake-ups a second instead of 100). A gyro calibration runs here one read per pass (the IMU driver's
``gyro_calibration``, each read through ``Supervised.call``), interleaved with the bus's other devices, never as one
2 s block.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import time
from typing import Any, Callable

from agent.errors import DriverError
from agent.devices.health import LOST
from agent.model import ImuSample, PowerSample
from agent.devices.supervisor import Supervised
from drivers.base import GyroCalibrationSteps, Imu, PowerMonitor, ServoController

log = logging.getLogger(__name__)


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
        self._slices: tuple[concurrent.futures.Future, Any] | None = None  # a calibration taken a read at a time
        self._slice_due = 0.0
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
            self._calibration_slice()
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
                # a driver that buffers samples (the MPU-6050's FIFO) is polled at its own, longer period
                driver = dev.driver
                entry[3] = max(due + max(period, driver.poll_period_s if driver is not None else 0.0), now)
            dues = [e[3] for e in sensors] + ([self._slice_due] if self._slices is not None else [])
            timeout = max(0.0, min(dues) - time.monotonic()) if dues else 0.5
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
            driver = self.imu.driver if self.imu is not None else None
            if driver is None:
                fut.set_exception(DriverError("IMU is not available", device="imu"))
                continue
            if self._slices is not None:       # one at a time: a second request waits for the first
                with self._lock:
                    self._calibrations.append((fut, samples))
                continue
            self._guarded(fut, lambda: self._begin(fut, driver, samples))

    def _begin(self, fut: concurrent.futures.Future, driver: Imu, samples: int) -> None:
        """Start the driver's stepwise calibration (no I/O yet); one read per pass from then on, so the
        bus's other devices keep their rates."""
        cal = driver.gyro_calibration(samples)
        if cal is None:
            raise DriverError(f"{type(driver).__name__} has no gyro calibration", device="imu")
        self._slice_due = time.monotonic()
        self._slices = (fut, cal)

    def _calibration_slice(self) -> None:
        """One read of the running calibration when due (through the IMU's supervisor: a bus error
        counts against its health); finish it after the last."""
        if self._slices is None or time.monotonic() < self._slice_due:
            return
        fut, cal = self._slices
        if self._guarded(fut, lambda: self._supervised_step(cal)) and not cal.done:
            self._slice_due = time.monotonic() + cal.period_s
            return
        if not fut.done():
            self._guarded(fut, lambda: fut.set_result(cal.finish()))
        self._slices = None

    def _supervised_step(self, cal: GyroCalibrationSteps) -> None:
        """``cal.step()`` through ``Supervised.call``; raises the DriverError the call accounted for."""
        failed: list[DriverError] = []

        def step(_driver: Imu) -> bool:
            try:
                cal.step()
            except DriverError as err:
                failed.append(err)
                raise
            except Exception as err:
                failed.append(DriverError(f"unexpected {type(err).__name__}: {err}", device="imu"))
                raise
            return True

        if self.imu is None or not self.imu.call(step, default=False):
            raise failed[0] if failed else DriverError("IMU is not available", device="imu")

    def _guarded(self, fut: concurrent.futures.Future, fn: Callable[[], object]) -> bool:
        """Run ``fn``; on an error fail ``fut`` (and end the calibration) and return False."""
        try:
            fn()
            return True
        except DriverError as err:
            fut.set_exception(err)
        except Exception as err:  # noqa: BLE001 - a driver bug must not end this bus's thread
            log.exception("imu: gyro calibration raised %s instead of DriverError", type(err).__name__)
            fut.set_exception(DriverError(f"unexpected {type(err).__name__}: {err}", device="imu"))
        self._slices = None
        return False

    def close(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout=3.0)
