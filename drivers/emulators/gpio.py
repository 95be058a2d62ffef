"""A GPIO chip with a normally-closed switch on one line, behind the ``gpiod`` (libgpiod v2) API.

:class:`GpioChipEmulator` is the hardware: a chip of ``num_lines`` lines named
``GPIO0``.. (as a Raspberry Pi's header chip names them) and a switch wired to
one of them. :meth:`GpioChipEmulator.open_chip` returns what ``gpiod.Chip(path)``
returns, as far as drivers/gpio.py uses it: :class:`EmulatedChip`
(``request_lines``, ``close``, ``path``, ``get_info``) whose requests are
:class:`EmulatedRequest` (``get_value``, ``wait_edge_events``,
``read_edge_events``, ``release``, ``offsets``), with ``gpiod``'s own value,
settings, edge-event and exception types.

Electrical model: while the switch is closed the line sits at the switch's
``closed_level``; while it is open the bias of the request pulls it (pull-up:
high, pull-down: low; disabled or as-is: an external resistor toward the level
opposite ``closed_level``). ``active_low`` inverts the logical value as the
kernel does. Every level change queues an edge event on requests with edge
detection (rising / falling in logical terms).

Controls (tests, the simulated tank): :meth:`open_switch`, :meth:`close_switch`,
:meth:`flap` (bounce the contact ``n`` times, ending where asked),
:meth:`remove` (the chip goes away: requests raise ENODEV, opening raises
ENOENT) and :meth:`replug`. Kernel behaviour kept: a line already requested is
EBUSY; a name or offset the chip lacks is refused (ValueError / EINVAL).
Thread-safe. The thread CPU time of a request's reads and waits (the emulation the e-stop input's
thread runs inline; a wait's sleep is no CPU time) is counted in :attr:`GpioChipEmulator.emulation`
and the process-wide ``drivers.emulators.cputime.TOTALS["gpio"]`` (scripts/bench_side.py).
"""

from __future__ import annotations

import errno as errno_mod
import os
import threading
import time
from collections import deque
from datetime import timedelta
from typing import Any, Callable, TYPE_CHECKING

import gpiod
from gpiod.line import Bias, Edge, Value

from drivers.emulators.cputime import GPIO, TOTALS, CpuMeter

if TYPE_CHECKING:
    from drivers.config import GpioEstopConfig

#: Lines of the emulated chip (a Raspberry Pi 5's pinctrl-rp1 has 54; GPIO0..GPIO27 on the header).
NUM_LINES = 54


def _seconds(timeout: timedelta | float | None) -> float | None:
    return timeout.total_seconds() if isinstance(timeout, timedelta) else timeout


class GpioChipEmulator:
    """The chip and its switch; see the module docstring.

    Args:
        switch_line: offset of the line the switch is wired to.
        closed_level: ``"low"`` (switch to GND) or ``"high"`` (switch to 3V3).
        path: the device path it stands for.
        clock_ns: monotonic clock for edge-event timestamps, ns.

    Attributes:
        emulation: thread CPU time, s, of its requests' reads and waits (drivers.emulators.cputime.CpuMeter).
    """

    def __init__(self, switch_line: int = 17, *, closed_level: str = "low", path: str = "/dev/gpiochip0",
                 label: str = "gpio-emulator", num_lines: int = NUM_LINES,
                 clock_ns: Callable[[], int] = time.monotonic_ns) -> None:
        if not 0 <= switch_line < num_lines:
            raise ValueError(f"switch line {switch_line} is not on a chip of {num_lines} lines")
        self.switch_line = switch_line
        self.closed_level = closed_level
        self.path = path
        self.label = label
        self.names = [f"GPIO{i}" for i in range(num_lines)]
        self._clock_ns = clock_ns
        self._cond = threading.Condition()
        self.closed = True
        self.removed = False
        self._requests: list[EmulatedRequest] = []
        self._seqno = 0
        self.edges = 0      # level changes so far (switch moves that changed the line)
        self.emulation = CpuMeter(TOTALS[GPIO])

    @classmethod
    def from_config(cls, cfg: GpioEstopConfig, physics: Any = None, **options: Any) -> "GpioChipEmulator":
        """The chip a ``sim://`` GPIO config stands for, its switch on the configured line, closed.

        A line named other than ``GPIO<n>`` (a board's own line name) is line 17 renamed so."""
        line, name = cfg.line, None
        if isinstance(line, str):
            if line.isdigit():
                line = int(line)
            elif line.startswith("GPIO") and line[4:].isdigit():
                line = int(line[4:])
            else:
                line, name = 17, line
        chip = cls(line, closed_level=cfg.closed_level, **options)
        if name is not None:
            chip.names[line] = name
        return chip

    # ------------------------------------------------------------------ controls
    def open_switch(self) -> None:
        """Open the circuit (the e-stop button pressed, a wire cut)."""
        self._set(False)

    def close_switch(self) -> None:
        """Close the circuit (the button released)."""
        self._set(True)

    def flap(self, n: int, *, end_closed: bool = True) -> None:
        """Bounce the contact: ``n`` changes of state in a row, then end closed (or open)."""
        if n < 0:
            raise ValueError(f"flap count must be >= 0, got {n}")
        for _ in range(n):
            self._set(not self.closed)
        self._set(end_closed)

    def remove(self) -> None:
        """The chip goes away (unbound, unplugged): requests raise ENODEV, opening raises ENOENT."""
        with self._cond:
            self.removed = True
            self._requests.clear()
            self._cond.notify_all()

    def replug(self) -> None:
        """The chip is back (new device: earlier requests stay dead)."""
        with self._cond:
            self.removed = False

    def _set(self, closed: bool) -> None:
        with self._cond:
            if closed == self.closed:
                return
            before = {id(r): r.value_now() for r in self._requests}
            self.closed = closed
            self.edges += 1
            for r in self._requests:
                after = r.value_now()
                if after != before[id(r)]:
                    self._seqno += 1
                    r.edge(after, self._clock_ns(), self._seqno)
            self._cond.notify_all()

    # ------------------------------------------------------------------ what the driver opens
    def open_chip(self, path: str | None = None) -> "EmulatedChip":
        """What ``gpiod.Chip(path)`` gives. Raises FileNotFoundError (ENOENT) while removed."""
        with self._cond:
            if self.removed:
                raise FileNotFoundError(errno_mod.ENOENT, os.strerror(errno_mod.ENOENT), path or self.path)
        return EmulatedChip(self, path or self.path)

    def high(self, bias: Bias) -> bool:
        """The line's physical level now, given the requester's bias."""
        if self.closed:
            return self.closed_level == "high"
        if bias == Bias.PULL_UP:
            return True
        if bias == Bias.PULL_DOWN:
            return False
        return self.closed_level == "low"     # an external resistor toward the open level

    def offset(self, line: int | str) -> int:
        """Offset of a line given by offset or name, as ``gpiod.Chip.line_offset_from_id``: an unknown
        name raises OSError ENOENT (a digit string is an offset), an offset off the chip ValueError."""
        if isinstance(line, str):
            if line in self.names:
                return self.names.index(line)
            if not line.strip().lstrip("-").isdigit():
                raise FileNotFoundError(errno_mod.ENOENT, os.strerror(errno_mod.ENOENT))
            line = int(line)
        if not 0 <= line < len(self.names):
            raise ValueError("line offset of out range")
        return line


class EmulatedChip:
    """The ``gpiod.Chip`` stand-in (the methods drivers/gpio.py uses)."""

    def __init__(self, emulator: GpioChipEmulator, path: str) -> None:
        self._emu = emulator
        self.path = path
        self._open = True

    def _check(self) -> None:
        if not self._open:
            raise gpiod.ChipClosedError()

    def get_info(self) -> Any:
        self._check()
        return gpiod.ChipInfo(name=os.path.basename(self.path), label=self._emu.label,
                              num_lines=len(self._emu.names))

    def request_lines(self, config: dict[Any, Any], consumer: str | None = None,
                      event_buffer_size: int | None = None, output_values: Any = None) -> "EmulatedRequest":
        """Request lines (the first key of ``config``; one line is all the driver asks for).

        Raises:
            ValueError: unknown line name or offset. OSError: EBUSY (requested already), ENODEV (removed).
        """
        self._check()
        emu = self._emu
        (line, settings), = config.items()
        settings = settings or gpiod.LineSettings()
        with emu._cond:
            if emu.removed:
                raise OSError(errno_mod.ENODEV, os.strerror(errno_mod.ENODEV))
            offset = emu.offset(line)
            if any(offset == r.offset for r in emu._requests):
                raise OSError(errno_mod.EBUSY, os.strerror(errno_mod.EBUSY))
            req = EmulatedRequest(emu, line, offset, settings, consumer or "?")
            emu._requests.append(req)
            return req

    def close(self) -> None:
        self._open = False

    def __enter__(self) -> "EmulatedChip":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class EmulatedRequest:
    """The ``gpiod.LineRequest`` stand-in for one input line."""

    def __init__(self, emulator: GpioChipEmulator, line: int | str, offset: int, settings: Any,
                 consumer: str) -> None:
        self._emu = emulator
        self._line = line
        self.offset = offset
        self.settings = settings
        self.consumer = consumer
        self._events: deque[Any] = deque(maxlen=64)
        self._released = False
        self._line_seqno = 0

    @property
    def offsets(self) -> list[int]:
        return [self.offset]

    @property
    def lines(self) -> list[int | str]:
        return [self._line]

    def value_now(self) -> Value:
        high = self._emu.high(self.settings.bias)
        return Value.ACTIVE if high != self.settings.active_low else Value.INACTIVE

    def edge(self, value: Value, t_ns: int, seqno: int) -> None:
        """Queue an edge event (called by the emulator under its lock)."""
        if self.settings.edge_detection == Edge.NONE:
            return
        rising = value == Value.ACTIVE
        if self.settings.edge_detection == (Edge.FALLING if rising else Edge.RISING):
            return
        kind = gpiod.EdgeEvent.Type.RISING_EDGE if rising else gpiod.EdgeEvent.Type.FALLING_EDGE
        self._line_seqno += 1
        self._events.append(gpiod.EdgeEvent(kind.value, t_ns, self.offset, seqno, self._line_seqno))

    def _check(self) -> None:
        if self._released:
            raise gpiod.RequestReleasedError()
        if self._emu.removed or self not in self._emu._requests:
            raise OSError(errno_mod.ENODEV, os.strerror(errno_mod.ENODEV))

    def get_value(self, line: int | str) -> Value:
        start = time.thread_time()
        try:
            with self._emu._cond:
                self._check()
                if self._emu.offset(line) != self.offset:
                    raise ValueError(f"unknown line: {line}")
                return self.value_now()
        finally:
            self._emu.emulation.since(start)

    def wait_edge_events(self, timeout: timedelta | float | None = None) -> bool:
        """True when an edge event is queued (waiting up to ``timeout``). Raises OSError ENODEV when removed."""
        start = time.thread_time()      # the wait itself is no CPU time
        try:
            with self._emu._cond:
                self._check()
                self._emu._cond.wait_for(lambda: bool(self._events) or self._emu.removed or self._released,
                                         _seconds(timeout))
                self._check()
                return bool(self._events)
        finally:
            self._emu.emulation.since(start)

    def read_edge_events(self, max_events: int | None = None) -> list[Any]:
        with self._emu._cond:
            self._check()
            n = len(self._events) if max_events is None else min(max_events, len(self._events))
            return [self._events.popleft() for _ in range(n)]

    def release(self) -> None:
        with self._emu._cond:
            self._released = True
            if self in self._emu._requests:
                self._emu._requests.remove(self)
            self._emu._cond.notify_all()

    def __enter__(self) -> "EmulatedRequest":
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
