"""One contract for every driver in the registry, run against its emulator (drivers/config.py KINDS).

The checks live in tests/drivers/contract.py, shared with the hardware suite (tests/hardware/),
which runs them on real devices. A new driver with its registry entry is picked up here with no
change to this file. Serial drivers run on their emulator's pty, I2C drivers on a FakeSMBus on a
hand-advanced clock, the camera on the test pattern, the GPIO e-stop on its emulated chip; the physics moves only when a test steps it.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from agent.devices.build import Buses, build_driver
from drivers.config import KINDS, CameraConfig
from drivers.emulators.camera import PatternCapture
from drivers.emulators.i2c import FakeSMBus, ManualClock
from drivers.emulators.tank import TankPhysics
from drivers.registry import driver_class, emulator_class, kind_of
from drivers.transport import Openers
from tests.drivers.contract import Rig, check_open_close, check_si, check_transport_fault

#: Settings that only make a test wait (the Sabertooth autobaud pause); applied where a model has them.
QUICK = {"autobaud_wait_s": 0.0, "serial_timeout_s": 5.0}

ENTRIES = [(kind, m) for kind, ms in KINDS.items() for m in ms]


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
    drv = build_driver("motor", cfg.model_copy(update={"port": emu.port}), Buses())
    return Rig(drv, physics, emu.unplug, lambda pred: emu.wait_for(pred, 5.0))


def _i2c_rig(model: type, kind: str, device: str) -> Rig:
    clock = ManualClock()
    physics = TankPhysics(clock=clock, auto_step=False)
    cfg = _quick(model, {"kind": kind})
    klass = emulator_class(cfg)
    chip = klass.from_config(cfg, physics, **_accepted(klass.__init__, clock=clock))
    bus = FakeSMBus({cfg.address: chip})
    openers = Openers()
    openers.register("i2c", "fake", lambda url: bus)
    cfg = cfg.model_copy(update={"bus": "fake://"})
    drv = build_driver(device, cfg, Buses(openers),
                       **_accepted(driver_class(cfg).__init__, clock=clock, sleep=clock.sleep))
    return Rig(drv, physics, lambda: bus.inject(cfg.address, 121, 100), lambda pred: pred())


def _gpio_rig(model: type, kind: str) -> Rig:
    cfg = model.model_validate({"kind": kind, "chip": "sim://", "line": "GPIO17"})
    emu = emulator_class(cfg).from_config(cfg)
    openers = Openers()
    openers.register("gpio", "sim", emu.open_chip)
    drv = build_driver("estop", cfg, Buses(openers))
    return Rig(drv, None, emu.remove, lambda pred: pred())


def _camera_rig() -> Rig:
    cap = PatternCapture(160, 120, paced=False)
    cfg = CameraConfig(id="front", source="sim://pattern", width=160, height=120)
    drv = build_driver("camera", cfg, Buses(), capture_factory=lambda target, api: cap)
    return Rig(drv, TankPhysics(auto_step=False), cap.fail, lambda pred: pred())


@pytest.fixture(params=ENTRIES, ids=lambda e: f"{e[0]}-{e[1].__name__}")
def rig(request) -> Iterator[tuple[str, Rig]]:
    kind, model = request.param
    closing: list = []
    if kind == "camera":
        made = _camera_rig()
    elif "chip" in model.model_fields:
        made = _gpio_rig(model, kind_of(model))
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


def test_open_and_close_are_idempotent_and_a_closed_driver_raises_device_closed(rig):
    check_open_close(*rig)


def test_a_transport_fault_is_a_driver_error(rig):
    check_transport_fault(*rig)


def test_reads_are_in_si_units(rig):
    check_si(*rig)
