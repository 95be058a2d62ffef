"""The simulated tank: one tracked-vehicle physics model and an emulator per ``sim://`` device.

Every emulator speaks its device's real wire bytes, so the agent runs its real
drivers against them: the motor controller on a pty pair (the driver opens the
slave path like ``/dev/ttyACM0``), the I2C chips on one
:class:`drivers.emulators.i2c.FakeSMBus`, the camera as a test pattern. The
motor emulator writes duty into :class:`drivers.emulators.tank.TankPhysics`;
the IMU reads its accelerations and yaw rate, the power monitor its battery
voltage and current, the servo chip reports its pulse widths to it. A ``sim://``
e-stop input is a GPIO chip emulator with the switch on its line
(drivers/emulators/gpio.py): tests open, flap or remove it (:meth:`SimTank.gpio`).

What the world does to the tank is an emulator control here, for tests and benchmarks in the
same process (the agent sees it only through its drivers): :meth:`SimTank.drain_battery`,
:meth:`SimTank.tilt`, :meth:`SimTank.obstacle` (the failsafes' conditions, docs/safety.md).
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from agent.config import AgentConfig
from agent.config.drivers import SINGLE_KINDS
from agent.errors import DriverConfigError, DriverError
from drivers.emulators.tank import TankParams, TankPhysics
from drivers.registry import emulator_class
from drivers.transport import Openers, url_scheme

log = logging.getLogger(__name__)

#: The URL scheme the simulated tank serves, for serial ports and I2C buses.
SCHEME = "sim"
URL = "sim://"


def serves(cfg: AgentConfig) -> bool:
    """True when any device's port or bus is ``sim://`` (cameras' ``sim://pattern`` needs no tank)."""
    return any(url_scheme(url) == SCHEME for _, url in cfg.drivers.transport_urls())


class SimTank:
    """Physics plus emulators for the devices configured as ``sim://``; :meth:`openers` is how
    the drivers reach them (drivers/transport.py).

    Attributes:
        physics: the shared TankPhysics (ground truth for tests).
        motor_emulator: the pty motor-controller emulator once the motor driver asked for its port.
        chips: I2C address -> chip emulator on the simulated bus.
        gpio_chip: the GPIO chip emulator of a ``sim://`` e-stop input (see :meth:`gpio`), or None.
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
        self.gpio_chip: Any = None

    def openers(self) -> Openers:
        """A transport table serving ``sim://`` serial ports and I2C buses from this tank."""
        table = Openers()
        table.register("serial", SCHEME, self._open_serial)
        table.register("i2c", SCHEME, self._open_i2c)
        table.register("gpio", SCHEME, self._open_gpio)
        return table

    def _open_gpio(self, url: str) -> Any:
        if url != URL:
            raise DriverConfigError(f"GPIO chip {url!r}: {URL} takes no options")
        return self.gpio().open_chip(url)

    def gpio(self) -> Any:
        """The GPIO chip emulator of the ``sim://`` e-stop input (created on first use; its switch
        starts closed). Raises DriverConfigError when no e-stop input is ``sim://``."""
        with self._lock:
            if self.gpio_chip is None:
                estop = self._cfg.drivers.estop
                if estop is None or str(estop.chip) != URL:
                    raise DriverConfigError(f"simulated tank: no e-stop input on {URL}")
                self.gpio_chip = emulator_class(estop).from_config(estop, self.physics)
            return self.gpio_chip

    def _open_serial(self, url: str) -> str:
        motor = self._cfg.drivers.motor
        if url != URL or motor is None or getattr(motor, "port", None) != URL:
            raise DriverConfigError(f"simulated tank: no serial device at {url!r} (serves {URL} for the motor)")
        return self.serial_port(motor)

    def _open_i2c(self, url: str) -> Any:
        if url != URL:
            raise DriverConfigError(f"I2C bus {url!r}: {URL} takes no options")
        return self.i2c_bus()

    def serial_port(self, motor_cfg: Any) -> str:
        """The pty slave path of the motor-controller emulator, started on first use."""
        with self._lock:
            if self.motor_emulator is None:
                self.motor_emulator = emulator_class(motor_cfg).from_config(motor_cfg, self.physics)
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
                from drivers.emulators.wire import I2C_DEFAULT_HZ
                self._bus = FakeSMBus(clock_hz=I2C_DEFAULT_HZ)   # the Pi's default 100 kHz
                for dcfg in self._i2c_devices():
                    if str(dcfg.bus) == URL:
                        chip = emulator_class(dcfg).from_config(dcfg, self.physics)
                        self._bus.attach(dcfg.address, chip)
                        self.chips[dcfg.address] = chip
            return self._bus

    def chip(self, kind: str) -> Any:
        """The chip emulator of the configured device of ``kind`` (e.g. ``pca9685``), or None."""
        for dcfg in self._i2c_devices():
            if dcfg.kind == kind:
                self.i2c_bus()
                return self.chips.get(dcfg.address)
        return None

    def _i2c_devices(self) -> list[Any]:
        d = self._cfg.drivers
        return [c for c in (getattr(d, k) for k in SINGLE_KINDS) if c is not None and c.transport == "i2c"]

    # ------------------------------------------------------------------ emulator controls
    def drain_battery(self, cell_v: float) -> None:
        """Drain the emulated battery to ``cell_v`` per cell at rest, V (the power monitor then reads
        that times the cells, minus the load sag). Raises ValueError outside the emulated battery's
        range (``TankParams.cell_empty_v .. cell_full_v``)."""
        self.physics.drain_to(cell_v)

    def tilt(self, roll_deg: float = 0.0, pitch_deg: float = 0.0) -> None:
        """Tilt the emulated body (ROS REP 103: roll left side up, pitch nose down, degrees); both
        IMU emulators' gravity vectors turn with it. ``tilt()`` levels it again."""
        import math
        self.physics.set_tilt(math.radians(roll_deg), math.radians(pitch_deg))

    def obstacle(self, blocked: bool = True) -> None:
        """Put an obstacle in the tank's way (``False`` takes it away): the tracks stop while the
        motors push; the encoders read ~0 and the motor current the full stall current."""
        self.physics.set_obstacle(blocked)

    def close(self) -> None:
        """Stop the emulators. Idempotent."""
        with self._lock:
            emu, self.motor_emulator = self.motor_emulator, None
            bus, self._bus = self._bus, None
        if emu is not None:
            emu.close()
        if bus is not None:
            bus.close()
