"""TI INA219 and INA226 current/power monitors over I2C (smbus2).

Facts from hardware-reference §5 (INA219 SBOS448, INA226 SBOS547): 16-bit
big-endian registers (read through SMBus words, bytes swapped); Calibration
scales the Current register; Current and Power read 0 until it is written.

===============  ==============================  ==============================
                 INA219                          INA226
===============  ==============================  ==============================
identity         Config POR 0x399F after RST     0xFE = 0x5449, 0xFF = 0x2260
Cal              trunc(0.04096 / (LSB * R))      trunc(0.00512 / (LSB * R))
current raw      shunt * Cal / 4096              shunt * Cal / 2048
bus voltage      (reg >> 3) * 4 mV               reg * 1.25 mV
power LSB        20 * Current_LSB                25 * Current_LSB
shunt range      +-40/80/160/320 mV (PGA)        +-81.92 mV
flags            Bus reg bit 1 CNVR, bit 0 OVF   Mask/Enable bit 3 CVRF, bit 2 OVF
===============  ==============================  ==============================

Current_LSB is the smallest 1-2-5 value at or above ``max_current_a / 2^15``
whose Cal fits the register (the datasheet allows anything up to
``max / 2^12``; a round number keeps readings readable). Averaging is the
most that fits in 80 % of the read period (``1 / rate_hz``).

Sign: current is + when the battery discharges, i.e. the shunt's IN+ is on
the battery side (high-side). Power carries the same sign.

OVF (the chip's current/power arithmetic overflowed: the readings are
meaningless) raises :class:`DriverError` with the flag register as ``status``;
the sample is not returned. CNVR/CVRF clear means no conversion finished
since the last read: the sample repeats the previous values; it is still
returned and counted in :attr:`repeated_reads`.

Every read first reads back Configuration and Calibration: a chip reset by a
power glitch (both back to their power-on values) is found on the very next
read, reconfigured, and that read raises DriverError (its current would have
read 0), so health shows the glitch. The INA219's Calibration bit 0 is
read-only 0 (SBOS448, Calibration Register): the value written has it
cleared, so the read-back matches for every shunt (0.03 and 0.015 ohm give odd
Cal values).

A bus voltage of 0 V (sense lead off, or the battery side unpowered) is no
battery reading: the sample carries ``voltage_v`` None and no percent.
"""

from __future__ import annotations

import logging
import math
import time
from abc import abstractmethod
from typing import Callable, TYPE_CHECKING

from drivers.types import PowerSample
from drivers.base import PowerMonitor
from drivers.battery import percent
from drivers.i2c import I2cDevice, SMBusLike, to_s16

if TYPE_CHECKING:
    from drivers.config import Ina219Config, Ina226Config

log = logging.getLogger(__name__)

REG_CONFIG = 0x00
REG_SHUNT = 0x01
REG_BUS = 0x02
REG_POWER = 0x03
REG_CURRENT = 0x04
REG_CAL = 0x05
REG_MASK_ENABLE = 0x06
REG_MANUFACTURER_ID = 0xFE
REG_DIE_ID = 0xFF

CONFIG_RESET = 0x8000
MODE_SHUNT_BUS_CONTINUOUS = 0x7

INA219_CONFIG_POR = 0x399F
INA219_CNVR = 0x0002
INA219_OVF = 0x0001
#: PGA full scale per PG code, V (§5.3).
INA219_PGA_V = (0.04, 0.08, 0.16, 0.32)
INA219_SHUNT_LSB_V = 10e-6
INA219_BUS_LSB_V = 0.004
#: ADC code -> conversion time, s (§5.3): 9..12-bit single samples, then 2..128 averaged 12-bit samples.
INA219_ADC_TIME_S = {0x0: 84e-6, 0x1: 148e-6, 0x2: 276e-6, 0x3: 532e-6,
                     **{code: 532e-6 * (1 << (code - 8)) for code in range(0x8, 0x10)}}

INA226_CONFIG_POR = 0x4127
INA226_MANUFACTURER_ID = 0x5449
INA226_DIE_ID = 0x2260
INA226_CVRF = 0x0008
INA226_OVF = 0x0004
INA226_SHUNT_FS_V = 0.08192
INA226_SHUNT_LSB_V = 2.5e-6
INA226_BUS_LSB_V = 0.00125
#: AVG code -> samples averaged (§5.5).
INA226_AVG = (1, 4, 16, 64, 128, 256, 512, 1024)
#: VBUSCT / VSHCT code 4: 1.1 ms (the POR default; the other codes are unconfirmed, reference ⚠).
INA226_CT_CODE = 4
INA226_CT_S = 1.1e-3
#: Config bits 14:12 read 0b100 on the INA226 (POR 0x4127).
INA226_CONFIG_FIXED = 0x4000

#: Share of the read period the averaged conversion may take.
CONVERSION_SHARE = 0.8
#: open() waits this many conversion cycles (the datasheet times are typical, not maximum).
CONVERSION_MARGIN = 1.25


def current_lsb_a(max_current_a: float, shunt_ohm: float, cal_numerator: float, cal_max: int) -> float:
    """Current_LSB, A: the smallest 1-2-5 value >= max/2^15 whose Cal = trunc(num/(LSB*R)) <= cal_max.

    Args:
        max_current_a: largest current to measure, A.
        shunt_ohm: shunt resistance, ohm.
        cal_numerator: 0.04096 (INA219) or 0.00512 (INA226).
        cal_max: largest Calibration register value.
    """
    target = max_current_a / 32768.0
    exponent = math.floor(math.log10(target))
    while True:
        for mantissa in (1, 2, 5):
            lsb = float(f"{mantissa}e{exponent}")
            if lsb >= target * (1 - 1e-12) and calibration(cal_numerator, lsb, shunt_ohm) <= cal_max:
                return lsb
        exponent += 1


def calibration(cal_numerator: float, current_lsb: float, shunt_ohm: float) -> int:
    """Cal = trunc(cal_numerator / (Current_LSB * R_shunt)) (§5.4, §5.5), guarded against float fuzz."""
    return int(math.floor(cal_numerator / (current_lsb * shunt_ohm) + 1e-9))


class _Ina2xx(PowerMonitor):
    """Shared read path of the INA219 / INA226 drivers (see the module docstring).

    Args:
        cfg: shunt, max current, battery, rate (drivers.config.Ina219Config / Ina226Config).
        bus: smbus2.SMBus-like object (shared; not closed by this driver).
        name: config name for errors and health.
        clock: monotonic clock, s.
        sleep: sleep function, s (first conversion wait in open()).
    """

    CHIP = ""
    CAL_NUMERATOR = 0.0
    CAL_MAX = 0
    CAL_MASK = 0xFFFF
    POWER_LSB_FACTOR = 0.0

    def __init__(self, cfg: Ina219Config | Ina226Config, bus: SMBusLike, *, name: str = "power",
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.cfg = cfg
        self.name = name
        self._dev = I2cDevice(bus, cfg.address, device=name, chip=self.CHIP)
        self._clock = clock
        self._sleep = sleep
        self.current_lsb_a = current_lsb_a(cfg.max_current_a, cfg.shunt_ohm, self.CAL_NUMERATOR, self.CAL_MAX)
        self.cal = calibration(self.CAL_NUMERATOR, self.current_lsb_a, cfg.shunt_ohm) & self.CAL_MASK
        self.power_lsb_w = self.POWER_LSB_FACTOR * self.current_lsb_a
        self.config_word, self.conversion_s = self._config_word()
        self.repeated_reads = 0

    # ------------------------------------------------------------------ chip specifics
    @abstractmethod
    def _config_word(self) -> tuple[int, float]:
        """Configuration register value (range, averaging, continuous mode) and its conversion cycle, s."""

    @abstractmethod
    def _identify(self) -> None:
        """Raise DriverError unless the chip at the address is this kind."""

    @abstractmethod
    def _status(self) -> tuple[int, bool, bool, float]:
        """(flag register, conversion ready, overflow, bus voltage V)."""

    def _check_shunt_range(self, full_scale_v: float) -> float:
        """Shunt voltage at max_current_a, V; logs a warning when it exceeds the chip's range."""
        shunt_v = self.cfg.max_current_a * self.cfg.shunt_ohm
        if shunt_v > full_scale_v * (1 + 1e-9):
            log.warning("%s: max_current_a * shunt_ohm = %.4f V exceeds the +-%.4f V shunt range of the %s; "
                        "currents above %.2f A clip", self.name, shunt_v, full_scale_v, self.CHIP,
                        full_scale_v / self.cfg.shunt_ohm)
        return shunt_v

    # ------------------------------------------------------------------ lifecycle
    def open(self) -> None:
        """Identify the chip, write Calibration and Configuration, read both back, wait one conversion.

        Raises:
            DriverError: bus error (errno kept), wrong chip identity, read-back mismatch.
            DeviceClosed: after close().
        """
        self._identify()
        self._configure()
        self._sleep(self.conversion_s * CONVERSION_MARGIN)
        self._dev.ready = True
        log.info("%r open: Current_LSB %g A, Cal %d, config 0x%04x", self._dev, self.current_lsb_a,
                 self.cal, self.config_word)

    def _configure(self) -> None:
        self._dev.write_u16_be(REG_CAL, self.cal)
        self._dev.write_u16_be(REG_CONFIG, self.config_word)
        cal, config = self._dev.read_u16_be(REG_CAL), self._dev.read_u16_be(REG_CONFIG)
        if (cal, config) != (self.cal, self.config_word):
            raise self._dev.error(f"read-back Cal 0x{cal:04x} config 0x{config:04x}, "
                                  f"wrote 0x{self.cal:04x} 0x{self.config_word:04x}")

    def close(self) -> None:
        """Mark the driver closed (the chip keeps converting; the bus stays open). Idempotent."""
        self._dev.close()

    def read(self) -> PowerSample:
        """Bus voltage V (None at 0 V), current A (+ discharging), power W, battery percent.

        Raises:
            DriverError: bus error (errno kept); OVF (``status`` = flag register);
                chip found reset (Configuration or Calibration not as written: reconfigured, sample dropped).
            DeviceClosed: after close().
        """
        self._dev.require_ready()
        t = self._clock()
        config, cal = self._dev.read_u16_be(REG_CONFIG), self._dev.read_u16_be(REG_CAL)
        if (config, cal) != (self.config_word, self.cal):
            self._configure()
            raise self._dev.error(f"chip reset (config 0x{config:04x}, Cal 0x{cal:04x}); reconfigured, "
                                  "sample dropped")
        flags, ready, overflow, voltage = self._status()
        if overflow:
            raise self._dev.error(f"math overflow (OVF, flags 0x{flags:04x}): current/power out of range; "
                                  "check shunt_ohm and max_current_a", status=flags)
        if not ready:
            self.repeated_reads += 1
        current = to_s16(self._dev.read_u16_be(REG_CURRENT)) * self.current_lsb_a
        power = self._dev.read_u16_be(REG_POWER) * self.power_lsb_w
        battery = self.cfg.battery
        if voltage <= 0.0:  # no battery on the bus side: not a reading of 0 V
            return PowerSample(t_mono_s=t, voltage_v=None, current_a=current,
                               power_w=math.copysign(power, current), percent=None)
        return PowerSample(t_mono_s=t, voltage_v=voltage, current_a=current,
                           power_w=math.copysign(power, current),
                           percent=percent(voltage, battery.chemistry, battery.cells))


class Ina219(_Ina2xx):
    """TI INA219 (hardware-reference §5.1-§5.4); arguments as :class:`_Ina2xx`."""

    CHIP = "INA219"
    CAL_NUMERATOR = 0.04096
    CAL_MAX = 0xFFFE
    CAL_MASK = 0xFFFE          # Calibration bit 0 is read-only 0 (SBOS448)
    POWER_LSB_FACTOR = 20.0

    def _config_word(self) -> tuple[int, float]:
        shunt_v = self._check_shunt_range(INA219_PGA_V[-1])
        pg = next((i for i, fs in enumerate(INA219_PGA_V) if shunt_v <= fs * (1 + 1e-9)), len(INA219_PGA_V) - 1)
        budget = CONVERSION_SHARE / self.cfg.rate_hz
        adc = next((c for c in range(0xF, 0x8, -1) if 2 * INA219_ADC_TIME_S[c] <= budget), 0x3)
        word = (1 << 13) | (pg << 11) | (adc << 7) | (adc << 3) | MODE_SHUNT_BUS_CONTINUOUS
        return word, 2 * INA219_ADC_TIME_S[adc]

    def _identify(self) -> None:
        self._dev.write_u16_be(REG_CONFIG, CONFIG_RESET)
        config = self._dev.read_u16_be(REG_CONFIG)
        if config != INA219_CONFIG_POR:
            raise self._dev.error(f"config after reset is 0x{config:04x}, expected 0x{INA219_CONFIG_POR:04x} "
                                  "(0x4127 would be an INA226)")

    def _status(self) -> tuple[int, bool, bool, float]:
        bus = self._dev.read_u16_be(REG_BUS)
        return bus, bool(bus & INA219_CNVR), bool(bus & INA219_OVF), (bus >> 3) * INA219_BUS_LSB_V


class Ina226(_Ina2xx):
    """TI INA226 (hardware-reference §5.5); arguments as :class:`_Ina2xx`."""

    CHIP = "INA226"
    CAL_NUMERATOR = 0.00512
    CAL_MAX = 0x7FFF
    CAL_MASK = 0x7FFF          # bit 15 of the Calibration register is reserved
    POWER_LSB_FACTOR = 25.0

    def _config_word(self) -> tuple[int, float]:
        self._check_shunt_range(INA226_SHUNT_FS_V)
        budget = CONVERSION_SHARE / self.cfg.rate_hz
        avg = max(i for i, n in enumerate(INA226_AVG) if i == 0 or n * 2 * INA226_CT_S <= budget)
        word = (INA226_CONFIG_FIXED | (avg << 9) | (INA226_CT_CODE << 6) | (INA226_CT_CODE << 3)
                | MODE_SHUNT_BUS_CONTINUOUS)
        return word, INA226_AVG[avg] * 2 * INA226_CT_S

    def _identify(self) -> None:
        ids = self._dev.read_u16_be(REG_MANUFACTURER_ID), self._dev.read_u16_be(REG_DIE_ID)
        if ids != (INA226_MANUFACTURER_ID, INA226_DIE_ID):
            raise self._dev.error(f"IDs 0x{ids[0]:04x}/0x{ids[1]:04x}, expected "
                                  f"0x{INA226_MANUFACTURER_ID:04x}/0x{INA226_DIE_ID:04x}")

    def _status(self) -> tuple[int, bool, bool, float]:
        mask = self._dev.read_u16_be(REG_MASK_ENABLE)
        bus_v = self._dev.read_u16_be(REG_BUS) * INA226_BUS_LSB_V
        return mask, bool(mask & INA226_CVRF), bool(mask & INA226_OVF), bus_v
