"""MPU-6050 register-map emulator (hardware-reference §3), driven by the tank physics.

Power-on values: every register 0 except PWR_MGMT_1 = 0x40 (SLEEP) and
WHO_AM_I = 0x68. While SLEEP is set the data registers read 0. A read that
touches the data block (0x3B..0x48) first latches one consistent sample:
body specific force and angular rate from :class:`BodyMotion`, quantised with
the ranges in GYRO_CONFIG / ACCEL_CONFIG, big-endian, saturated at s16.
Writes to read-only registers (data, WHO_AM_I) are ignored; DEVICE_RESET
(PWR_MGMT_1 bit 7) restores power-on values. Chip axes = body axes.
"""

from __future__ import annotations

import math
import random
import struct
from typing import TYPE_CHECKING

from drivers.emulators.i2c import RegisterChip
from drivers.emulators.tank import GRAVITY_MPS2, TankPhysics
from drivers.mpu6050 import (ACCEL_LSB_PER_G, GYRO_LSB_PER_DPS, REG_ACCEL_CONFIG, REG_ACCEL_XOUT_H,
                             REG_GYRO_CONFIG, REG_PWR_MGMT_1, REG_WHO_AM_I, WHO_AM_I_VALUE)

if TYPE_CHECKING:
    from drivers.config import Mpu6050Config

PWR_SLEEP = 0x40
PWR_DEVICE_RESET = 0x80
DATA_FIRST, DATA_LAST = REG_ACCEL_XOUT_H, 0x48


def _s16(value: float) -> int:
    return max(-32768, min(32767, int(round(value))))


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
        g = self._rng.gauss
        an, gn = self.accel_noise_mps2, self.gyro_noise_radps
        accel = tuple(a + (g(0.0, an) if an else 0.0) for a in accel)
        gyro = tuple(w + b + (g(0.0, gn) if gn else 0.0) for w, b in zip(gyro, self.gyro_bias_radps))
        return accel, gyro, yaw


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
        super().__init__()

    @classmethod
    def from_config(cls, cfg: Mpu6050Config, physics: TankPhysics | None = None, **options) -> "Mpu6050Chip":
        """The chip a ``sim://`` MPU-6050 config stands for (options as the constructor's)."""
        return cls(physics, **options)

    @property
    def asleep(self) -> bool:
        return bool(self.regs[REG_PWR_MGMT_1] & PWR_SLEEP)

    def store(self, reg: int, value: int) -> None:
        if reg == REG_WHO_AM_I or DATA_FIRST <= reg <= DATA_LAST:
            return
        if reg == REG_PWR_MGMT_1 and value & PWR_DEVICE_RESET:
            self.reset()
            return
        self.regs[reg] = value

    def latch(self, reg: int, length: int) -> None:
        if reg > DATA_LAST or reg + length <= DATA_FIRST:
            return
        if self.asleep:
            self.regs[DATA_FIRST:DATA_LAST + 1] = bytes(DATA_LAST + 1 - DATA_FIRST)
            return
        accel, gyro, _ = self.motion.sample()
        a_lsb = ACCEL_LSB_PER_G[sorted(ACCEL_LSB_PER_G)[(self.regs[REG_ACCEL_CONFIG] >> 3) & 3]] / GRAVITY_MPS2
        g_lsb = GYRO_LSB_PER_DPS[sorted(GYRO_LSB_PER_DPS)[(self.regs[REG_GYRO_CONFIG] >> 3) & 3]]
        raw = [_s16(a * a_lsb) for a in accel]
        raw.append(_s16((self.temperature_c - 36.53) * 340.0))
        raw += [_s16(math.degrees(w) * g_lsb) for w in gyro]
        self.regs[DATA_FIRST:DATA_LAST + 1] = struct.pack(">7h", *raw)
        self.samples += 1
