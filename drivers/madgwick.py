"""Madgwick's IMU orientation filter (gyro + accelerometer) in plain floats.

The same update as ``ahrs.filters.Madgwick.updateIMU`` (Madgwick 2010, eqs. 12,
13, 25, 26, 33, 34; gain 0.033 as ahrs uses without a magnetometer), written
on Python floats: one step costs a few microseconds instead of the ~300 us of
numpy's small-array overhead, which matters at 100 Hz on a Pi-class core.
tests/drivers/test_mpu6050.py checks it against ahrs step for step.
"""

from __future__ import annotations

import math

#: ahrs' default gain without a magnetometer.
GAIN = 0.033

Quat = tuple[float, float, float, float]      # w, x, y, z


def update_imu(q: Quat, gyr: tuple[float, float, float], acc: tuple[float, float, float], dt: float,
               gain: float = GAIN) -> Quat:
    """One filter step: orientation ``q`` (w, x, y, z, unit), gyro rad/s, accel (any unit), ``dt`` s."""
    gx, gy, gz = gyr
    if gx == 0.0 and gy == 0.0 and gz == 0.0:
        return q
    qw, qx, qy, qz = q
    # qDot = 0.5 * q (x) (0, gyr)
    dw = 0.5 * (-qx * gx - qy * gy - qz * gz)
    dx = 0.5 * (qw * gx + qy * gz - qz * gy)
    dy = 0.5 * (qw * gy - qx * gz + qz * gx)
    dz = 0.5 * (qw * gz + qx * gy - qy * gx)
    a_norm = math.sqrt(acc[0] * acc[0] + acc[1] * acc[1] + acc[2] * acc[2])
    if a_norm > 0.0:
        ax, ay, az = acc[0] / a_norm, acc[1] / a_norm, acc[2] / a_norm
        f0 = 2.0 * (qx * qz - qw * qy) - ax
        f1 = 2.0 * (qw * qx + qy * qz) - ay
        f2 = 2.0 * (0.5 - qx * qx - qy * qy) - az
        if f0 or f1 or f2:
            s0 = -2.0 * qy * f0 + 2.0 * qx * f1                 # J^T f
            s1 = 2.0 * qz * f0 + 2.0 * qw * f1 - 4.0 * qx * f2
            s2 = -2.0 * qw * f0 + 2.0 * qz * f1 - 4.0 * qy * f2
            s3 = 2.0 * qx * f0 + 2.0 * qy * f1
            s_norm = math.sqrt(s0 * s0 + s1 * s1 + s2 * s2 + s3 * s3)
            if s_norm > 0.0:
                k = gain / s_norm
                dw, dx, dy, dz = dw - k * s0, dx - k * s1, dy - k * s2, dz - k * s3
    w, x, y, z = qw + dw * dt, qx + dx * dt, qy + dy * dt, qz + dz * dt
    n = math.sqrt(w * w + x * x + y * y + z * z)
    return w / n, x / n, y / n, z / n


def acc2q(acc: tuple[float, float, float]) -> Quat:
    """Orientation (w, x, y, z) from gravity alone, yaw 0: ``ahrs.common.orientation.acc2q`` in plain floats.

    Roll ``atan2(ay, az)``, pitch ``atan2(-ax, hypot(ay, az))``; an all-zero reading gives the identity.
    """
    norm = math.sqrt(acc[0] * acc[0] + acc[1] * acc[1] + acc[2] * acc[2])
    if norm <= 0.0:
        return (1.0, 0.0, 0.0, 0.0)
    ax, ay, az = acc[0] / norm, acc[1] / norm, acc[2] / norm
    ex, ey = math.atan2(ay, az), math.atan2(-ax, math.sqrt(ay * ay + az * az))
    cx, sx, cy, sy = math.cos(ex / 2), math.sin(ex / 2), math.cos(ey / 2), math.sin(ey / 2)
    q = (cx * cy, sx * cy, cx * sy, -sx * sy)
    n = math.sqrt(sum(v * v for v in q))
    return (q[0] / n, q[1] / n, q[2] / n, q[3] / n)
