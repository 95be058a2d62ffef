"""Reads and writes straight on a POSIX serial port's descriptor: the motor line's per-transaction path.

A motor controller's thread makes 30-70 transactions a second (a flush, a request, a reply of a
length the protocol fixes); pyserial's ``read``/``write`` add a Python-level timeout object per
call and a ``select`` for writability after every write. :func:`port_fd` says when the fast path
applies (a pyserial POSIX port, open, with finite timeouts, whose ``read``, ``write`` and
``reset_input_buffer`` are pyserial's own); :func:`read_fd` and :func:`write_fd` then do what
pyserial's ``serialposix.Serial.read`` and ``write`` do on it, with the same results: ``read_fd``
returns up to ``n`` bytes, fewer when the read timeout passes, waking once per chunk that arrives
(once for a reply written at once); ``write_fd`` writes all of ``data`` or raises
``serial.SerialTimeoutException`` after the write timeout (a full OS buffer). Errors are
pyserial's and the OS's (``serial.SerialException``, ``OSError``), which drivers/serialport.py
``SerialLink`` turns into ``DriverError`` as before. Other ports
(``loop://``, ``socket://``, test doubles) and port classes with methods of their own (``spy://``
logs the traffic in its ``read``/``write``) keep theirs.
"""

from __future__ import annotations

import os
import select
import time
from typing import Any

import serial

__all__ = ["port_fd", "read_fd", "write_fd"]

try:
    from serial.serialposix import Serial as _PosixSerial
except ImportError:       # not a POSIX system: pyserial's methods only
    _PosixSerial = None

#: The pyserial methods the descriptor path stands in for.
_FAST_METHODS = ("read", "write", "reset_input_buffer")


def port_fd(ser: Any) -> int | None:
    """The descriptor of ``ser`` when it is an open pyserial POSIX port with finite, non-zero read and
    write timeouts (what drivers/serialport.py sets), else None (use pyserial's own methods).

    A subclass that replaces ``read``, ``write`` or ``reset_input_buffer`` (``spy://``, which logs
    the traffic; ``serial.rs485.RS485``, which toggles RTS around a write) keeps its own methods."""
    if _PosixSerial is None or not isinstance(ser, _PosixSerial) or not ser.is_open:
        return None
    cls = type(ser)
    if any(getattr(cls, name) is not getattr(_PosixSerial, name) for name in _FAST_METHODS):
        return None
    if not ser.timeout or not ser.write_timeout or ser.inter_byte_timeout:
        return None
    return ser.fd


def read_fd(fd: int, n: int, timeout_s: float) -> bytes:
    """Up to ``n`` bytes from ``fd``, waiting at most ``timeout_s`` in all; fewer when it passes.

    Raises:
        serial.SerialException: the port was ready but gave no data (a disconnected device).
        OSError: the read failed (EIO once a USB adapter or a pty's other side is gone).
    """
    out = b""
    deadline = time.monotonic() + timeout_s
    left = timeout_s
    while len(out) < n:
        if not select.select((fd,), (), (), left)[0]:
            break           # timed out
        try:
            chunk = os.read(fd, n - len(out))
        except BlockingIOError:
            chunk = None    # readiness without data for us (another reader): wait again
        if chunk is not None:
            if not chunk:
                raise serial.SerialException("device reports readiness to read but returned no data "
                                             "(device disconnected or multiple access on port?)")
            out += chunk
        left = deadline - time.monotonic()
        if left <= 0:
            break
    return out


def write_fd(fd: int, data: bytes, timeout_s: float) -> int:
    """Write all of ``data`` to ``fd`` (non-blocking), waiting up to ``timeout_s`` for buffer space.

    Returns:
        ``len(data)``.

    Raises:
        serial.SerialTimeoutException: the OS buffer stayed full for ``timeout_s``.
        OSError: the write failed (EIO once the device is gone).
    """
    view = memoryview(data)
    deadline = None
    while view:
        try:
            view = view[os.write(fd, view):]
        except BlockingIOError:
            pass
        if not view:
            break
        if deadline is None:
            deadline = time.monotonic() + timeout_s
        left = deadline - time.monotonic()
        if left <= 0 or not select.select((), (fd,), (), left)[1]:
            raise serial.SerialTimeoutException("Write timeout")
    return len(data)
