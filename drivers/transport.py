"""Transports by URL: a device path, or a URL whose scheme has a registered opener.

A driver's ``port`` (serial) or ``bus`` (I2C) is a device path or a URL. A
scheme is served by an opener registered in an :class:`Openers` table the
driver is given: the simulated tank (agent/devices/simtank.py) registers ``sim`` for
both transports, and the drivers just open the URL. Serial URLs pyserial
knows (``loop://``, ``socket://``, ``rfc2217://``...) need no opener; any other
scheme is rejected with :class:`drivers.errors.DriverConfigError` naming the
schemes that would work.

Openers:

- ``serial``: ``url -> str``, the path or pyserial URL to open instead (the
  simulated tank starts its emulator and returns the pty slave path);
- ``i2c``: ``url -> bus``, an smbus2-like bus object;
- ``gpio``: ``url -> chip``, an object with the ``gpiod.Chip`` methods the GPIO driver uses
  (``request_lines``, ``close``): the simulated tank's GPIO chip emulator.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from drivers.errors import DriverConfigError

#: Transports an opener can be registered for.
TRANSPORTS = ("serial", "i2c", "gpio")

#: Serial URL schemes pyserial's ``serial_for_url`` opens itself.
PYSERIAL_SCHEMES = ("loop", "socket", "rfc2217", "spy", "alt", "hwgrep", "cp2110")


def url_scheme(value: int | str) -> str:
    """``"sim"`` for ``sim://``, ``"gst"`` for ``gst:<pipeline>``; "" for a number or a path."""
    if not isinstance(value, str):
        return ""
    head, sep, _ = value.partition(":")
    plain = head[:1].isalpha() and all(c.isalnum() or c in "+.-" for c in head)
    return head.lower() if sep and plain else ""


def bus_key(value: int | str) -> str:
    """One name per bus: ``1``, ``"1"`` and ``"/dev/i2c-1"`` are all ``"/dev/i2c-1"``; a URL stays itself."""
    if isinstance(value, str) and value.isdigit():
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return f"/dev/i2c-{value}"
    return str(value)


class Openers:
    """URL scheme -> opener, per transport (``serial``, ``i2c``, ``gpio``); see the module docstring. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._table: dict[tuple[str, str], Callable[[str], Any]] = {}

    def register(self, transport: str, scheme: str, opener: Callable[[str], Any]) -> None:
        """Serve ``scheme://`` URLs of ``transport`` with ``opener``. Raises ValueError for an unknown transport."""
        if transport not in TRANSPORTS:
            raise ValueError(f"unknown transport {transport!r}; known: {', '.join(TRANSPORTS)}")
        with self._lock:
            self._table[(transport, scheme.lower())] = opener

    def schemes(self, transport: str) -> tuple[str, ...]:
        """Schemes with an opener for ``transport``, sorted."""
        with self._lock:
            return tuple(sorted(s for t, s in self._table if t == transport))

    def check(self, transport: str, url: int | str, device: str = "") -> None:
        """Accept a device path, a bus number, a pyserial URL (serial) or a registered scheme.

        Raises:
            DriverConfigError: naming the URL, its scheme and the schemes that would work.
        """
        scheme = url_scheme(url)
        builtin = PYSERIAL_SCHEMES if transport == "serial" else ()
        if not scheme or scheme in builtin or scheme in self.schemes(transport):
            return
        known = ", ".join(f"{s}://" for s in (*builtin, *self.schemes(transport))) or "no URL schemes"
        raise DriverConfigError(f"{device or transport}: no {transport} transport for {url!r} (scheme "
                                f"{scheme}://); known: a device path, {known}", device=device)

    def opener(self, transport: str, url: str) -> Callable[[str], Any] | None:
        """The opener of ``url``'s scheme for ``transport``, or None."""
        with self._lock:
            return self._table.get((transport, url_scheme(url)))


def resolve_serial(port: str, openers: Openers | None, device: str = "") -> str:
    """What to hand pyserial for ``port``: the opener's answer for a registered scheme, else ``port``.

    Raises:
        DriverConfigError: ``port`` has a scheme neither registered nor known to pyserial.
        DriverError: the opener failed (e.g. the simulated port is unplugged).
    """
    table = openers if openers is not None else Openers()
    table.check("serial", port, device)
    opener = table.opener("serial", port)
    return opener(port) if opener is not None else port
