"""InvenSense MPU-6050 6-axis IMU over I2C (smbus2), with AHRS orientation.

Facts from hardware-reference §3 (RM-MPU-6000A-00 rev 4.2, PS-MPU-6000A-00
rev 3.4): WHO_AM_I (0x75) reads 0x68 whatever AD0 is; the chip powers up
asleep (PWR_MGMT_1 = 0x40) and its data registers read zero until SLEEP is
cleared; one 14-byte burst from ACCEL_XOUT_H (0x3B) gives accel X/Y/Z,
temperature, gyro X/Y/Z of one sample instant, each s16 big-endian.

Mounting assumption: the chip's X axis points forward, Y left, Z up (board
flat, components up, X arrow to the front), so chip axes are the body axes
(REP-103) and at rest on flat ground the accelerometer reads about
(0, 0, +9.81) m/s^2 (specific force: gravity seen as an upward push). Mount
it that way or remap the axes in a wrapper.

Samples come through the chip's FIFO (RM §4.6-4.7): at open the FIFO takes
accel, temperature and gyro (14 bytes per sample, the burst's layout) at the
sample rate; a read takes the FIFO count and then every waiting sample in one
combined transaction, runs each through the filter at the chip's sample period
and returns the newest. So the bus worker polls every :attr:`Mpu6050.poll_period_s`
(:data:`FIFO_BATCH` samples, 40 ms at 100 Hz) with no sample lost, instead of
waking at the sample rate; a reader that needs no fresh sample soon may wait
:attr:`Mpu6050.rest_poll_period_s` (:data:`FIFO_REST_BATCH` samples, 80 ms at 100 Hz, half
the stall limit below). An empty FIFO (polled early), an overflow or a stall
of more than :data:`FIFO_MAX_BATCH` samples (the FIFO is then reset) falls back
to one burst of the data registers.

Orientation comes from Madgwick's IMU filter (drivers/madgwick.py: the
``ahrs`` library's update in plain floats; the first sample from its ``acc2q``, also in plain floats;
no magnetometer: yaw is integrated gyro, relative to the heading at
``open()``); its quaternion is w, x, y, z body->world and is reported as
x, y, z, w.
"""

from __future__ import annotations

import logging
import math
import struct
import time
from typing import Callable, TYPE_CHECKING

import statistics

from drivers.types import ImuSample, Quat, Vec3
from drivers.base import GyroCalibrationSteps, Imu
from drivers.i2c import I2cDevice, SMBusLike
from drivers.madgwick import acc2q, update_imu

if TYPE_CHECKING:
    from drivers.config import Mpu6050Config

log = logging.getLogger(__name__)

GRAVITY_MPS2 = 9.80665

REG_SMPLRT_DIV = 0x19
REG_CONFIG = 0x1A
REG_GYRO_CONFIG = 0x1B
REG_ACCEL_CONFIG = 0x1C
REG_FIFO_EN = 0x23
REG_INT_STATUS = 0x3A
REG_ACCEL_XOUT_H = 0x3B
REG_USER_CTRL = 0x6A
REG_PWR_MGMT_1 = 0x6B
REG_FIFO_COUNTH = 0x72
REG_FIFO_R_W = 0x74
REG_WHO_AM_I = 0x75

WHO_AM_I_VALUE = 0x68
#: PWR_MGMT_1: SLEEP cleared, CLKSEL = 1 (PLL with gyro X reference), §3.3.
PWR_WAKE_PLL_XGYRO = 0x01
#: Bytes in the accel/temp/gyro burst from 0x3B.
BURST_LEN = 14
#: Accel LSB per g by range (AFS_SEL 0..3), §3.5.
ACCEL_LSB_PER_G = {2: 16384.0, 4: 8192.0, 8: 4096.0, 16: 2048.0}
#: Gyro LSB per deg/s by range (FS_SEL 0..3), §3.5.
GYRO_LSB_PER_DPS = {250: 131.0, 500: 65.5, 1000: 32.8, 2000: 16.4}
#: FIFO_EN: temperature, gyro X/Y/Z and accel: 14-byte FIFO samples laid out as the burst from 0x3B.
FIFO_EN_ALL = 0xF8
#: USER_CTRL bits: FIFO enable, FIFO reset (self-clearing).
USER_FIFO_EN = 0x40
USER_FIFO_RESET = 0x04
#: INT_STATUS bit: the FIFO overflowed.
INT_FIFO_OFLOW = 0x10
#: FIFO size, bytes.
FIFO_SIZE = 1024
#: Samples the FIFO gathers between two reads (poll_period_s = FIFO_BATCH sample periods).
FIFO_BATCH = 4
#: More samples than this waiting (the reader stalled) are dropped: FIFO reset, the registers read instead.
FIFO_MAX_BATCH = 16
#: Samples a reader that needs no fresh sample soon lets the FIFO gather (rest_poll_period_s): half of
#: FIFO_MAX_BATCH, so a reader late by as much again loses nothing.
FIFO_REST_BATCH = 8
#: Gyro start-up time after wake, s (PS §6.1: 30 ms typical).
GYRO_STARTUP_S = 0.03
#: Gyro zero-rate offset tolerance, rad/s (PS §6.1: +-20 deg/s); a larger "bias" means the robot moved.
MAX_BIAS_RADPS = math.radians(20.0)
#: Largest per-axis gyro standard deviation accepted as "at rest" during calibration, rad/s.
REST_STD_RADPS = 0.03
#: A gap between samples longer than this skips the filter's gyro integration, s.
MAX_FILTER_DT_S = 0.5


def temperature_c(raw: int) -> float:
    """Die temperature from TEMP_OUT (signed): raw / 340 + 36.53 degC (§3.5)."""
    return raw / 340.0 + 36.53


def sample_rate_hz(cfg: Mpu6050Config) -> float:
    """Output sample rate: gyro output rate (8 kHz at DLPF_CFG 0/7, else 1 kHz) / (1 + SMPLRT_DIV), Hz."""
    base = 8000.0 if cfg.dlpf_cfg in (0, 7) else 1000.0
    return base / (1 + cfg.sample_rate_div)


class Mpu6050(Imu):
    """MPU-6050 driver: SI samples in the body frame, gyro bias removed, Madgwick orientation.

    Args:
        cfg: ranges, DLPF, sample-rate divider, address (drivers.config.Mpu6050Config).
        bus: smbus2.SMBus-like object (shared; not closed by this driver).
        name: config name for errors and health.
        clock: monotonic clock, s; stamps samples and times the filter.
        sleep: sleep function, s (gyro start-up wait, calibration pacing).
    """

    def __init__(self, cfg: Mpu6050Config, bus: SMBusLike, *, name: str = "imu",
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.cfg = cfg
        self.name = name
        self._dev = I2cDevice(bus, cfg.address, device=name, chip="MPU-6050")
        self._clock = clock
        self._sleep = sleep
        self._accel_scale = GRAVITY_MPS2 / ACCEL_LSB_PER_G[cfg.accel_range_g]
        self._gyro_scale = math.radians(1.0) / GYRO_LSB_PER_DPS[cfg.gyro_range_dps]
        self._config_bytes = bytes([
            cfg.sample_rate_div,
            cfg.dlpf_cfg,
            sorted(GYRO_LSB_PER_DPS).index(cfg.gyro_range_dps) << 3,
            sorted(ACCEL_LSB_PER_G).index(cfg.accel_range_g) << 3,
        ])
        self.gyro_bias_radps: Vec3 = (0.0, 0.0, 0.0)
        self._q: tuple[float, float, float, float] | None = None     # w, x, y, z
        self._t_last: float | None = None
        self._period_s = 1.0 / sample_rate_hz(cfg)
        #: How often a reader should call :meth:`read`: FIFO_BATCH sample periods, s.
        self.poll_period_s = FIFO_BATCH * self._period_s
        #: Longest wait between two reads with no sample lost: FIFO_REST_BATCH sample periods, s.
        self.rest_poll_period_s = FIFO_REST_BATCH * self._period_s
        #: FIFO resets after an overflow or a stall.
        self.fifo_resets = 0

    # ------------------------------------------------------------------ lifecycle
    def open(self) -> None:
        """Check WHO_AM_I, wake with the gyro-X PLL, write SMPLRT_DIV/CONFIG/GYRO_CONFIG/ACCEL_CONFIG.

        The four config registers are read back to confirm the writes landed.
        Orientation restarts from the accelerometer tilt at the next read.

        Raises:
            DriverError: bus error (errno kept), wrong WHO_AM_I, config read-back mismatch.
            DeviceClosed: after close().
        """
        who = self._dev.read_u8(REG_WHO_AM_I)
        if who != WHO_AM_I_VALUE:
            raise self._dev.error(f"WHO_AM_I is 0x{who:02x}, expected 0x{WHO_AM_I_VALUE:02x} "
                                  "(0x70/0x71 would be an MPU-6500/9250: not supported)")
        self._configure()
        self._sleep(GYRO_STARTUP_S)
        self._enable_fifo()
        self._q = None
        self._t_last = None
        self._dev.ready = True
        log.info("%r open: +-%d g, +-%d dps, DLPF %d, %.1f Hz", self._dev, self.cfg.accel_range_g,
                 self.cfg.gyro_range_dps, self.cfg.dlpf_cfg, sample_rate_hz(self.cfg))

    def _configure(self) -> None:
        self._dev.write_u8(REG_PWR_MGMT_1, PWR_WAKE_PLL_XGYRO)
        self._dev.write_block(REG_SMPLRT_DIV, self._config_bytes)
        back = self._dev.read_block(REG_SMPLRT_DIV, len(self._config_bytes))
        if back != self._config_bytes:
            raise self._dev.error(f"config read-back {back.hex()} != written {self._config_bytes.hex()}")

    def _enable_fifo(self) -> None:
        self._dev.write_u8(REG_FIFO_EN, FIFO_EN_ALL)
        self._dev.write_u8(REG_USER_CTRL, USER_FIFO_EN | USER_FIFO_RESET)

    def close(self) -> None:
        """Mark the driver closed (the chip keeps running; the bus stays open). Idempotent."""
        self._dev.close()

    # ------------------------------------------------------------------ samples
    def _read_raw(self) -> tuple[float, Vec3, float, Vec3]:
        """One burst: (t, accel m/s^2, temperature degC, gyro rad/s without bias removal)."""
        self._dev.require_ready()
        data = self._dev.read_block(REG_ACCEL_XOUT_H, BURST_LEN)
        t = self._clock()
        if not any(data):
            # All-zero burst: the chip is asleep again (power-on reset). Wake it; drop this sample.
            self._configure()
            self._enable_fifo()
            raise self._dev.error("burst read all zeros: chip was reset and asleep; re-initialised, sample dropped")
        return (t, *self._scale(data))

    def _scale(self, data: bytes) -> tuple[Vec3, float, Vec3]:
        """14 burst bytes -> (accel m/s^2, temperature degC, gyro rad/s without bias removal)."""
        ax, ay, az, temp, gx, gy, gz = struct.unpack(">7h", data)
        s_a, s_g = self._accel_scale, self._gyro_scale
        return (ax * s_a, ay * s_a, az * s_a), temperature_c(temp), (gx * s_g, gy * s_g, gz * s_g)

    def _read_fifo(self) -> list[bytes]:
        """The samples waiting in the FIFO, oldest first (14 bytes each); [] when there is none, or
        after an overflow or a stall (the FIFO is reset then)."""
        self._dev.require_ready()
        count = self._dev.read_u16_be(REG_FIFO_COUNTH)
        waiting = count // BURST_LEN
        if count % BURST_LEN or waiting > FIFO_MAX_BATCH:
            log.debug("%r: FIFO holds %d bytes (overflow or stall): reset", self._dev, count)
            self._dev.write_u8(REG_USER_CTRL, USER_FIFO_EN | USER_FIFO_RESET)
            self.fifo_resets += 1
            return []
        if not waiting:
            return []
        data = self._dev.read_stream(REG_FIFO_R_W, waiting * BURST_LEN)
        return [data[i:i + BURST_LEN] for i in range(0, len(data), BURST_LEN)]

    def read(self) -> ImuSample:
        """The newest sample: accel m/s^2 (with gravity), gyro rad/s (bias removed), orientation xyzw, degC.

        Every sample waiting in the FIFO goes through the orientation filter at the sample period;
        with none waiting, the data registers are read.

        Raises:
            DriverError: bus error (errno kept), or the chip was found reset (re-initialised; sample dropped).
            DeviceClosed: after close().
        """
        batch = self._read_fifo()
        if not batch:
            t, accel, temp, gyro_raw = self._read_raw()
            gyro, q = self._filter(t, accel, gyro_raw, None)
        else:
            t = self._clock()
            for data in batch:
                accel, temp, gyro_raw = self._scale(data)
                gyro, q = self._filter(t, accel, gyro_raw, self._period_s)
        return ImuSample(t_mono_s=t, accel_mps2=accel, gyro_radps=gyro, orientation_xyzw=q, temperature_c=temp)

    def _filter(self, t: float, accel: Vec3, gyro_raw: Vec3, dt: float | None) -> tuple[Vec3, Quat]:
        """Remove the gyro bias and step the orientation by ``dt`` (None: the time since the last
        sample); (gyro rad/s, orientation xyzw)."""
        b = self.gyro_bias_radps
        gyro = (gyro_raw[0] - b[0], gyro_raw[1] - b[1], gyro_raw[2] - b[2])
        if self._q is None:
            self._q = acc2q(accel)
        else:
            if dt is None:
                dt = t - (self._t_last if self._t_last is not None else t)
            if 0.0 < dt <= MAX_FILTER_DT_S:
                self._q = update_imu(self._q, gyro, accel, dt)
        self._t_last = t
        w, x, y, z = self._q
        return gyro, (x, y, z, w)

    def calibrate_gyro(self, samples: int = 200) -> Vec3:
        """Average ``samples`` gyro reads at rest; later samples subtract this bias.

        Reads are paced at the chip's sample rate. The bias is kept only if the
        robot was still: per-axis standard deviation <= REST_STD_RADPS and
        |bias| <= MAX_BIAS_RADPS (the datasheet's zero-rate tolerance);
        otherwise the previous bias stays.

        Args:
            samples: number of reads, 10..10000.

        Returns:
            The new bias (x, y, z), rad/s.

        Raises:
            DriverError: bad ``samples``, bus error, or the robot was moving.
        """
        cal = self.gyro_calibration(samples)
        while not cal.done:
            cal.step()
            self._sleep(cal.period_s)
        return cal.finish()

    def gyro_calibration(self, samples: int = 200) -> "GyroCalibration":
        """The same calibration one read at a time (a bus worker interleaves it with other devices).

        Raises:
            DriverError: bad ``samples``.
        """
        return GyroCalibration(self, samples)


class GyroCalibration(GyroCalibrationSteps):
    """Gyro bias at rest from ``samples`` reads, taken one :meth:`step` at a time; see ``calibrate_gyro``.

    Attributes:
        period_s: the chip's sample period: the pause to keep between steps, s.
    """

    def __init__(self, imu: Mpu6050, samples: int) -> None:
        if isinstance(samples, bool) or not isinstance(samples, int) or not 10 <= samples <= 10_000:
            log.error("%r: calibrate_gyro(samples=%r): samples must be an integer 10..10000", imu._dev, samples)
            raise imu._dev.error(f"calibrate_gyro: samples must be an integer 10..10000, got {samples!r}")
        self._imu = imu
        self._samples = samples
        self._rates: list[Vec3] = []
        self.period_s = 1.0 / sample_rate_hz(imu.cfg)

    @property
    def done(self) -> bool:
        """True once every sample was read."""
        return len(self._rates) >= self._samples

    def step(self) -> None:
        """Read one gyro sample. Raises DriverError (bus error)."""
        self._rates.append(self._imu._read_raw()[3])

    def finish(self) -> Vec3:
        """Check the robot was still and keep the new bias; returns it, rad/s. Raises DriverError."""
        imu, samples = self._imu, len(self._rates)
        axes = list(zip(*self._rates, strict=True))
        bias = [statistics.fmean(a) for a in axes]
        std = [statistics.pstdev(a) for a in axes]
        if max(std) > REST_STD_RADPS or max(abs(b) for b in bias) > MAX_BIAS_RADPS:
            log.error("%r: gyro calibration refused, robot not at rest: mean %s rad/s, std %s rad/s",
                      imu._dev, [round(b, 4) for b in bias], [round(s, 4) for s in std])
            raise imu._dev.error(f"gyro calibration refused: not at rest (std {max(std):.4f} rad/s, "
                                 f"mean {max(abs(b) for b in bias):.4f} rad/s); bias unchanged")
        imu.gyro_bias_radps = (float(bias[0]), float(bias[1]), float(bias[2]))
        log.info("%r: gyro bias %.5f %.5f %.5f rad/s from %d samples", imu._dev, *imu.gyro_bias_radps, samples)
        return imu.gyro_bias_radps

