"""Serial transport shared by the motor-controller drivers.

Three pieces, used by drivers/roboclaw.py, drivers/sabertooth.py and
drivers/linemotor.py:

- :func:`open_serial` opens a port by path (``/dev/ttyACM0``,
  ``/dev/serial/by-id/...``, a pty slave) or pyserial URL (``loop://``,
  ``socket://``, ``rfc2217://``) as 8N1 with an exclusive lock;
- :class:`SerialLink` wraps an open ``serial.Serial``-like object so that every
  failure comes out as :class:`drivers.errors.DriverError` naming the device and
  keeping the OS errno (pyserial raises ``SerialException``, ``OSError`` and,
  from ``tcflush``, ``termios.error``);
- :class:`SerialMotorController` is the lifecycle the three drivers share:
  open through a factory, one lock around every transaction, duty validation
  and per-side inversion, zero commanded before ``close()``, ``DeviceClosed``
  afterwards, and the retry rule of hardware-reference §1.8 (wait >= 10 ms,
  flush input, resend; two retries) for soft failures (no reply, bad checksum).

A port whose URL scheme has an opener in the driver's :class:`drivers.transport.Openers`
(``sim://``: the simulated tank's emulator on a pty pair) is opened at the path
the opener returns.
"""

from __future__ import annotations

import logging
import math
import termios
import threading
import time
from abc import abstractmethod
from typing import Any, TypeVar
from collections.abc import Callable

import serial

from drivers.errors import ChecksumError, DeviceClosed, DeviceTimeout, DriverError
from drivers.base import MotorController, MotorFeedback
from drivers.serialfd import port_fd, read_fd, write_fd
from drivers.transport import Openers, resolve_serial

log = logging.getLogger(__name__)

T = TypeVar("T")

#: What pyserial and the tty layer raise when a transfer or a port fails.
SERIAL_ERRORS: tuple[type[BaseException], ...] = (serial.SerialException, OSError, termios.error)

#: Wait for a blocked write, s. A write only blocks when the OS buffer is full (flow control, dead USB).
WRITE_TIMEOUT_S = 0.5
#: Retries after a soft failure (missing reply, bad checksum); hardware-reference §1.2 "2-3 tries".
RETRIES = 2
#: Pause before a retry, s: more than RoboClaw's 10 ms packet timeout so it drops a half-read packet (§1.1).
RETRY_DELAY_S = 0.012
#: Bits per byte on an 8N1 line (start + 8 data + stop), for transfer-time arithmetic.
BITS_PER_BYTE = 10

SerialFactory = Callable[[], Any]


def os_errno(err: BaseException) -> int | None:
    """The OS errno carried by ``err`` or by the OSError it wraps, else None."""
    for e in (err, err.__cause__, err.__context__):
        if isinstance(e, OSError) and e.errno:
            return e.errno
    if isinstance(err, termios.error) and err.args and isinstance(err.args[0], int):
        return err.args[0]
    return None


def transfer_s(n_bytes: int, baud: int) -> float:
    """Time ``n_bytes`` take on an 8N1 line at ``baud``, s (the physical floor of a transaction)."""
    return n_bytes * BITS_PER_BYTE / baud


def open_serial(port: str, baud: int, *, timeout_s: float, write_timeout_s: float = WRITE_TIMEOUT_S,
                device: str = "", openers: Openers | None = None) -> serial.SerialBase:
    """Open ``port`` at ``baud`` 8N1, exclusively (flock), with bounded read and write waits.

    Args:
        port: device path or pyserial URL (``loop://``, ``socket://host:port``, ``rfc2217://``).
        baud: bits per second.
        timeout_s: longest wait of one read call, s.
        write_timeout_s: longest wait of one blocked write, s.
        device: configured device name, for errors.
        openers: URL scheme -> opener table for ports pyserial cannot open itself (``sim://``).

    Returns:
        An open ``serial.SerialBase``.

    Raises:
        DriverError: the port cannot be opened (errno kept: 2 missing, 13 no permission in
            group ``dialout``, 16 busy) or the opener failed.
        DriverConfigError: the URL scheme has no opener and pyserial does not know it.
    """
    port = resolve_serial(port, openers, device)
    try:
        return serial.serial_for_url(port, baudrate=baud, bytesize=serial.EIGHTBITS,
                                     parity=serial.PARITY_NONE, stopbits=serial.STOPBITS_ONE,
                                     timeout=timeout_s, write_timeout=write_timeout_s, exclusive=True)
    except (ValueError, *SERIAL_ERRORS) as err:
        raise DriverError(f"{device}: cannot open serial port {port!r}: {err}",
                          device=device, errno=os_errno(err)) from err


class SerialLink:
    """An open serial object whose failures come out as DriverError.

    Args:
        ser: an open ``serial.Serial``-like object (read, write, read_until,
            reset_input_buffer, close, timeout, write_timeout).
        device: configured device name, for errors.
        timeout_s: longest wait of one read call, s; set on ``ser`` so a factory's
            blocking (``timeout=None``) port cannot hang the control thread.
        write_timeout_s: longest wait of one blocked write, s.

    Attributes:
        before_write: run before each write (see :meth:`write`); the motor drivers' feedback
            read sets it to slip a new duty in between its transactions.
    """

    def __init__(self, ser: Any, device: str, *, timeout_s: float,
                 write_timeout_s: float = WRITE_TIMEOUT_S) -> None:
        self.ser = ser
        self.device = device
        self.before_write: Callable[[], None] | None = None
        self._call("configure", self._configure, timeout_s, write_timeout_s)
        self._fd = port_fd(ser)     # a POSIX port: I/O straight on its descriptor (drivers/serialfd.py)
        self._read_s, self._write_s = timeout_s, write_timeout_s

    def _configure(self, timeout_s: float, write_timeout_s: float) -> None:
        if self.ser.timeout != timeout_s:
            self.ser.timeout = timeout_s
        if self.ser.write_timeout != write_timeout_s:
            self.ser.write_timeout = write_timeout_s

    def _call(self, what: str, fn: Callable[..., T], *args: Any) -> T:
        try:
            return fn(*args)
        except serial.SerialTimeoutException as err:
            raise DeviceTimeout(f"{self.device}: serial {what} timed out: {err}",
                                device=self.device, errno=os_errno(err)) from err
        except SERIAL_ERRORS as err:
            raise DriverError(f"{self.device}: serial {what} failed: {err}",
                              device=self.device, errno=os_errno(err)) from err

    def write(self, data: bytes) -> None:
        """Write all of ``data``. Raises DeviceTimeout (blocked write) or DriverError.

        ``before_write`` (if set) runs first, once per write and not for its own writes: a
        transaction it starts completes before this one begins.
        """
        hook, self.before_write = self.before_write, None
        if hook is not None:
            try:
                hook()
            finally:
                self.before_write = hook
        fd = self._fd
        if fd is None:
            n = self._call("write", self.ser.write, data)
        else:
            n = self._call("write", write_fd, fd, data, self._write_s)
        if n is not None and n != len(data):
            raise DeviceTimeout(f"{self.device}: serial write sent {n} of {len(data)} bytes", device=self.device)

    def read(self, n: int) -> bytes:
        """Read up to ``n`` bytes; fewer when the read timeout passes. Raises DriverError."""
        fd = self._fd
        if fd is None:
            return bytes(self._call("read", self.ser.read, n))
        return self._call("read", read_fd, fd, n, self._read_s)

    def read_until(self, terminator: bytes, size: int) -> bytes:
        """Read up to and including ``terminator``, at most ``size`` bytes; partial on timeout."""
        return bytes(self._call("read", self.ser.read_until, terminator, size))

    def read_pending(self) -> bytes:
        """Whatever input has arrived, without waiting. Raises DriverError."""
        n = self._call("read", lambda: self.ser.in_waiting)
        return self.read(n) if n else b""

    def flush_input(self) -> None:
        """Discard unread input (stale replies). Raises DriverError."""
        fd = self._fd
        if fd is None:
            self._call("flush", self.ser.reset_input_buffer)
        else:
            self._call("flush", termios.tcflush, fd, termios.TCIFLUSH)

    def close(self) -> None:
        """Close the port. Never raises."""
        self._fd = None     # never used again: the number may be reused for another file
        try:
            self.ser.close()
        except SERIAL_ERRORS as err:
            log.debug("%s: closing the serial port: %s", self.device, err)


class SerialMotorController(MotorController):
    """Lifecycle shared by the serial motor controllers.

    Subclasses implement the device protocol in :meth:`_handshake`,
    :meth:`_write_duty` and :meth:`_read_feedback` (and may override
    :meth:`_write_stop`, :meth:`_resync`); this class owns the link, the lock,
    input validation and the safe close. ``open()`` may be called again after a
    failed open; ``close()`` is final.

    Args:
        cfg: the driver's config (needs ``port``, ``baud``, ``invert_left``, ``invert_right``).
        serial_factory: returns an open ``serial.Serial``-like object; default
            :func:`open_serial` on ``cfg.port`` at ``cfg.baud``.
        name: configured device name, used in errors and logs.
        timeout_s: longest wait of one read call, s.
        openers: URL scheme -> opener table for the default factory (``sim://`` ports).
    """

    #: A duty posted during a feedback set is written before its next transaction (``read_feedback(between)``).
    duty_may_slip = True

    def __init__(self, cfg: Any, *, serial_factory: SerialFactory | None, name: str, timeout_s: float,
                 openers: Openers | None = None) -> None:
        self.cfg = cfg
        self.name = name
        self._timeout_s = timeout_s
        self._factory = serial_factory or (lambda: open_serial(cfg.port, cfg.baud, timeout_s=timeout_s,
                                                               device=name, openers=openers))
        self._link: SerialLink | None = None
        self._closed = False
        self._lock = threading.RLock()

    # ------------------------------------------------------------------ protocol hooks
    @abstractmethod
    def _handshake(self, link: SerialLink) -> None:
        """Bring the device up on a fresh link (probe, timeouts). Raises DriverError."""

    @abstractmethod
    def _write_duty(self, link: SerialLink, left: float, right: float) -> None:
        """Send duty per track, -1..1, already checked, clamped and inverted by :meth:`track_duty`
        (the device edge; encode it, check nothing again). Raises DriverError."""

    @abstractmethod
    def _read_feedback(self, link: SerialLink) -> MotorFeedback:
        """Read the device's feedback. Raises DriverError."""

    def _write_stop(self, link: SerialLink) -> None:
        """Send zero to both tracks (a device-specific stop command where one exists)."""
        self._write_duty(link, 0.0, 0.0)

    def _resync(self, link: SerialLink) -> None:
        """Bring the link back to a packet boundary before a retry: drop unread input."""
        link.flush_input()

    # ------------------------------------------------------------------ lifecycle
    @property
    def is_open(self) -> bool:
        """True between a successful ``open()`` and ``close()``."""
        return self._link is not None

    def open(self) -> None:
        """Open the port and run the device handshake. Raises DriverError, DeviceClosed after close()."""
        with self._lock:
            if self._closed:
                raise DeviceClosed(f"{self.name}: open() after close()", device=self.name)
            self._drop_link()
            try:
                ser = self._factory()
            except DriverError:
                raise
            except (ValueError, *SERIAL_ERRORS) as err:
                raise DriverError(f"{self.name}: cannot open serial port: {err}",
                                  device=self.name, errno=os_errno(err)) from err
            link = SerialLink(ser, self.name, timeout_s=self._timeout_s)
            self._link = link
            try:
                self._handshake(link)
            except DriverError:
                self._drop_link()
                raise

    def close(self) -> None:
        """Command zero, then release the port. Idempotent; never raises."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            link = self._link
            if link is None:
                return
            try:
                self._write_stop(link)
            except DriverError as err:
                log.warning("%s: could not command zero before closing: %s", self.name, err)
            self._drop_link()

    def _drop_link(self) -> None:
        link, self._link = self._link, None
        if link is not None:
            link.close()

    def _require_link(self) -> SerialLink:
        if self._closed:
            raise DeviceClosed(f"{self.name}: used after close()", device=self.name)
        if self._link is None:
            raise DriverError(f"{self.name}: not open (call open() first)", device=self.name)
        return self._link

    # ------------------------------------------------------------------ MotorController
    def set_duty(self, left: float, right: float) -> None:
        """Command open-loop duty per track, each -1..1 (clamped; + drives that track forward).

        Raises:
            DriverError: a duty is not a finite number (nothing is sent), or the transfer failed.
            DeviceClosed: after ``close()``.
        """
        duties = self.track_duty(left, right)
        with self._lock:
            self._write_duty(self._require_link(), *duties)

    def stop(self) -> None:
        """Command zero on both tracks. Raises DriverError."""
        with self._lock:
            self._write_stop(self._require_link())

    def read_feedback(self, between: Callable[[], tuple[float, float] | None] | None = None) -> MotorFeedback:
        """Read whatever feedback the device offers (see the subclass). Raises DriverError.

        Args:
            between: asked before each transaction of the feedback set (and again after each duty
                it returned); a (left, right) duty it returns is written first, so a new duty waits
                for one transaction, never a whole set. Its failure fails this read.
        """
        with self._lock:
            link = self._require_link()
            if between is None:
                return self._read_feedback(link)

            def interleave() -> None:     # until none is pending: a duty posted meanwhile waits for one write
                while (duty := between()) is not None:
                    self._write_duty(link, *self.track_duty(*duty))

            link.before_write = interleave
            try:
                return self._read_feedback(link)
            finally:
                link.before_write = None

    # ------------------------------------------------------------------ helpers
    def track_duty(self, left: float, right: float) -> tuple[float, float]:
        """Validate, clamp to -1..1 and apply the configured per-side inversion: the device edge.

        The one range guard of every serial motor driver (RoboClaw, Sabertooth, line protocol) on
        the duty it is handed, so that no driver ever writes an out-of-range or non-finite value;
        their ``_write_duty`` encode what this returns and check nothing again. It is a device
        protocol guard, not a control policy: the agent's duty is already finite (the edge, agent.model)
        and within -1..1 (agent.control.kinematics.scale_to_limit).

        Raises:
            DriverError: ``left`` or ``right`` is not a finite number (nothing is sent).
        """
        out = []
        for side, value, invert in (("left", left, self.cfg.invert_left), ("right", right, self.cfg.invert_right)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                log.error("%s: set_duty %s duty %r is not a finite number; nothing sent", self.name, side, value)
                raise DriverError(f"{self.name}: {side} duty must be a finite number, got {value!r}",
                                  device=self.name)
            value = max(-1.0, min(1.0, float(value)))
            out.append(-value if invert else value)
        return out[0], out[1]

    def side_sign(self, side: str) -> int:
        """-1 when ``side`` (``left``/``right``) is inverted in the config, else +1."""
        return -1 if getattr(self.cfg, f"invert_{side}") else 1

    def _retrying(self, link: SerialLink, what: str, attempt: Callable[[], T]) -> T:
        """Run ``attempt``; on DeviceTimeout or ChecksumError wait, resync and retry (RETRIES times)."""
        retry = 0
        while True:
            try:
                return attempt()
            except (DeviceTimeout, ChecksumError) as err:
                if retry >= RETRIES:
                    raise
                retry += 1
                log.debug("%s: %s failed (%s); retry %d of %d", self.name, what, err, retry, RETRIES)
                time.sleep(RETRY_DELAY_S)
                self._resync(link)
