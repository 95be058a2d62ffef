"""What drivers return: SI-unit samples, plain frozen dataclasses (standard library only).

``agent.model`` re-exports these; the control loop and the adapters read them
from :class:`agent.model.Snapshot`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

Vec3 = tuple[float, float, float]
Quat = tuple[float, float, float, float]  # x, y, z, w


@dataclass(frozen=True, slots=True)
class ImuSample:
    """One IMU reading in the body frame (x forward, y left, z up).

    Attributes:
        t_mono_s: capture time, s, agent monotonic clock.
        accel_mps2: specific force incl. gravity, m/s^2 (at rest about (0, 0, 9.81)).
        gyro_radps: angular rate, rad/s, gyro bias removed.
        orientation_xyzw: unit quaternion body->world, or None when unknown.
        temperature_c: die temperature, degC, or None.
    """

    t_mono_s: float
    accel_mps2: Vec3
    gyro_radps: Vec3
    orientation_xyzw: Quat | None = None
    temperature_c: float | None = None


@dataclass(frozen=True, slots=True)
class PowerSample:
    """Battery as seen by the power monitor: bus voltage V, current A (+ discharging), power W, 0..100 %.

    ``voltage_v`` is None when the monitor reads no bus voltage (0 V: no battery on its sense lead).
    """

    t_mono_s: float
    voltage_v: float | None
    current_a: float
    power_w: float
    percent: float | None = None


@dataclass(frozen=True, slots=True)
class MotorFeedback:
    """What a motor controller reports; a field is None when the device cannot tell.

    Attributes:
        left_counts, right_counts: encoder counts, running totals (signed).
        left_cps, right_cps: encoder speed, counts/s (+ forward).
        battery_v: main battery voltage, V.
        left_a, right_a: motor current, A.
        status: raw device error/status word (0 = normal).
        status_text: decoded status flags, e.g. ("E-Stop",); empty when normal.
    """

    left_counts: int | None = None
    right_counts: int | None = None
    left_cps: float | None = None
    right_cps: float | None = None
    battery_v: float | None = None
    left_a: float | None = None
    right_a: float | None = None
    status: int | None = None
    status_text: tuple[str, ...] = ()


class CameraFrame(NamedTuple):
    """One camera frame as :meth:`drivers.camera.Camera.read` returns it (unpacks as a pair).

    Attributes:
        image: BGR ``uint8`` numpy array, shape (height, width, 3).
        t_mono_s: monotonic time the frame was received, s.
    """

    image: Any
    t_mono_s: float
