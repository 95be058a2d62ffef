"""The driver contract, shared by the emulator suite (tests/drivers/test_contract.py) and the
hardware suite (tests/hardware/): the same checks on an emulator or on a real device.

A :class:`Rig` is a driver (not yet opened) plus what the checks may know about its peer:
the tank ``physics`` behind an emulator (None on real hardware or in another process: the
checks then assert units and ranges only, and the motor is commanded zero duty), a way to
break the transport (``fault``; None where nothing can be unplugged on purpose) and ``settle``
(wait until a predicate about the peer holds).

Every driver: ``open()`` twice and ``close()`` twice are harmless; after ``close()`` its
operations raise DeviceClosed; it reads in SI units; a transport fault comes out as DriverError.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from drivers.emulators.tank import TankPhysics
from drivers.errors import DeviceClosed, DriverError
from drivers.types import ImuSample, MotorFeedback, PowerSample


@dataclass
class Rig:
    """A driver (not yet opened) on its peer; see the module docstring."""

    driver: Any
    physics: TankPhysics | None = None
    fault: Callable[[], None] | None = None
    settle: Callable[[Callable[[], bool]], bool] = lambda pred: pred()


def use(kind: str, r: Rig) -> Any:
    """The kind's everyday operation: what the agent calls most (a motor moves only on an emulator)."""
    if kind == "motor":
        duty = 0.1 if r.physics is not None else 0.0
        return r.driver.set_duty(duty, duty)
    if kind == "servo":
        return r.driver.set_pulse_us(0, 1500.0)
    return r.driver.read()


def check_open_close(kind: str, r: Rig) -> None:
    """open/close idempotent; a closed driver raises DeviceClosed on use and on open."""
    r.driver.open()
    r.driver.open()
    use(kind, r)
    r.driver.close()
    r.driver.close()
    with pytest.raises(DeviceClosed):
        use(kind, r)
    with pytest.raises(DeviceClosed):
        r.driver.open()


def check_transport_fault(kind: str, r: Rig) -> None:
    """After ``r.fault()`` the driver's operation raises DriverError (within a loose deadline)."""
    assert r.fault is not None, "this rig cannot break its transport"
    r.driver.open()
    r.fault()
    deadline = time.monotonic() + 10.0  # loose: a write-only link may buffer a write or two while
    with pytest.raises(DriverError):    # the kernel hangs the tty up (a USB adapter does the same)
        while time.monotonic() < deadline:
            use(kind, r)
            time.sleep(0.01)


def check_si(kind: str, r: Rig) -> None:
    """Open the driver and check one reading of its kind is in SI units and plausible ranges."""
    r.driver.open()
    {"motor": _motor_si, "imu": _imu_si, "power": _power_si, "servo": _servo_si, "camera": _camera_si,
     "estop": _estop_si}[kind](r)


def _motor_si(r: Rig) -> None:
    if r.physics is not None:
        r.driver.set_duty(0.5, 0.5)
        assert r.settle(lambda: r.physics.duty == pytest.approx([0.5, 0.5], abs=0.01)), r.physics.duty
        r.driver.read_feedback()
        r.physics.step(1.0)
    else:
        r.driver.set_duty(0.0, 0.0)
        r.driver.read_feedback()
    fb = r.driver.read_feedback()
    assert isinstance(fb, MotorFeedback)
    if fb.left_counts is not None:
        assert isinstance(fb.left_counts, int) and isinstance(fb.right_counts, int)
        if r.physics is not None:                           # encoder counts follow the physics
            assert (fb.left_counts, fb.right_counts) == r.physics.encoder_counts()
            assert fb.left_cps is not None and fb.left_cps > 0 and fb.right_cps > 0
    if fb.battery_v is not None:
        assert 6.0 < fb.battery_v < 30.0                    # volts, not tenths
    for amps in (fb.left_a, fb.right_a):
        assert amps is None or 0.0 <= amps < 50.0


def _imu_si(r: Rig) -> None:
    s = r.driver.read()
    assert isinstance(s, ImuSample) and math.isfinite(s.t_mono_s)
    assert math.dist(s.accel_mps2, (0.0, 0.0, 9.80665)) < 0.6     # m/s^2 at rest, z up (bias allowed)
    assert max(abs(g) for g in s.gyro_radps) < 0.05                 # rad/s at rest
    if s.orientation_xyzw is not None:
        assert math.hypot(*s.orientation_xyzw) == pytest.approx(1.0, abs=0.01)


def _power_si(r: Rig) -> None:
    s = r.driver.read()
    assert isinstance(s, PowerSample)
    assert s.voltage_v is not None, "no bus voltage: is the battery connected to the monitor's VIN-?"
    assert 6.0 < s.voltage_v < 30.0 and -1.0 <= s.current_a < 20.0  # V and A (3S pack, idle draw)
    assert s.power_w == pytest.approx(s.voltage_v * s.current_a, rel=0.1, abs=0.05)


def _servo_si(r: Rig) -> None:
    r.driver.set_pulse_us(3, 1500.0)
    if r.physics is not None:
        assert r.physics.servo_pulse_us[3] == pytest.approx(1500.0, abs=10.0)   # microseconds on the wire


def _camera_si(r: Rig) -> None:
    image, t_mono_s = r.driver.read()
    settings = r.driver.settings
    assert image.shape == (settings.height, settings.width, 3) and str(image.dtype) == "uint8"
    assert math.isfinite(t_mono_s) and t_mono_s <= time.monotonic()


def _estop_si(r: Rig) -> None:
    """A normally-closed e-stop at rest reads closed (True); a bool, not the raw line level."""
    closed = r.driver.read()
    assert closed is True, "the e-stop circuit reads open: is the switch released and wired to the line?"
    assert r.driver.wait(0.0) in (True, False)
