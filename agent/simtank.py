"""The simulated tank: one tracked-vehicle physics model and an emulator per ``sim://`` device.

Every emulator speaks its device's real wire bytes, so the agent runs its real
drivers against them: the motor controller on a pty pair (the driver opens the
slave path like ``/dev/ttyACM0``), the I2C chips on one
:class:`drivers.emulators.i2c.FakeSMBus`, the camera as a test pattern. The
motor emulator writes duty into :class:`drivers.emulators.tank.TankPhysics`;
the IMU reads its accelerations and yaw rate, the power monitor its battery
voltage and current, the servo chip reports its pulse widths to it.
"""

from __future__ import annotations

import importlib
import logging
import threading
from typing import Any

from agent.config import AgentConfig
from agent.errors import DriverError
from drivers.emulators.tank import TankParams, TankPhysics

log = logging.getLogger(__name__)

#: motor config ``kind`` -> "module:Class" of its pty emulator (each has ``from_config(cfg, physics)``).
MOTOR_EMULATORS = {
    "roboclaw": "drivers.emulators.roboclaw:RoboclawEmulator",
    "sabertooth": "drivers.emulators.sabertooth:SabertoothEmulator",
    "line": "drivers.emulators.linemotor:LineMotorEmulator",
}

#: I2C config ``kind`` -> "module:Class" of its chip emulator (each has ``from_config(cfg, physics)``).
CHIP_EMULATORS = {
    "mpu6050": "drivers.emulators.mpu6050:Mpu6050Chip",
    "bno055": "drivers.emulators.bno055:Bno055Chip",
    "ina219": "drivers.emulators.ina2xx:Ina219Chip",
    "ina226": "drivers.emulators.ina2xx:Ina226Chip",
    "pca9685": "drivers.emulators.pca9685:Pca9685Chip",
}


def _load(path: str) -> Any:
    module, name = path.split(":")
    return getattr(importlib.import_module(module), name)


class SimTank:
    """Physics plus emulators for the devices configured as ``sim://``.

    Attributes:
        physics: the shared TankPhysics (ground truth for tests).
        motor_emulator: the pty motor-controller emulator once the motor driver asked for its port.
        chips: I2C address -> chip emulator on the simulated bus.
    """

    def __init__(self, cfg: AgentConfig) -> None:
        d = cfg.drivers
        cells = getattr(getattr(d.power, "battery", None), "cells", 3)
        self.physics = TankPhysics(TankParams(
            track_width_m=cfg.base.track_width_m,
            max_speed_mps=cfg.base.max_speed_mps,
            counts_per_m=cfg.base.counts_per_m or 4000.0,
            cells=cells,
        ))
        self._cfg = cfg
        self._lock = threading.Lock()
        self.motor_emulator: Any = None
        self._bus: Any = None
        self.chips: dict[int, Any] = {}

    def serial_port(self, motor_cfg: Any) -> str:
        """The pty slave path of the motor-controller emulator, started on first use."""
        with self._lock:
            if self.motor_emulator is None:
                klass = _load(MOTOR_EMULATORS[motor_cfg.kind])
                self.motor_emulator = klass.from_config(motor_cfg, self.physics)
                self.motor_emulator.start()
                log.info("simulated %s on %s", motor_cfg.kind, self.motor_emulator.port)
            elif not self.motor_emulator.plugged:  # fault injection: fail like a missing port
                raise DriverError(f"simulated {motor_cfg.kind} is unplugged", device="motor", errno=2)
            return self.motor_emulator.port

    def i2c_bus(self) -> Any:
        """The simulated I2C bus with a chip emulator for every ``sim://`` I2C device."""
        with self._lock:
            if self._bus is None:
                from drivers.emulators.i2c import FakeSMBus
                self._bus = FakeSMBus()
                d = self._cfg.drivers
                for dcfg in (d.imu, d.power, d.servo):
                    if dcfg is not None and str(dcfg.bus) == "sim://":
                        chip = _load(CHIP_EMULATORS[dcfg.kind]).from_config(dcfg, self.physics)
                        self._bus.attach(dcfg.address, chip)
                        self.chips[dcfg.address] = chip
            return self._bus

    def chip(self, kind: str) -> Any:
        """The chip emulator of the configured device of ``kind`` (e.g. ``pca9685``), or None."""
        d = self._cfg.drivers
        for dcfg in (d.imu, d.power, d.servo):
            if dcfg is not None and dcfg.kind == kind:
                self.i2c_bus()
                return self.chips.get(dcfg.address)
        return None

    def close(self) -> None:
        """Stop the emulators. Idempotent."""
        with self._lock:
            emu, self.motor_emulator = self.motor_emulator, None
            bus, self._bus = self._bus, None
        if emu is not None:
            emu.close()
        if bus is not None:
            bus.close()
