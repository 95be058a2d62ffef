"""A normally-closed switch on one GPIO line, read through the Linux GPIO character device.

The binding is ``gpiod`` on PyPI, the official Python bindings of libgpiod v2
(libgpiod.readthedocs.io, "Python bindings"; the package vendors libgpiod, so no
system library is needed; the kernel needs the GPIO character device uAPI v2,
Linux >= 5.10: docs.kernel.org/userspace-api/gpio/chardev.html). Debian's
``python3-libgpiod`` (libgpiod 1.6 on Raspberry Pi OS Bookworm) is the older v1
API, which this driver refuses with a clear error.

How the line is read (the same calls on the emulator, drivers/emulators/gpio.py):

- ``open()``: ``gpiod.Chip(path)`` (or the ``gpio`` opener of a registered URL such as
  ``sim://``), then ``chip.request_lines({line: LineSettings(direction=INPUT, bias=...,
  active_low=..., edge_detection=BOTH)}, consumer="robot-agent")``; the chip handle is
  closed again (the request lives on, as in ``gpiod.request_lines``).
- ``active_low`` is set when the closed circuit reads low, so the logical value
  ``ACTIVE`` means "circuit closed" whatever the wiring.
- ``read()``: ``request.get_value(line) == ACTIVE``, except that an opening edge (towards
  ``INACTIVE``: the circuit opened) seen in the edge events since the last read makes it read
  open once, even if the line reads closed again by now: a contact that opened for a
  millisecond (a loose wire) is an opening, not lost between two reads.
- ``wait(timeout_s)``: ``request.wait_edge_events(timeout)`` and drain the events (edge
  detection on), keeping whether any opened the circuit; else sleep ``timeout_s``.

Failures (no such chip, line name unknown, line busy, chip removed: ENODEV on the
request) come out as :class:`drivers.errors.DriverError` with the errno.
"""

from __future__ import annotations

import errno as errno_mod
import logging
import time
from datetime import timedelta
from typing import Any, Callable, TYPE_CHECKING

from drivers.base import SwitchInput
from drivers.errors import DeviceClosed, DriverError
from drivers.transport import Openers, url_scheme

if TYPE_CHECKING:
    from drivers.config import GpioEstopConfig

log = logging.getLogger(__name__)

#: The consumer label the kernel shows for the requested line (``gpioinfo``).
CONSUMER = "robot-agent"

#: Config ``bias`` -> name of the ``gpiod.line.Bias`` member.
BIAS = {"pull_up": "PULL_UP", "pull_down": "PULL_DOWN", "disabled": "DISABLED", "as_is": "AS_IS"}


def chip_path(chip: int | str) -> str:
    """``0``, ``"0"`` and ``"gpiochip0"`` -> ``/dev/gpiochip0``; a path or URL stays itself."""
    if isinstance(chip, int) or (isinstance(chip, str) and chip.isdigit()):
        return f"/dev/gpiochip{int(chip)}"
    if chip.startswith("gpiochip") and "/" not in chip:
        return f"/dev/{chip}"
    return chip


def load_gpiod() -> Any:
    """The ``gpiod`` module (libgpiod v2 bindings).

    Raises:
        DriverError: not installed, or the v1 bindings (Debian's python3-libgpiod) found instead.
    """
    try:
        import gpiod
    except ImportError as err:
        raise DriverError("the gpiod package (libgpiod v2 Python bindings) is not installed: "
                          "pip install 'gpiod>=2.2'") from err
    if not hasattr(gpiod, "LineSettings"):
        raise DriverError("gpiod here is the libgpiod v1 API (Debian python3-libgpiod); the e-stop input "
                          "needs v2: pip install 'gpiod>=2.2' into the agent's venv")
    return gpiod


class GpioSwitch(SwitchInput):
    """A normally-closed switch on a GPIO line (module docstring).

    Args:
        cfg: chip, line, bias, closed level, edge events (drivers.config.GpioEstopConfig).
        name: config name for errors and health (``estop``).
        openers: transport table; a ``gpio`` opener serves URL chips (``sim://``).
        sleep: sleep function, s (``wait`` without edge detection).
    """

    def __init__(self, cfg: GpioEstopConfig, *, name: str = "estop", openers: Openers | None = None,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.cfg = cfg
        self.name = name
        self._openers = openers if openers is not None else Openers()
        self._sleep = sleep
        self.path = chip_path(cfg.chip)
        self._request: Any = None
        self._closed = False
        self._active: Any = None
        self._opened = False        # an opening edge drained since the last read

    def __repr__(self) -> str:
        return f"<GpioSwitch {self.name} {self.path} line {self.cfg.line!r}>"

    def _error(self, what: str, err: BaseException) -> DriverError:
        code = err.errno if isinstance(err, OSError) else None
        text = f"{self.name}: {what} {self.path} line {self.cfg.line!r}: {err}"
        if code == errno_mod.ENOENT and what == "cannot request":
            text += (f" (no line named {self.cfg.line!r} on this chip: `gpioinfo` lists the lines, `gpiofind` "
                     "finds the chip; a Pi 5 with a kernel before 6.6.45 has its header on /dev/gpiochip4)")
        elif code == errno_mod.EACCES:
            text += " (is the agent's user in the gpio group? docs/hardware.md)"
        elif code == errno_mod.EBUSY:
            text += " (another program holds the line: gpioinfo shows it)"
        return DriverError(text, device=self.name, errno=code)

    def _open_chip(self) -> Any:
        self._openers.check("gpio", self.path, self.name)
        opener = self._openers.opener("gpio", self.path) if url_scheme(self.path) else None
        if opener is not None:
            return opener(self.path)
        gpiod = load_gpiod()
        return gpiod.Chip(self.path)

    def open(self) -> None:
        """Request the line as an input with the configured bias and active level.

        Raises:
            DriverError: gpiod missing or v1; no such chip (errno 2), permission (13), line
                busy (16), unknown line name or offset out of range.
            DeviceClosed: after close().
        """
        if self._closed:
            raise DeviceClosed(f"{self.name}: driver closed", device=self.name)
        if self._request is not None:
            return
        gpiod = load_gpiod()
        from gpiod.line import Bias, Direction, Edge, Value
        settings = gpiod.LineSettings(
            direction=Direction.INPUT, bias=getattr(Bias, BIAS[self.cfg.bias]),
            active_low=self.cfg.closed_level == "low",
            edge_detection=Edge.BOTH if self.cfg.edge_events else Edge.NONE)
        try:
            chip = self._open_chip()
        except DriverError:
            raise
        except OSError as err:
            raise self._error("cannot open", err) from err
        try:
            self._request = chip.request_lines(config={self.cfg.line: settings}, consumer=CONSUMER)
        except (OSError, ValueError) as err:
            raise self._error("cannot request", err) from err
        finally:
            chip.close()
        self._active = Value.ACTIVE
        log.info("%r open: bias %s, closed reads %s, edge events %s", self, self.cfg.bias,
                 self.cfg.closed_level, "on" if self.cfg.edge_events else "off")

    def _require(self) -> Any:
        if self._closed:
            raise DeviceClosed(f"{self.name}: driver closed", device=self.name)
        if self._request is None:
            raise DriverError(f"{self.name}: not open", device=self.name)
        return self._request

    def read(self) -> bool:
        """True while the circuit is closed, False while it is open, and False once after an opening
        edge was seen since the last read, however brief the opening (edge events on).

        Raises:
            DriverError: the line is gone (chip removed: ENODEV) or the read failed.
            DeviceClosed: after close().
        """
        req = self._require()
        try:
            if self.cfg.edge_events and req.wait_edge_events(timedelta(0)):
                self._drain(req)
            closed = req.get_value(self.cfg.line) == self._active
        except Exception as err:  # OSError, or gpiod's RequestReleasedError
            raise self._error("cannot read", err) from err
        opened, self._opened = self._opened, False
        return closed and not opened

    def _drain(self, req: Any) -> None:
        """Read the queued edge events; remember an opening one (logical falling: closed -> open)."""
        from gpiod import EdgeEvent
        for event in req.read_edge_events():
            if event.event_type == EdgeEvent.Type.FALLING_EDGE:
                self._opened = True

    def wait(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` s for an edge and drain what arrived (an opening edge among them makes
        the next :meth:`read` read open); True when any did.

        Without edge detection this sleeps ``timeout_s`` and returns False.

        Raises:
            DriverError: the line is gone. DeviceClosed: after close().
        """
        req = self._require()
        if not self.cfg.edge_events:
            self._sleep(timeout_s)
            return False
        try:
            if not req.wait_edge_events(timedelta(seconds=max(0.0, timeout_s))):
                return False
            self._drain(req)
            return True
        except Exception as err:  # OSError, or gpiod's RequestReleasedError
            raise self._error("cannot wait for edges on", err) from err

    def close(self) -> None:
        """Release the line. Idempotent, never raises."""
        self._closed = True
        req, self._request = self._request, None
        if req is not None:
            try:
                req.release()
            except Exception as err:  # noqa: BLE001 - a removed chip may refuse; the fd is closed anyway
                log.debug("%s: release failed: %s", self.name, err)
