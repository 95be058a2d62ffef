"""One contract for every driver in the registry, run against its emulator (drivers/config.py KINDS).

Every driver: ``open()`` twice and ``close()`` twice are harmless; after ``close()`` its
operations raise DeviceClosed; it reads in SI units; a transport fault comes out as DriverError.
A new driver with its registry entry is picked up here with no change to this file.
Serial drivers run on their emulator's pty, I2C drivers on a FakeSMBus on a hand-advanced
clock, the camera on the test pattern; the physics moves only when a test steps it.
"""

from __future__ import annotations

import inspect
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from drivers.config import KINDS, CameraConfig
from drivers.emulators.camera import PatternCapture
from drivers.emulators.i2c import FakeSMBus, ManualClock
from drivers.emulators.tank import TankPhysics
from drivers.errors import DeviceClosed, DriverError
from drivers.registry import driver_class, emulator_class, kind_of
from drivers.types import ImuSample, MotorFeedback, PowerSample

#: Settings that only make a test wait (the Sabertooth autobaud pause); applied where a model has them.
QUICK = {"autobaud_wait_s": 0.0, "serial_timeout_s": 5.0}

ENTRIES = [(kind, m) for kind, ms in KINDS.items() for m in ms]


@dataclass
class Rig:
    """A driver (not yet opened) on its emulator, and how to break its transport."""

    driver: Any
    physics: TankPhysics
    fault: Callable[[], None]
    settle: Callable[[Callable[[], bool]], bool]


def _accepted(fn: Callable[..., Any], **options: Any) -> dict[str, Any]:
    params = inspect.signature(fn).parameters
    return {k: v for k, v in options.items() if k in params}


def _quick(model: type, data: dict) -> Any:
    return model.model_validate({**data, **{k: v for k, v in QUICK.items() if k in model.model_fields}})


def _serial_rig(model: type, kind: str, physics: TankPhysics, closing: list) -> Rig:
    cfg = _quick(model, {"kind": kind, "port": "unset"})
    emu = emulator_class(cfg).from_config(cfg, physics)
    closing.append(emu)
    emu.start()
    drv = driver_class(cfg)(cfg.model_copy(update={"port": emu.port}), name="motor")
    return Rig(drv, physics, emu.unplug, lambda pred: emu.wait_for(pred, 5.0))


def _i2c_rig(model: type, kind: str, device: str) -> Rig:
    clock = ManualClock()
    physics = TankPhysics(clock=clock, auto_step=False)
    cfg = _quick(model, {"kind": kind})
    klass = emulator_class(cfg)
    chip = klass.from_config(cfg, physics, **_accepted(klass.__init__, clock=clock))
    bus = FakeSMBus({cfg.address: chip})
    dklass = driver_class(cfg)
    drv = dklass(cfg, bus, name=device, **_accepted(dklass.__init__, clock=clock, sleep=clock.sleep))
    return Rig(drv, physics, lambda: bus.inject(cfg.address, 121, 100), lambda pred: pred())


def _camera_rig() -> Rig:
    cap = PatternCapture(160, 120, paced=False)
    cfg = CameraConfig(id="front", source="sim://pattern", width=160, height=120)
    drv = driver_class(cfg)(cfg, capture_factory=lambda target, api: cap)
    return Rig(drv, TankPhysics(auto_step=False), cap.fail, lambda pred: pred())


@pytest.fixture(params=ENTRIES, ids=lambda e: f"{e[0]}-{e[1].__name__}")
def rig(request) -> Iterator[tuple[str, Rig]]:
    kind, model = request.param
    closing: list = []
    if kind == "camera":
        made = _camera_rig()
    elif "port" in model.model_fields:
        made = _serial_rig(model, kind_of(model), TankPhysics(auto_step=False), closing)
    else:
        made = _i2c_rig(model, kind_of(model), kind)
    closing.insert(0, made.driver)
    try:
        yield kind, made
    finally:
        for obj in closing:
            obj.close()


def _use(kind: str, drv: Any) -> Any:
    """The kind's everyday operation: what the agent calls most."""
    if kind == "motor":
        return drv.set_duty(0.1, 0.1)
    if kind == "servo":
        return drv.set_pulse_us(0, 1500.0)
    return drv.read()


def test_open_and_close_are_idempotent_and_a_closed_driver_raises_device_closed(rig):
    kind, r = rig
    r.driver.open()
    r.driver.open()
    _use(kind, r.driver)
    r.driver.close()
    r.driver.close()
    with pytest.raises(DeviceClosed):
        _use(kind, r.driver)
    with pytest.raises(DeviceClosed):
        r.driver.open()


def test_a_transport_fault_is_a_driver_error(rig):
    kind, r = rig
    r.driver.open()
    r.fault()
    deadline = time.monotonic() + 10.0  # loose: a write-only link may buffer a write or two while
    with pytest.raises(DriverError):    # the kernel hangs the tty up (a USB adapter does the same)
        while time.monotonic() < deadline:
            _use(kind, r.driver)
            time.sleep(0.01)


def test_reads_are_in_si_units(rig):
    kind, r = rig
    r.driver.open()
    {"motor": _motor_si, "imu": _imu_si, "power": _power_si, "servo": _servo_si, "camera": _camera_si}[kind](r)


def _motor_si(r: Rig) -> None:
    r.driver.set_duty(0.5, 0.5)
    assert r.settle(lambda: r.physics.duty == pytest.approx([0.5, 0.5], abs=0.01)), r.physics.duty
    r.driver.read_feedback()
    r.physics.step(1.0)
    fb = r.driver.read_feedback()
    assert isinstance(fb, MotorFeedback)
    if fb.left_counts is not None:                          # encoder counts follow the physics
        assert (fb.left_counts, fb.right_counts) == r.physics.encoder_counts()
        assert fb.left_cps is not None and fb.left_cps > 0 and fb.right_cps > 0
    if fb.battery_v is not None:
        assert 6.0 < fb.battery_v < 30.0                    # volts, not tenths
    for amps in (fb.left_a, fb.right_a):
        assert amps is None or 0.0 <= amps < 50.0


def _imu_si(r: Rig) -> None:
    s = r.driver.read()
    assert isinstance(s, ImuSample) and math.isfinite(s.t_mono_s)
    assert math.dist(s.accel_mps2, (0.0, 0.0, 9.80665)) < 0.3     # m/s^2 at rest, z up
    assert max(abs(g) for g in s.gyro_radps) < 0.02                 # rad/s at rest
    if s.orientation_xyzw is not None:
        assert math.hypot(*s.orientation_xyzw) == pytest.approx(1.0, abs=0.01)


def _power_si(r: Rig) -> None:
    s = r.driver.read()
    assert isinstance(s, PowerSample)
    assert 6.0 < s.voltage_v < 30.0 and 0.0 <= s.current_a < 20.0   # V and A (3S pack, idle draw)
    assert s.power_w == pytest.approx(s.voltage_v * s.current_a, rel=0.1, abs=0.05)


def _servo_si(r: Rig) -> None:
    r.driver.set_pulse_us(3, 1500.0)
    assert r.physics.servo_pulse_us[3] == pytest.approx(1500.0, abs=10.0)   # microseconds on the wire


def _camera_si(r: Rig) -> None:
    image, t_mono_s = r.driver.read()
    assert image.shape == (120, 160, 3) and str(image.dtype) == "uint8" and math.isfinite(t_mono_s)
