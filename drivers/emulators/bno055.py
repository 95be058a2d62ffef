"""BNO055 register-map emulator (hardware-reference §4), driven by the tank physics.

Page 0 power-on values: CHIP_ID 0xA0 (ACC 0xFB, MAG 0x32, GYR 0x0F ids),
OPR_MODE CONFIGMODE, UNIT_SEL 0x80, AXIS_MAP_CONFIG 0x24. Behaviour:

- Registers are paged (PAGE_ID 0x07); page 1 holds zeros here.
- In CONFIGMODE, and until a mode switch has taken its time (7 ms out of
  CONFIGMODE, 19 ms into it; Table 3-6), the data registers read 0.
- Configuration registers (UNIT_SEL, PWR_MODE, AXIS_MAP_*...) accept writes
  only in CONFIGMODE; OPR_MODE, PAGE_ID and SYS_TRIGGER accept them always.
  SYS_TRIGGER bit 5 (RST_SYS) restores power-on values.
- In a fusion mode a read touching 0x08..0x3A latches one sample from
  :class:`BodyMotion`: accel, gyro (scaled per UNIT_SEL), a magnetometer field
  of 20 uT pointing north, Euler, quaternion of the physics yaw,
  linear acceleration and gravity, all little-endian; the physics tilt (roll, pitch) turns
  the quaternion, Euler roll/pitch and the gravity vector; temperature in 0x34.
"""

from __future__ import annotations

import math
import struct
import time
from typing import Callable, TYPE_CHECKING

from drivers.bno055 import (QUAT_LSB, REG_ACC_DATA, REG_CHIP_ID, REG_OPR_MODE, REG_PAGE_ID, REG_TEMP,
                            REG_UNIT_SEL, CHIP_ID_VALUE, CONFIG_TO_ANY_S, ANY_TO_CONFIG_S, MODE_CONFIG)
from drivers.emulators.i2c import RegisterChip
from drivers.emulators.mpu6050 import BodyMotion
from drivers.emulators.tank import GRAVITY_MPS2, TankPhysics

#: The simulated tank's BNO055 noise: BMI055 datasheet densities (inside the BNO055), gyro
#: 0.014 deg/s/sqrt(Hz), accel 150 ug/sqrt(Hz), over the ~32 Hz fusion-mode filter bandwidth;
#: plus a small fixed gyro offset.
SIM_NOISE = {"gyro_noise_radps": math.radians(0.014) * math.sqrt(32.0),
             "accel_noise_mps2": 150e-6 * GRAVITY_MPS2 * math.sqrt(32.0),
             "gyro_bias_radps": (math.radians(0.1), math.radians(-0.1), math.radians(0.15))}
REG_CALIB_STAT = 0x35
REG_SYS_STATUS = 0x39
REG_SYS_TRIGGER = 0x3F
REG_AXIS_MAP_CONFIG = 0x41
DATA_FIRST, DATA_LAST = REG_ACC_DATA, 0x3A
READ_ONLY_LAST = 0x3A
ALWAYS_WRITABLE = {REG_OPR_MODE, REG_PAGE_ID, REG_SYS_TRIGGER}
SYS_RST = 0x20
FUSION_MODES = range(0x08, 0x0D)

if TYPE_CHECKING:
    from drivers.config import Bno055Config
SYS_STATUS_FUSION = 0x05
EARTH_FIELD_UT = 20.0


def _quat_zyx(yaw: float, pitch: float, roll: float) -> tuple[float, float, float, float]:
    """(w, x, y, z) of yaw about z, then pitch about y, then roll about x (body to world), rad."""
    cy, sy = math.cos(yaw / 2), math.sin(yaw / 2)
    cp, sp = math.cos(pitch / 2), math.sin(pitch / 2)
    cr, sr = math.cos(roll / 2), math.sin(roll / 2)
    return (cr * cp * cy + sr * sp * sy, sr * cp * cy - cr * sp * sy,
            cr * sp * cy + sr * cp * sy, cr * cp * sy - sr * sp * cy)


def _pack(values, scale: float) -> bytes:
    return struct.pack(f"<{len(values)}h", *(max(-32768, min(32767, int(round(v * scale)))) for v in values))


class Bno055Chip(RegisterChip):
    """BNO055 at 0x28/0x29. See the module docstring.

    Args:
        physics: tank physics to sense, or None for fixed values (see :attr:`motion`).
        temperature_c: die temperature reported, degC.
        clock: monotonic clock for mode-switch times, s.
        Other keyword arguments go to :class:`BodyMotion` (noise, gyro bias, seed).
    """

    POR = {REG_CHIP_ID: CHIP_ID_VALUE, 0x01: 0xFB, 0x02: 0x32, 0x03: 0x0F, 0x04: 0x11, 0x05: 0x03, 0x06: 0x15,
           REG_UNIT_SEL: 0x80, REG_OPR_MODE: MODE_CONFIG, REG_AXIS_MAP_CONFIG: 0x24, 0x36: 0x0F}

    def __init__(self, physics: TankPhysics | None = None, *, temperature_c: float = 25.0,
                 clock: Callable[[], float] = time.monotonic, **motion) -> None:
        self.motion = BodyMotion(physics, **motion)
        self.temperature_c = temperature_c
        self._clock = clock
        self.page1 = bytearray(256)
        self.page = 0
        self.mode_ready_at = 0.0
        super().__init__()

    @classmethod
    def from_config(cls, cfg: Bno055Config, physics: TankPhysics | None = None, **options) -> "Bno055Chip":
        """The chip a ``sim://`` BNO055 config stands for, with datasheet noise and a small gyro
        bias (:data:`SIM_NOISE`; options as the constructor's override them)."""
        return cls(physics, **{**SIM_NOISE, **options})

    def reset(self) -> None:
        super().reset()
        self.page = 0
        self.page1[:] = bytes(256)
        self.page1[REG_PAGE_ID] = 1
        self.mode_ready_at = 0.0

    @property
    def mode(self) -> int:
        """Operating mode in effect (OPR_MODE low nibble)."""
        return self.regs[REG_OPR_MODE] & 0x0F

    @property
    def fusing(self) -> bool:
        """A fusion mode is in effect and its switch time has passed."""
        return self.mode in FUSION_MODES and self._clock() >= self.mode_ready_at

    def load(self, reg: int) -> int:
        return self.page1[reg] if self.page == 1 and reg != REG_PAGE_ID else self.regs[reg]

    def store(self, reg: int, value: int) -> None:
        if reg == REG_PAGE_ID:
            self.page = value & 1
            return
        if self.page == 1:
            if self.mode == MODE_CONFIG:
                self.page1[reg] = value
            return
        if reg == REG_SYS_TRIGGER and value & SYS_RST:
            self.reset()
            return
        if reg <= READ_ONLY_LAST or (reg not in ALWAYS_WRITABLE and self.mode != MODE_CONFIG):
            return
        if reg == REG_OPR_MODE:
            new, old = value & 0x0F, self.mode
            if new != old:
                self.mode_ready_at = self._clock() + (ANY_TO_CONFIG_S if new == MODE_CONFIG else CONFIG_TO_ANY_S)
        self.regs[reg] = value

    def latch(self, reg: int, length: int) -> None:
        if self.page == 1 or reg > DATA_LAST or reg + length <= DATA_FIRST:
            return
        if not self.fusing:
            self.regs[DATA_FIRST:DATA_LAST + 1] = bytes(DATA_LAST + 1 - DATA_FIRST)
            return
        accel, gyro, yaw = self.motion.sample()
        unit = self.regs[REG_UNIT_SEL]
        acc_scale = 1000.0 / GRAVITY_MPS2 if unit & 0x01 else 100.0        # mg or m/s^2
        gyr_scale = 900.0 if unit & 0x02 else 16.0 * 180.0 / math.pi       # rad/s or dps
        eul_scale = 900.0 if unit & 0x04 else 16.0 * 180.0 / math.pi       # rad or deg
        heading = (-yaw) % (2 * math.pi)                                   # clockwise from north
        mag = (EARTH_FIELD_UT * math.cos(yaw), -EARTH_FIELD_UT * math.sin(yaw), 0.0)
        roll, pitch = self.motion.tilt()
        quat = _quat_zyx(yaw, pitch, roll)                                 # w, x, y, z
        g = GRAVITY_MPS2
        gravity = (-g * math.sin(pitch), g * math.cos(pitch) * math.sin(roll), g * math.cos(pitch) * math.cos(roll))
        linear = tuple(a - g for a, g in zip(accel, gravity))
        block = (_pack(accel, acc_scale) + _pack(mag, 16.0) + _pack(gyro, gyr_scale)
                 + _pack((heading, roll, pitch), eul_scale) + _pack(quat, QUAT_LSB)
                 + _pack(linear, acc_scale) + _pack(gravity, acc_scale))
        self.regs[DATA_FIRST:DATA_FIRST + len(block)] = block
        temp = self.temperature_c * 9 / 5 + 32 if unit & 0x10 else self.temperature_c
        self.regs[REG_TEMP] = int(round(temp)) & 0xFF
        self.regs[REG_CALIB_STAT] = 0xFF
        self.regs[REG_SYS_STATUS] = SYS_STATUS_FUSION
