"""MPU-6050 register-map emulator (hardware-reference §3), driven by the tank physics.

Power-on values: every register 0 except PWR_MGMT_1 = 0x40 (SLEEP) and
WHO_AM_I = 0x68. While SLEEP is set the data registers read 0. A read that
touches the data block (0x3B..0x48) first latches one consistent sample:
body specific force and angular rate from :class:`BodyMotion`, quantised with
the ranges in GYRO_CONFIG / ACCEL_CONFIG, big-endian, saturated at s16.
Writes to read-only registers (data, WHO_AM_I) are ignored; DEVICE_RESET
(PWR_MGMT_1 bit 7) restores power-on values. Chip axes = body axes.

FIFO (RM §4.6-4.7, registers 0x23 FIFO_EN, 0x6A USER_CTRL, 0x72/0x73
FIFO_COUNT, 0x74 FIFO_R_W, 0x3A INT_STATUS): while USER_CTRL.FIFO_EN is set
and the chip is awake, one sample of the enabled registers (in register order:
accel, temperature, gyro) is written at every sample-rate tick (gyro output
rate / (1 + SMPLRT_DIV)) of the chip's clock (the physics time; the monotonic
clock without physics). Ticks are written when the FIFO is next read, with
the body motion of that moment and fresh noise per sample. 1024 bytes; on
overflow the oldest bytes are lost and INT_STATUS.FIFO_OFLOW is set (cleared by
reading INT_STATUS). FIFO_COUNT reads the byte count; FIFO_R_W pops a byte per
byte read (the pointer does not advance past it; an empty FIFO reads 0).
USER_CTRL.FIFO_RESET empties it (self-clearing).
"""

from __future__ import annotations

import functools
import math
import random
import struct
import time
from typing import TYPE_CHECKING

from drivers.emulators.i2c import RegisterChip
from drivers.emulators.tank import GRAVITY_MPS2, TankPhysics
from drivers.mpu6050 import (ACCEL_LSB_PER_G, FIFO_SIZE, GYRO_LSB_PER_DPS, INT_FIFO_OFLOW, REG_ACCEL_CONFIG,
                             REG_ACCEL_XOUT_H, REG_CONFIG, REG_FIFO_COUNTH, REG_FIFO_EN, REG_FIFO_R_W,
                             REG_GYRO_CONFIG, REG_INT_STATUS, REG_PWR_MGMT_1, REG_SMPLRT_DIV, REG_USER_CTRL,
                             REG_WHO_AM_I, USER_FIFO_EN, USER_FIFO_RESET, WHO_AM_I_VALUE)

if TYPE_CHECKING:
    from drivers.config import Mpu6050Config

#: The simulated tank's MPU-6050 noise: datasheet (PS-MPU-6000A §6.1-6.2) densities, gyro
#: 0.005 deg/s/sqrt(Hz), accel 400 ug/sqrt(Hz), over a ~44 Hz DLPF bandwidth; plus a small
#: fixed gyro zero-rate offset (the datasheet allows +-20 deg/s; a good part is well under 1).
SIM_NOISE = {"gyro_noise_radps": math.radians(0.005) * math.sqrt(44.0),
             "accel_noise_mps2": 400e-6 * GRAVITY_MPS2 * math.sqrt(44.0),
             "gyro_bias_radps": (math.radians(0.3), math.radians(-0.2), math.radians(0.4))}
PWR_SLEEP = 0x40
PWR_DEVICE_RESET = 0x80
DATA_FIRST, DATA_LAST = REG_ACCEL_XOUT_H, 0x48
#: FIFO_EN bits -> the data bytes (offsets into the 14-byte data block) each one puts in the FIFO.
FIFO_SOURCES = ((0x08, slice(0, 6)), (0x80, slice(6, 8)), (0x40, slice(8, 10)), (0x20, slice(10, 12)),
                (0x10, slice(12, 14)))


#: One data burst 0x3B..0x48: accel X/Y/Z, temperature, gyro X/Y/Z, big-endian int16.
_BURST = struct.Struct(">7h")


def _s16(value: float) -> int:
    return max(-32768, min(32767, round(value)))


class BodyMotion:
    """What an IMU chip on the tank senses: physics when given, else fixed values.

    Args:
        physics: the tank whose body accel / gyro / yaw are sensed, or None.
        accel_noise_mps2, gyro_noise_radps: standard deviation of seeded Gaussian noise.
        gyro_bias_radps: constant gyro offset added to every reading, rad/s.
        seed: noise seed.

    Attributes:
        accel_mps2, gyro_radps, yaw_rad: values used when there is no physics.
    """

    def __init__(self, physics: TankPhysics | None = None, *, accel_noise_mps2: float = 0.0,
                 gyro_noise_radps: float = 0.0, gyro_bias_radps: tuple[float, float, float] = (0.0, 0.0, 0.0),
                 seed: int = 0) -> None:
        self.physics = physics
        self.accel_noise_mps2 = accel_noise_mps2
        self.gyro_noise_radps = gyro_noise_radps
        self.gyro_bias_radps = tuple(gyro_bias_radps)
        self.accel_mps2 = (0.0, 0.0, GRAVITY_MPS2)
        self.gyro_radps = (0.0, 0.0, 0.0)
        self.yaw_rad = 0.0
        self._rng = random.Random(seed)

    def sample(self) -> tuple[tuple[float, ...], tuple[float, ...], float]:
        """(accel m/s^2, gyro rad/s with bias, yaw rad), noise added."""
        if self.physics is not None:
            accel = self.physics.accel_body_mps2()
            gyro = self.physics.gyro_body_radps()
            yaw = self.physics.pose()[2]
        else:
            accel, gyro, yaw = self.accel_mps2, self.gyro_radps, self.yaw_rad
        accel, gyro = self.noisy(accel, gyro)
        return accel, gyro, yaw

    def tilt(self) -> tuple[float, float]:
        """(roll, pitch) of the body, rad: the physics tilt, else level."""
        return self.physics.tilt() if self.physics is not None else (0.0, 0.0)

    def truth(self) -> tuple[tuple[float, ...], tuple[float, ...]]:
        """(accel m/s^2, gyro rad/s) without bias and noise (:meth:`noisy` adds them)."""
        if self.physics is not None:
            return self.physics.accel_body_mps2(), self.physics.gyro_body_radps()
        return self.accel_mps2, self.gyro_radps

    def noisy(self, accel, gyro) -> tuple[tuple[float, ...], tuple[float, ...]]:
        """``accel`` and ``gyro`` with fresh noise, and the gyro bias added."""
        g = self._rng.gauss                 # drawn in this order: accel x, y, z, then gyro x, y, z
        an, gn = self.accel_noise_mps2, self.gyro_noise_radps
        (ax, ay, az), (wx, wy, wz), (bx, by, bz) = accel, gyro, self.gyro_bias_radps
        if an:
            ax, ay, az = ax + g(0.0, an), ay + g(0.0, an), az + g(0.0, an)
        wx, wy, wz = wx + bx, wy + by, wz + bz
        if gn:
            wx, wy, wz = wx + g(0.0, gn), wy + g(0.0, gn), wz + g(0.0, gn)
        return (ax, ay, az), (wx, wy, wz)


class Mpu6050Chip(RegisterChip):
    """MPU-6050 at 0x68/0x69. See the module docstring.

    Args:
        physics: tank physics to sense, or None for fixed values (see :attr:`motion`).
        temperature_c: die temperature reported, degC.
        Other keyword arguments go to :class:`BodyMotion` (noise, gyro bias, seed).
    """

    POR = {REG_PWR_MGMT_1: PWR_SLEEP, REG_WHO_AM_I: WHO_AM_I_VALUE}

    def __init__(self, physics: TankPhysics | None = None, *, temperature_c: float = 25.0, **motion) -> None:
        self.motion = BodyMotion(physics, **motion)
        self.temperature_c = temperature_c
        self.samples = 0
        self.clock = physics.now if physics is not None else time.monotonic
        self.fifo = bytearray()
        self._fifo_t = 0.0          # chip time of the next FIFO sample tick, s
        super().__init__()

    @classmethod
    def from_config(cls, cfg: Mpu6050Config, physics: TankPhysics | None = None, **options) -> "Mpu6050Chip":
        """The chip a ``sim://`` MPU-6050 config stands for, with datasheet noise and a small gyro
        bias (:data:`SIM_NOISE`; options as the constructor's override them)."""
        return cls(physics, **{**SIM_NOISE, **options})

    def reset(self) -> None:
        super().reset()
        self.fifo.clear()

    @property
    def asleep(self) -> bool:
        return bool(self.regs[REG_PWR_MGMT_1] & PWR_SLEEP)

    @property
    def sample_period_s(self) -> float:
        """Sample-rate tick: (1 + SMPLRT_DIV) / gyro output rate (8 kHz at DLPF_CFG 0 or 7, else 1 kHz), s."""
        base = 8000.0 if self.regs[REG_CONFIG] & 7 in (0, 7) else 1000.0
        return (1 + self.regs[REG_SMPLRT_DIV]) / base

    def advance(self, reg: int) -> int:
        return reg if reg == REG_FIFO_R_W else (reg + 1) & 0xFF

    def store(self, reg: int, value: int) -> None:
        if reg == REG_WHO_AM_I or DATA_FIRST <= reg <= DATA_LAST or reg == REG_FIFO_R_W:
            return
        if reg == REG_PWR_MGMT_1 and value & PWR_DEVICE_RESET:
            self.reset()
            return
        if reg == REG_USER_CTRL:
            if value & USER_FIFO_RESET or not self.regs[REG_USER_CTRL] & USER_FIFO_EN:
                self.fifo.clear()
                self._fifo_t = self.clock() + self.sample_period_s
            value &= ~USER_FIFO_RESET & 0xFF           # self-clearing
        self.regs[reg] = value

    def read(self, length: int) -> bytes:
        if self.pointer != REG_FIFO_R_W:
            return super().read(length)
        self._fill()
        out = bytes(self.fifo[:length])
        del self.fifo[:length]
        return out + bytes(length - len(out))          # an empty FIFO reads 0

    def load(self, reg: int) -> int:
        value = self.regs[reg]
        if reg == REG_INT_STATUS:
            self.regs[reg] = 0                          # cleared by the read
        return value

    def latch(self, reg: int, length: int) -> None:
        if reg <= REG_FIFO_R_W < reg + length or reg <= REG_FIFO_COUNTH + 1 < reg + length:
            self._fill()
            count = min(len(self.fifo), FIFO_SIZE)
            self.regs[REG_FIFO_COUNTH], self.regs[REG_FIFO_COUNTH + 1] = count >> 8, count & 0xFF
        if reg > DATA_LAST or reg + length <= DATA_FIRST:
            return
        if self.asleep:
            self.regs[DATA_FIRST:DATA_LAST + 1] = bytes(DATA_LAST + 1 - DATA_FIRST)
            return
        self.regs[DATA_FIRST:DATA_LAST + 1] = self._data(*self.motion.truth())

    def _data(self, accel, gyro) -> bytes:
        """The 14 data bytes (0x3B..0x48) of one sample of ``accel`` / ``gyro``, noise added."""
        accel, gyro = self.motion.noisy(accel, gyro)
        a_lsb, g_lsb = self._lsb(self.regs[REG_ACCEL_CONFIG], self.regs[REG_GYRO_CONFIG])
        self.samples += 1
        return _BURST.pack(_s16(accel[0] * a_lsb), _s16(accel[1] * a_lsb), _s16(accel[2] * a_lsb),
                           _s16((self.temperature_c - 36.53) * 340.0),
                           _s16(gyro[0] * g_lsb), _s16(gyro[1] * g_lsb), _s16(gyro[2] * g_lsb))

    @staticmethod
    @functools.lru_cache(maxsize=16)
    def _lsb(accel_config: int, gyro_config: int) -> tuple[float, float]:
        """(LSB per m/s^2, LSB per rad/s) of the full-scale ranges these ACCEL_CONFIG / GYRO_CONFIG select."""
        a_lsb = ACCEL_LSB_PER_G[sorted(ACCEL_LSB_PER_G)[(accel_config >> 3) & 3]] / GRAVITY_MPS2
        g_lsb = math.degrees(GYRO_LSB_PER_DPS[sorted(GYRO_LSB_PER_DPS)[(gyro_config >> 3) & 3]])
        return a_lsb, g_lsb

    def _fill(self) -> None:
        """Write the samples of every sample-rate tick since the last fill into the FIFO."""
        enabled = self.regs[REG_FIFO_EN]
        if not self.regs[REG_USER_CTRL] & USER_FIFO_EN or self.asleep or not enabled:
            return
        now, period = self.clock(), self.sample_period_s
        ticks = int((now - self._fifo_t) / period + 1e-9) + 1 if now >= self._fifo_t - 1e-9 else 0
        if ticks <= 0:
            return
        self._fifo_t += ticks * period
        parts = [part for bit, part in FIFO_SOURCES if enabled & bit]
        per_sample = sum(part.stop - part.start for part in parts)
        truth = self.motion.truth()
        for _ in range(min(ticks, FIFO_SIZE // per_sample + 1)):     # a long pause only overflows it
            data = self._data(*truth)
            for part in parts:
                self.fifo += data[part]
        if len(self.fifo) > FIFO_SIZE:
            del self.fifo[:len(self.fifo) - FIFO_SIZE]   # the oldest bytes are lost
            self.regs[REG_INT_STATUS] |= INT_FIFO_OFLOW
