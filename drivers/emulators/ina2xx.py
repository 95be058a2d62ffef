"""INA219 / INA226 register-map emulators (hardware-reference §5), driven by the tank physics.

The chips speak 16-bit big-endian registers behind a register pointer: a
write is ``[pointer, MSB, LSB]`` (a pointer alone just moves it); a read
returns the pointed register MSB first, repeated for longer reads (the
pointer does not auto-increment).

The shunt voltage is ``physics.battery_current_a() * shunt_ohm`` (or
:attr:`current_a` without physics) clipped to the shunt range, the bus
voltage ``physics.battery_voltage_v()`` (or :attr:`bus_voltage_v`). The chip
arithmetic follows the datasheet: Current = Shunt * Cal / 4096 (INA219) or
/ 2048 (INA226), Power = |Current| * Bus / 5000 or / 20000; both 0 while Cal
is 0; OVF when either overflows its register. Conversions complete every
"conversion time" (from the ADC / averaging settings of the Configuration
register) in continuous modes, once in triggered modes, never in power-down;
data registers hold the last completed conversion. CNVR (INA219 bus bit 1) /
CVRF (INA226 Mask/Enable bit 3) is set when a conversion completed since the
flag was last cleared: by reading Power (INA219) or Mask/Enable (INA226), or
by writing Configuration. RST (Configuration bit 15) restores power-on values.
"""

from __future__ import annotations

import math
import time
from abc import ABC, abstractmethod
from typing import Callable, TYPE_CHECKING

from drivers.emulators.tank import TankPhysics
from drivers.ina2xx import (INA219_ADC_TIME_S, INA219_BUS_LSB_V, INA219_CNVR, INA219_CONFIG_POR, INA219_OVF,
                            INA219_PGA_V, INA219_SHUNT_LSB_V, INA226_AVG, INA226_BUS_LSB_V, INA226_CONFIG_POR,
                            INA226_CVRF, INA226_DIE_ID, INA226_MANUFACTURER_ID, INA226_OVF, INA226_SHUNT_FS_V,
                            INA226_SHUNT_LSB_V, CONFIG_RESET, REG_BUS, REG_CAL, REG_CONFIG, REG_CURRENT,
                            REG_DIE_ID, REG_MANUFACTURER_ID, REG_MASK_ENABLE, REG_POWER, REG_SHUNT)

if TYPE_CHECKING:
    from drivers.config import Ina219Config, Ina226Config

#: INA226 VBUSCT / VSHCT code -> conversion time, s (reference §5.5; only 1.1 ms confirmed).
INA226_CT_S = (140e-6, 204e-6, 332e-6, 588e-6, 1.1e-3, 2.116e-3, 4.156e-3, 8.244e-3)


class _InaChip(ABC):
    """Shared register file and conversion timing of the INA2xx emulators.

    Args:
        physics: tank physics to sense, or None for :attr:`current_a` / :attr:`bus_voltage_v`.
        shunt_ohm: the shunt resistor on the board, ohm.
        clock: monotonic clock for conversion timing, s.
    """

    CONFIG_POR = 0
    CURRENT_DIV = 1
    POWER_DIV = 1
    CAL_MASK = 0xFFFF
    WRITABLE = {REG_CONFIG, REG_CAL}

    def __init__(self, physics: TankPhysics | None = None, *, shunt_ohm: float = 0.1,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.physics = physics
        self.shunt_ohm = shunt_ohm
        self.current_a = 0.5
        self.bus_voltage_v = 12.0
        self._clock = clock
        self.reset()

    @classmethod
    def from_config(cls, cfg: Ina219Config | Ina226Config, physics: TankPhysics | None = None,
                    **options) -> "_InaChip":
        """The chip a ``sim://`` INA2xx config stands for, with the config's shunt (options as the constructor's)."""
        return cls(physics, shunt_ohm=cfg.shunt_ohm, **options)

    def reset(self) -> None:
        """Power-on values."""
        self.regs: dict[int, int] = {REG_CONFIG: self.CONFIG_POR, REG_SHUNT: 0, REG_BUS: 0, REG_POWER: 0,
                                     REG_CURRENT: 0, REG_CAL: 0}
        self.pointer = 0
        self.overflow = False
        self._start = self._clock()
        self._converted = 0            # conversions folded into the data registers
        self._flag_seen = 0            # conversions at the last flag clear

    # ------------------------------------------------------------------ bytes
    def write(self, data: bytes) -> None:
        if not data:
            return
        self.pointer = data[0]
        if len(data) >= 3:
            self._store(self.pointer, (data[1] << 8) | data[2])

    def read(self, length: int) -> bytes:
        value = self._load(self.pointer)
        return bytes([(value >> 8) & 0xFF, value & 0xFF] * ((length + 1) // 2))[:length]

    # ------------------------------------------------------------------ registers
    def _store(self, reg: int, value: int) -> None:
        if reg not in self.WRITABLE:
            return
        if reg == REG_CONFIG and value & CONFIG_RESET:
            self.reset()
            return
        if reg == REG_CAL:
            value &= self.CAL_MASK
        self.regs[reg] = value
        if reg == REG_CONFIG:
            self._update()
            self._start = self._clock()
            self._converted = self._flag_seen = 0

    def _load(self, reg: int) -> int:
        self._update()
        return self.regs.get(reg, 0)

    def _mode(self) -> int:
        return self.regs[REG_CONFIG] & 0x7

    @abstractmethod
    def conversion_time_s(self) -> float:
        """Time one shunt + bus conversion cycle takes with the current configuration, s."""

    def _completed(self) -> int:
        """Conversions completed since the last Configuration write (or reset)."""
        mode = self._mode()
        if mode in (0, 4):
            return self._converted
        done = int((self._clock() - self._start) / self.conversion_time_s())
        return min(done, 1) if mode < 4 else done

    def _update(self) -> None:
        done = self._completed()
        if done > self._converted:
            self._converted = done
            self._convert()

    def _sense(self) -> tuple[float, float]:
        if self.physics is not None:
            return self.physics.battery_current_a() * self.shunt_ohm, self.physics.battery_voltage_v()
        return self.current_a * self.shunt_ohm, self.bus_voltage_v

    def _arith(self, shunt_raw: int, bus_raw: int) -> None:
        cal = self.regs[REG_CAL]
        current = math.trunc(shunt_raw * cal / self.CURRENT_DIV)
        power = math.trunc(abs(current) * bus_raw / self.POWER_DIV)
        self.overflow = not -32768 <= current <= 32767 or power > 0xFFFF
        self.regs[REG_CURRENT] = max(-32768, min(32767, current)) & 0xFFFF
        self.regs[REG_POWER] = min(power, 0xFFFF)

    @abstractmethod
    def _convert(self) -> None:
        """Fold one completed conversion into the data registers."""

    def _new_conversion(self) -> bool:
        return self._converted > self._flag_seen


def _clip(value: float, limit: int) -> int:
    return max(-limit, min(limit, int(round(value))))


class Ina219Chip(_InaChip):
    """INA219 at 0x40..0x4F (module docstring); arguments as :class:`_InaChip`."""

    CONFIG_POR = INA219_CONFIG_POR
    CURRENT_DIV = 4096
    POWER_DIV = 5000
    CAL_MASK = 0xFFFE

    def conversion_time_s(self) -> float:
        config = self.regs[REG_CONFIG]
        return INA219_ADC_TIME_S.get((config >> 7) & 0xF, 532e-6) + INA219_ADC_TIME_S.get((config >> 3) & 0xF, 532e-6)

    def _convert(self) -> None:
        shunt_v, bus_v = self._sense()
        config = self.regs[REG_CONFIG]
        shunt_fs = INA219_PGA_V[(config >> 11) & 3]
        shunt_raw = _clip(shunt_v / INA219_SHUNT_LSB_V, int(round(shunt_fs / INA219_SHUNT_LSB_V)))
        bus_fs = 32.0 if config & (1 << 13) else 16.0
        bus_raw = max(0, min(int(round(min(bus_v, bus_fs) / INA219_BUS_LSB_V)), 0x1FFF))
        self._arith(shunt_raw, bus_raw)
        self.regs[REG_SHUNT] = shunt_raw & 0xFFFF
        self.regs[REG_BUS] = bus_raw << 3

    def _load(self, reg: int) -> int:
        value = super()._load(reg)
        if reg == REG_BUS:
            value |= (INA219_CNVR if self._new_conversion() else 0) | (INA219_OVF if self.overflow else 0)
        elif reg == REG_POWER:
            self._flag_seen = self._converted
        return value


class Ina226Chip(_InaChip):
    """INA226 at 0x40..0x4F (module docstring); arguments as :class:`_InaChip`."""

    CONFIG_POR = INA226_CONFIG_POR
    CURRENT_DIV = 2048
    POWER_DIV = 20000
    CAL_MASK = 0x7FFF
    WRITABLE = {REG_CONFIG, REG_CAL, REG_MASK_ENABLE, 0x07}

    def reset(self) -> None:
        super().reset()
        self.regs.update({REG_MASK_ENABLE: 0, 0x07: 0, REG_MANUFACTURER_ID: INA226_MANUFACTURER_ID,
                          REG_DIE_ID: INA226_DIE_ID})

    def conversion_time_s(self) -> float:
        config = self.regs[REG_CONFIG]
        avg = INA226_AVG[(config >> 9) & 7]
        return avg * (INA226_CT_S[(config >> 6) & 7] + INA226_CT_S[(config >> 3) & 7])

    def _convert(self) -> None:
        shunt_v, bus_v = self._sense()
        shunt_raw = _clip(shunt_v / INA226_SHUNT_LSB_V, int(round(INA226_SHUNT_FS_V / INA226_SHUNT_LSB_V)) - 1)
        bus_raw = max(0, min(int(round(bus_v / INA226_BUS_LSB_V)), 0x7FFF))
        self._arith(shunt_raw, bus_raw)
        self.regs[REG_SHUNT] = shunt_raw & 0xFFFF
        self.regs[REG_BUS] = bus_raw

    def _load(self, reg: int) -> int:
        value = super()._load(reg)
        if reg == REG_MASK_ENABLE:
            value = (value & 0xFC03) | (INA226_CVRF if self._new_conversion() else 0) | (
                INA226_OVF if self.overflow else 0)
            self._flag_seen = self._converted
        return value
