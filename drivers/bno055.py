"""Bosch BNO055 9-axis IMU with on-chip fusion (NDOF), over I2C (smbus2).

Facts from the Bosch BNO055 datasheet (BST-BNO055-DS000-14 rev 1.4): CHIP_ID
(0x00) = 0xA0; registers are paged (PAGE_ID 0x07, data on page 0); most
configuration registers are writable only in CONFIGMODE; switching
CONFIGMODE -> any mode takes 7 ms, any mode -> CONFIGMODE 19 ms (Table 3-6);
data registers are little-endian.

Units chosen in UNIT_SEL (0x3B) = 0x06: accel m/s^2 (100 LSB per m/s^2),
gyro rad/s (900 LSB per rad/s), Euler rad, temperature degC, Windows
orientation (only affects the Euler pitch sign, unused here). Quaternion
(0x20..0x27, w x y z): 1.0 = 16384 LSB, reported as x, y, z, w.

One 32-byte block read from 0x08 to 0x27 (accel, mag, gyro, Euler,
quaternion) gives a consistent sample in one transaction; the temperature
(0x34, s8, 1 degC/LSB) is read at most once per second.

Mounting assumption: the chip's reported axes are the body axes (x forward,
y left, z up) with AXIS_MAP_CONFIG / AXIS_MAP_SIGN at their power-on values;
mount it that way. The fused heading is absolute (magnetometer), so yaw is
relative to magnetic north, not to the heading at start. Gyro bias is
compensated on the chip; :meth:`calibrate_gyro` is not offered. On a Pi,
mind the BNO055's clock stretching (datasheet section 4.6 "I2C Protocol"; the
Raspberry Pi 1-4 I2C controller mishandles it): slow the bus or use the
``i2c-gpio`` overlay, docs/hardware.md "BNO055 instead of the MPU-6050".
"""

from __future__ import annotations

import logging
import struct
import time
from typing import Callable, TYPE_CHECKING

from drivers.types import ImuSample
from drivers.base import Imu
from drivers.i2c import I2cDevice, SMBusLike

if TYPE_CHECKING:
    from drivers.config import Bno055Config

log = logging.getLogger(__name__)

REG_CHIP_ID = 0x00
REG_PAGE_ID = 0x07
REG_ACC_DATA = 0x08
REG_QUA_DATA = 0x20
REG_TEMP = 0x34
REG_UNIT_SEL = 0x3B
REG_OPR_MODE = 0x3D
REG_PWR_MODE = 0x3E

CHIP_ID_VALUE = 0xA0
MODE_CONFIG = 0x00
MODE_NDOF = 0x0C
PWR_NORMAL = 0x00
#: UNIT_SEL: bit 0 accel m/s^2 (0), bit 1 gyro rad/s (1), bit 2 Euler rad (1), bit 4 degC (0), bit 7 Windows (0).
UNIT_SEL_VALUE = 0x06
#: Mode switch times, s (Table 3-6).
CONFIG_TO_ANY_S = 0.007
ANY_TO_CONFIG_S = 0.019

ACCEL_LSB_PER_MPS2 = 100.0
GYRO_LSB_PER_RADPS = 900.0
QUAT_LSB = 16384.0
#: Bytes from ACC_DATA_X_LSB (0x08) to QUA_DATA_Z_MSB (0x27): 16 s16 LE words.
BLOCK_LEN = 0x28 - REG_ACC_DATA
TEMP_PERIOD_S = 1.0


class Bno055(Imu):
    """BNO055 in NDOF fusion mode: accel m/s^2, gyro rad/s, fused orientation xyzw, degC.

    Args:
        cfg: address (drivers.config.Bno055Config).
        bus: smbus2.SMBus-like object (shared; not closed by this driver).
        name: config name for errors and health.
        clock: monotonic clock, s.
        sleep: sleep function, s (mode-switch waits).
    """

    def __init__(self, cfg: Bno055Config, bus: SMBusLike, *, name: str = "imu",
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.cfg = cfg
        self.name = name
        self._dev = I2cDevice(bus, cfg.address, device=name, chip="BNO055")
        self._clock = clock
        self._sleep = sleep
        self._temp_c: float | None = None
        self._temp_t = -float("inf")

    def open(self) -> None:
        """Check CHIP_ID, CONFIGMODE (19 ms), page 0, normal power, UNIT_SEL, NDOF (7 ms).

        UNIT_SEL and OPR_MODE are read back to confirm the writes landed.

        Raises:
            DriverError: bus error (errno kept), wrong CHIP_ID, read-back mismatch.
            DeviceClosed: after close().
        """
        self._configure()
        self._temp_t = -float("inf")
        self._dev.ready = True
        log.info("%r open: NDOF fusion", self._dev)

    def _configure(self) -> None:
        self._dev.write_u8(REG_PAGE_ID, 0)
        chip_id = self._dev.read_u8(REG_CHIP_ID)
        if chip_id != CHIP_ID_VALUE:
            raise self._dev.error(f"CHIP_ID is 0x{chip_id:02x}, expected 0x{CHIP_ID_VALUE:02x}")
        self._dev.write_u8(REG_OPR_MODE, MODE_CONFIG)
        self._sleep(ANY_TO_CONFIG_S)
        self._dev.write_u8(REG_PWR_MODE, PWR_NORMAL)
        self._dev.write_u8(REG_UNIT_SEL, UNIT_SEL_VALUE)
        unit_sel = self._dev.read_u8(REG_UNIT_SEL)
        if unit_sel != UNIT_SEL_VALUE:
            raise self._dev.error(f"UNIT_SEL read-back 0x{unit_sel:02x} != 0x{UNIT_SEL_VALUE:02x}")
        self._dev.write_u8(REG_OPR_MODE, MODE_NDOF)
        self._sleep(CONFIG_TO_ANY_S)
        mode = self._dev.read_u8(REG_OPR_MODE) & 0x0F
        if mode != MODE_NDOF:
            raise self._dev.error(f"OPR_MODE read-back 0x{mode:02x} != NDOF 0x{MODE_NDOF:02x}")

    def close(self) -> None:
        """Mark the driver closed (the chip keeps fusing; the bus stays open). Idempotent."""
        self._dev.close()

    def read(self) -> ImuSample:
        """One fused sample. Orientation is None while the chip reports an all-zero quaternion.

        Raises:
            DriverError: bus error (errno kept), or the chip was found back in CONFIGMODE
                (all data zero: reset); it is re-initialised and this sample dropped.
            DeviceClosed: after close().
        """
        self._dev.require_ready()
        data = self._dev.read_block(REG_ACC_DATA, BLOCK_LEN)
        t = self._clock()
        if not any(data):
            self._configure()
            raise self._dev.error("data all zeros: chip was reset to CONFIGMODE; re-initialised, sample dropped")
        words = struct.unpack("<16h", data)
        if t - self._temp_t >= TEMP_PERIOD_S:
            self._temp_c = float(struct.unpack("<b", bytes([self._dev.read_u8(REG_TEMP)]))[0])
            self._temp_t = t
        accel = tuple(v / ACCEL_LSB_PER_MPS2 for v in words[0:3])
        gyro = tuple(v / GYRO_LSB_PER_RADPS for v in words[6:9])
        w, x, y, z = (v / QUAT_LSB for v in words[12:16])
        orientation = (x, y, z, w) if (w or x or y or z) else None
        return ImuSample(t_mono_s=t, accel_mps2=accel, gyro_radps=gyro,  # type: ignore[arg-type]
                         orientation_xyzw=orientation, temperature_c=self._temp_c)
