"""PCA9685 register-map emulator (hardware-reference §6), reporting servo pulses to the tank physics.

Power-on values (§6.7): MODE1 0x11 (SLEEP, ALLCALL), MODE2 0x04, PRE_SCALE
0x1E, every LEDn_OFF_H 0x10 (full OFF), SUBADR1-3 0xE2/0xE4/0xE8, ALLCALLADR
0xE0. Behaviour:

- Auto-increment only with MODE1.AI; past register 0x45 the pointer wraps to
  0 (MODE1), and 0xFA..0xFE roll over to 0 (Table 3 footnote).
- PRE_SCALE writes are ignored unless SLEEP = 1, and clamped to >= 3.
- ALL_LED_* writes load every channel's register; they read back 0.
- Setting SLEEP with a channel running stops the outputs and sets RESTART.
  Writing RESTART = 1 at least 500 us after SLEEP was cleared restarts them
  and clears the bit; writing any LED register also clears it. EXTCLK is sticky.
- The general call software reset (0x00, 0x06) restores power-on values, and so does a power
  cycle of its supply with no bus error (``FakeSMBus.power_cycle``, a servo-rail brown-out).

After each write transaction the decoded pulse width of every channel whose
output changed is reported to ``physics.set_servo_pulse`` (0 = off);
:meth:`Pca9685Chip.pulse_us` decodes it on demand.
"""

from __future__ import annotations

import time
from typing import Callable, TYPE_CHECKING

from drivers.emulators.i2c import RegisterChip
from drivers.emulators.tank import TankPhysics
from drivers.pca9685 import (CHANNELS, COUNTS, LED_FULL, MODE1_AI, MODE1_RESTART, MODE1_SLEEP, OSC_STARTUP_S,
                             PRESCALE_MIN, REG_LED0_ON_L, REG_MODE1, REG_MODE2, REG_PRE_SCALE, actual_frequency_hz)

if TYPE_CHECKING:
    from drivers.config import Pca9685Config

MODE1_EXTCLK = 0x40
REG_LAST_LED = REG_LED0_ON_L + 4 * CHANNELS - 1          # 0x45
REG_ALL_LED_ON_L, REG_ALL_LED_OFF_H = 0xFA, 0xFD
REG_TEST_MODE = 0xFF


class Pca9685Chip(RegisterChip):
    """PCA9685 at 0x40..0x7F. See the module docstring.

    Args:
        physics: tank physics receiving ``set_servo_pulse(channel, us)``, or None.
        oscillator_hz: internal oscillator frequency, Hz.
        clock: monotonic clock for the 500 us oscillator start-up, s.
    """

    POR = {REG_MODE1: 0x11, REG_MODE2: 0x04, 0x02: 0xE2, 0x03: 0xE4, 0x04: 0xE8, 0x05: 0xE0,
           REG_PRE_SCALE: 0x1E, **{REG_LED0_ON_L + 4 * n + 3: LED_FULL for n in range(CHANNELS)}}
    GENERAL_CALL_RESET = True

    def __init__(self, physics: TankPhysics | None = None, *, oscillator_hz: float = 25e6,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.physics = physics
        self.oscillator_hz = oscillator_hz
        self._clock = clock
        self._reported: dict[int, float] = {}
        super().__init__()

    @classmethod
    def from_config(cls, cfg: Pca9685Config, physics: TankPhysics | None = None, **options) -> "Pca9685Chip":
        """The chip a ``sim://`` PCA9685 config stands for, with the config's oscillator."""
        return cls(physics, oscillator_hz=cfg.oscillator_hz, **options)

    def reset(self) -> None:
        super().reset()
        self.halted = False
        self.awake_since = 0.0
        self.committed()

    # ------------------------------------------------------------------ register semantics
    def advance(self, reg: int) -> int:
        if not self.regs[REG_MODE1] & MODE1_AI:
            return reg
        if reg == REG_LAST_LED or reg >= 0xFE:
            return 0
        return reg + 1

    def load(self, reg: int) -> int:
        return 0 if REG_ALL_LED_ON_L <= reg <= REG_ALL_LED_OFF_H else self.regs[reg]

    def store(self, reg: int, value: int) -> None:
        if reg == REG_MODE1:
            self._store_mode1(value)
        elif reg == REG_PRE_SCALE:
            if self.regs[REG_MODE1] & MODE1_SLEEP:
                self.regs[reg] = max(PRESCALE_MIN, value)
        elif REG_ALL_LED_ON_L <= reg <= REG_ALL_LED_OFF_H:
            for n in range(CHANNELS):
                self.regs[REG_LED0_ON_L + 4 * n + reg - REG_ALL_LED_ON_L] = value
            self._unhalt()
        elif REG_LED0_ON_L <= reg <= REG_LAST_LED:
            self.regs[reg] = value
            self._unhalt()
        elif reg != REG_TEST_MODE:
            self.regs[reg] = value

    def _store_mode1(self, value: int) -> None:
        old = self.regs[REG_MODE1]
        new = (value & ~MODE1_RESTART & 0xFF) | (old & MODE1_EXTCLK) | (old & MODE1_RESTART)
        if new & MODE1_SLEEP and not old & MODE1_SLEEP and self._running():
            new |= MODE1_RESTART
            self.halted = True
        if old & MODE1_SLEEP and not new & MODE1_SLEEP:
            self.awake_since = self._clock()
        if (value & MODE1_RESTART and new & MODE1_RESTART and not new & MODE1_SLEEP
                and self._clock() - self.awake_since >= OSC_STARTUP_S):
            new &= ~MODE1_RESTART
            self.halted = False
        self.regs[REG_MODE1] = new

    def _unhalt(self) -> None:
        self.regs[REG_MODE1] &= ~MODE1_RESTART & 0xFF
        self.halted = False

    def _running(self) -> bool:
        return any(self._counts(n) for n in range(CHANNELS))

    # ------------------------------------------------------------------ outputs
    @property
    def prescale(self) -> int:
        return self.regs[REG_PRE_SCALE]

    @property
    def frequency_hz(self) -> float:
        """PWM frequency the PRE_SCALE gives, Hz."""
        return actual_frequency_hz(self.prescale, self.oscillator_hz)

    def _counts(self, channel: int) -> int:
        """High counts per period of ``channel``'s registers (full OFF wins over full ON)."""
        base = REG_LED0_ON_L + 4 * channel
        on_l, on_h, off_l, off_h = self.regs[base:base + 4]
        if off_h & LED_FULL:
            return 0
        if on_h & LED_FULL:
            return COUNTS
        return ((off_l | (off_h & 0x0F) << 8) - (on_l | (on_h & 0x0F) << 8)) % COUNTS

    def pulse_us(self, channel: int) -> float:
        """High time per period on ``channel`` now, us (0 while off, asleep or halted)."""
        if self.regs[REG_MODE1] & MODE1_SLEEP or self.halted:
            return 0.0
        return self._counts(channel) * 1e6 / (self.frequency_hz * COUNTS)

    def committed(self) -> None:
        if self.physics is None:
            return
        for n in range(CHANNELS):
            us = self.pulse_us(n)
            if self._reported.get(n) != us:
                self._reported[n] = us
                self.physics.set_servo_pulse(n, us)
