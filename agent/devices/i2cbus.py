"""One thread per I2C bus: servo writes (latest wins), IMU and power reads at their rates.

Part of agent/devices/hardware.py's Hardware (docs/architecture.md, "Hardware"): the
transactions of one bus never interleave (its devices are read, written and reopened on one
:class:`agent.devices.worker.DeviceWorker`) and a hung bus never stalls the control loop. A
sensor is read every ``1 / rate_hz``, or every ``poll_period_s`` of its driver when that is
longer (the MPU-6050 gathers samples in its FIFO and is polled every 4 samples: 25 wake-ups a
second instead of 100). While the tank is at rest (``resting``: the motor line's rest,
agent/devices/motorio.py; docs/safety.md, "The motor line at rest") a buffering driver is read
every ``rest_poll_period_s`` instead (the MPU-6050: 8 samples, 12.5 reads a second, no sample
lost); :meth:`I2cBusIO.hurry` (called when the rest ends) reads it at once and at the full rate
from then on. A gyro calibration runs here one read per pass (the IMU driver's
``gyro_calibration``, each read through ``Supervised.call``), interleaved with the bus's other
devices, never as one 2 s block.

The servo chip is asked every ``check_period_s`` of its driver whether it kept its setup
(drivers.base.ServoController.check_setup: the PCA9685's MODE1 read back every 0.5 s, one 1-byte
read): a chip power-cycled with no bus error (a servo-rail brown-out) is set up again by its
driver with its last commanded outputs, and the event is counted in its health and logged
(``servo: ok -> degraded: ... lost its setup ...``, then ``degraded -> ok`` at its next good call).
"""

from __future__ import annotations

import concurrent.futures
import math
import time
from typing import Callable

from agent.devices.health import LOST
from agent.devices.supervisor import DriverGuard, Supervised
from agent.devices.worker import DeviceWorker, Poll
from agent.errors import DriverError
from agent.model import ImuSample, PowerSample
from drivers.base import GyroCalibrationSteps, Imu, PowerMonitor, ServoController

#: Post key of a calibration request (servo channels are ints).
CALIBRATE = "calibrate"
#: Post key of :meth:`I2cBusIO.hurry`.
HURRY = "hurry"
#: Period of the servo chip's setup check while its driver is not open (then its reopen sets it up), s.
SERVO_CHECK_S = 1.0
#: The power monitor's reads and the servo check run along with the IMU's read (or a servo write)
#: when due within this share of their own period, at most :data:`ALONG_MAX_S`, instead of waking the
#: thread once more a few ms apart (agent/devices/worker.py ``Poll.early_s``; their grid and mean rate
#: stay: 2 reads a second at 2 Hz, two reads never more than a period and that much apart).
ALONG_SHARE = 0.2
#: Longest a power read or servo check comes early, s (more than the IMU's FIFO read period at rest).
ALONG_MAX_S = 0.1


def along_s(period_s: float) -> float:
    """How early a slow poll of ``period_s`` may run along with the bus's other work, s."""
    return min(ALONG_MAX_S, ALONG_SHARE * period_s)


class I2cBusIO:
    """The devices of one I2C bus on one thread; see the module docstring.

    Args:
        bus_name: the bus (thread ``i2c-<bus_name>``).
        imu, power, servo: the supervised devices on this bus, or None.
        imu_rate_hz, power_rate_hz: sensor reads per second.
        resting: whether no fresh sample is needed soon (the tank is at rest); read by the bus's
            thread after each sensor read. None: never.
        clock: monotonic clock of the reads' due times, s.
    """

    def __init__(self, bus_name: str, *, imu: Supervised[Imu] | None, imu_rate_hz: float,
                 power: Supervised[PowerMonitor] | None, power_rate_hz: float,
                 servo: Supervised[ServoController] | None, resting: Callable[[], bool] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.bus_name = bus_name
        self._resting = resting or (lambda: False)
        self._clock = clock
        self.imu, self.power, self.servo = imu, power, servo
        self._unwritten: dict[int, float | None] = {}     # servo channel -> pulse, not yet written
        self._written: dict[int, float | None] = {}
        self._requests: list[tuple[concurrent.futures.Future, int]] = []   # calibrations waiting
        self._running: tuple[concurrent.futures.Future, GyroCalibrationSteps] | None = None
        self._guard = DriverGuard("imu")
        self.latest_imu: ImuSample | None = None
        self.latest_power: PowerSample | None = None
        self.reads = 0
        polls = [Poll(self._reader(dev, attr, 1.0 / rate), 1.0 / rate, early_s=early) for dev, attr, rate, early in
                 ((imu, "latest_imu", imu_rate_hz, 0.0), (power, "latest_power", power_rate_hz,
                                                          along_s(1.0 / power_rate_hz))) if dev is not None]
        self._sensor_polls = polls
        self._slices = Poll(self._calibration_slice, math.inf, pause=True)
        self._slices.due = math.inf
        self._check = Poll(self._check_servo, SERVO_CHECK_S, early_s=along_s(SERVO_CHECK_S))
        checks = [self._check] if servo is not None else []
        self.worker = DeviceWorker(f"i2c-{bus_name}", [d for d in (imu, power, servo) if d is not None],
                                   serve=self._serve, polls=polls + [self._slices] + checks,
                                   on_reopen=self._reopened, clock=clock)

    def start(self) -> None:
        """Start the bus's thread (once)."""
        self.worker.start()

    def close(self) -> None:
        """Stop the bus's thread. Idempotent."""
        self.worker.close()

    def set_servo_pulses(self, pulses: dict[int, float | None]) -> None:
        """Servo outputs, channel -> pulse in microseconds (None = release); latest value wins."""
        for ch, us in pulses.items():
            self.worker.post(ch, us)

    def hurry(self) -> None:
        """The rest ended: read every sensor whose next read is further off than its configured rate's
        period at once, on the bus's thread (never blocks); its next period is the full rate's."""
        self.worker.post(HURRY, True)

    def calibrate_imu(self, samples: int) -> concurrent.futures.Future:
        """Gyro bias calibration over ``samples`` reads; the future gives the bias, rad/s, or the DriverError."""
        fut: concurrent.futures.Future = concurrent.futures.Future()
        self.worker.post((CALIBRATE, id(fut)), (fut, samples))
        return fut

    # ------------------------------------------------------------------ the thread
    def _serve(self) -> None:
        taken = self.worker.take()
        if taken is None:
            return
        posted, serial = taken
        for key, value in posted.items():
            if isinstance(key, int):
                self._unwritten[key] = value
            elif key == HURRY:
                now = self._clock()
                for poll in self._sensor_polls:
                    if poll.due is not None and poll.due > now + poll.period_s:
                        poll.due = now
            else:
                self._requests.append(value)
        self._write_servos()
        self._start_calibration()
        self.worker.finish(serial)

    def _reader(self, dev: Supervised, attr: str, period_s: float) -> Callable[[], float]:
        def read() -> float:
            self._write_servos()                    # a write that failed is retried at each pass
            sample = dev.call(lambda d: d.read())
            if sample is not None:
                setattr(self, attr, sample)
                self.reads += 1
            elif dev.state == LOST:
                setattr(self, attr, None)           # publish "unavailable", never a stale value
            # a driver that buffers samples (the MPU-6050's FIFO) is polled at its own, longer period,
            # longer still while the tank is at rest
            driver = dev.driver
            if driver is None:
                return period_s
            rest = driver.rest_poll_period_s if self._resting() else 0.0
            return max(period_s, driver.poll_period_s, rest)
        return read

    def _write_servos(self) -> None:
        if self.servo is None or not self._unwritten:
            return
        if self.servo.state == LOST:
            return                                  # kept: written once the chip is reopened
        for ch, us in list(self._unwritten.items()):
            if self._written.get(ch, -1.0) != us:
                ok = self.servo.call(
                    (lambda d: d.release(ch)) if us is None else (lambda d: d.set_pulse_us(ch, us)), default=False)
                if ok is False:
                    continue                        # kept: written at the next pass
                self._written[ch] = us
            del self._unwritten[ch]

    def _check_servo(self) -> float:
        """Whether the servo chip kept its setup (see the module docstring); its next check's period."""
        servo = self.servo          # set: the check is polled only with a servo chip
        assert servo is not None
        servo.call(lambda d: d.check_setup())
        driver = servo.driver
        period = SERVO_CHECK_S if driver is None else driver.check_period_s
        if period <= 0:
            return math.inf
        self._check.early_s = along_s(period)
        return period

    def _reopened(self, dev: Supervised) -> None:
        """The servo chip is back (maybe power-cycled, its outputs off): write every channel again."""
        if dev is self.servo:
            for ch, us in self._written.items():
                self._unwritten.setdefault(ch, us)
            self._written.clear()
            self._write_servos()

    def _start_calibration(self) -> None:
        """Begin the first waiting calibration unless one runs (one at a time); no I/O yet."""
        while self._requests and self._running is None:
            fut, samples = self._requests.pop(0)
            driver = self.imu.driver if self.imu is not None else None
            if driver is None:
                fut.set_exception(DriverError("IMU is not available", device="imu"))
                continue
            try:
                cal = self._guard.call(lambda: driver.gyro_calibration(samples), "gyro calibration")
                if cal is None:
                    raise DriverError(f"{type(driver).__name__} has no gyro calibration", device="imu")
            except DriverError as err:
                fut.set_exception(err)
                continue
            self._running = (fut, cal)
            self._slices.due = None                 # first read at once, then one per pass

    def _calibration_slice(self) -> float:
        """One read of the running calibration (through the IMU's supervisor: a bus error counts
        against its health); finish it after the last. Returns the wait until the next read."""
        if self._running is None:
            return math.inf
        fut, cal = self._running
        try:
            if self.imu is None or not self.imu.call(lambda d: (cal.step(), True)[1], default=False):
                last = self.imu.health().last_error if self.imu is not None else ""
                raise DriverError(last or "IMU is not available", device="imu")
            if not cal.done:
                return cal.period_s
            fut.set_result(self._guard.call(cal.finish, "gyro calibration"))
        except DriverError as err:
            fut.set_exception(err)
        self._running = None
        self._start_calibration()
        return 0.0 if self._running is not None else math.inf
