"""A serial device on a pty pair: the base of the motor-controller emulators.

The emulator owns the *master* side of a pseudo-terminal and serves the
device's real bytes on it from its own thread; the driver opens the *slave*
path (``/dev/pts/N``) with pyserial exactly as it would open ``/dev/ttyUSB0``.
A pty has no baud rate; :meth:`PtySerialDevice.pace` (done by ``from_config``,
so in the simulated tank) puts the wire time back (drivers/emulators/wire.py).

Lifecycle and faults:

- :meth:`PtySerialDevice.start` opens the pair (slave raw), starts the thread and returns
  :attr:`PtySerialDevice.port`, the path to open.
- :attr:`PtySerialDevice.port_open` follows whether a driver holds the slave
  open (Linux answers reads on the master with EIO while no one does); the
  hooks ``_on_port_open`` / ``_on_port_close`` let a device react, e.g. the DTR
  auto-reset of an AVR Arduino when the port is opened (hardware-reference §7.3).
  Bytes the device writes while the port is closed are lost: pyserial flushes
  input when it opens a port, as the kernel drops them on real hardware.
- :meth:`PtySerialDevice.unplug` closes the master: the kernel hangs the pty
  up, so the driver's writes fail with EIO, its reads return nothing, and the ``/dev/pts/N`` node disappears,
  as a pulled USB cable makes ``/dev/ttyACM0`` vanish. The device model keeps
  running (a battery-powered controller's own serial timeout still stops the
  motors); a subclass decides what losing the link does to it.
- :meth:`PtySerialDevice.replug` opens a **new** pty pair. The kernel picks the
  number, so the slave path is usually different (the old number stays taken
  while the driver still holds its descriptor). Pass ``link=PATH`` to get a
  stable name: the emulator keeps a symlink at ``PATH`` pointing at the current
  slave (like udev's ``/dev/serial/by-id/...``), removes it on unplug and
  re-creates it on replug, so the same path works again.
- Reply faults, each for the next ``n`` replies: :meth:`drop_next_reply`
  (nothing sent: a missing ack), :meth:`corrupt_next_reply` (checksum made
  wrong, device-specific), :meth:`truncate_next_reply` (only the first half
  sent), :meth:`prefix_next_reply` (extra bytes, e.g. a stale line, just
  before the next reply), :meth:`delay_next_reply` (sent late, those after it queued behind). Line
  noise the other way: :meth:`corrupt_next_request` flips a bit in
  the middle byte of the next ``n`` chunks the driver writes.

Wake-ups (in the simulated tank the emulator runs in the agent's process): the server thread
sleeps until the driver writes, a reply or timer is due, or a test control or ``close`` wakes it;
no periodic timeout while a driver holds the port (``OPEN_POLL_S`` only while none does). A
request is handed to the device in the pass that reads it, stamped with the time its last byte
arrives on the paced wire (the device's timers and its reply's timing run from that stamp): two
passes per transaction (request read, reply written) instead of three. The device's state thus
changes up to one request's wire time before that stamp (0.7 ms for a RoboClaw duty packet at
115200 baud), while the driver still gets every reply no earlier than both wire times plus the
device's reply latency after its write (drivers/emulators/wire.py).

The emulator keeps a bounded record of what it received (:meth:`received`),
counts events in :attr:`stats` (``passes``: the server thread's wake-ups), and lets tests wait on its state without
polling (:meth:`wait_for`). Thread-safe: every device state change happens
under one lock.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import logging
import os
import select
import threading
import time
import tty
from collections.abc import Callable

from drivers.emulators.faults import FaultInjection
from drivers.emulators.tank import TankPhysics
from drivers.emulators.wire import SerialWire

log = logging.getLogger(__name__)

#: Longest sleep of the server thread with no timer due while unplugged, s (an open port: no timeout).
IDLE_WAIT_S = 0.1
#: How often the server thread looks for a driver opening the port while none has it, s.
OPEN_POLL_S = 0.01
#: Most bytes read from the master in one call.
READ_CHUNK = 4096


class PtySerialDevice(FaultInjection):
    """Base of a serial device served on the master side of a pty pair.

    Subclasses implement :meth:`_on_bytes` (parse what the driver wrote, reply
    with :meth:`_send`) and may implement :meth:`_on_time` (timers: the device's
    own serial timeout), :meth:`_on_power_on`, :meth:`_on_unplug`,
    :meth:`_on_replug`, :meth:`_on_port_open`, :meth:`_on_port_close` and
    :meth:`_corrupt`. Hooks run on the server thread (or
    the caller of start/unplug/replug) with the lock held.

    Args:
        physics: the simulated tank the device drives; a private one when None.
        link: a path kept as a symlink to the current slave (stable across replug), or None.
        record: how many received packets :meth:`received` keeps.
    """

    def __init__(self, physics: TankPhysics | None = None, *, link: str | None = None, record: int = 64) -> None:
        if record < 1:
            raise ValueError(f"record must be >= 1, got {record}")
        self.physics = physics if physics is not None else TankPhysics()
        self.stats: collections.Counter[str] = collections.Counter()
        self._link = link
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._master: int | None = None
        self._port_open = False
        self._slave_path = ""
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._closed = False
        self._received: collections.deque[bytes] = collections.deque(maxlen=record)
        self._faults = {"drop": 0, "corrupt": 0, "truncate": 0, "noise": 0, "delay": 0}
        self._delay_s = 0.0
        self._late_at: float | None = None
        self._prefixes: collections.deque[bytes] = collections.deque()
        self.wire = SerialWire(None)
        self._now = 0.0      # when the request being handled arrived (replies are timed from it), s

    # ------------------------------------------------------------------ lifecycle
    @property
    def port(self) -> str:
        """What a driver opens: the ``link`` path when given, else the current slave path."""
        return self._link or self._slave_path

    def pace(self, baud: int | None, reply_latency_s: float = 0.0) -> None:
        """Keep wire time: ``baud`` 8N1 both ways and ``reply_latency_s`` before each reply (None: no pacing)."""
        with self._lock:
            self.wire = SerialWire(baud, reply_latency_s)

    @property
    def slave_path(self) -> str:
        """The current ``/dev/pts/N`` (empty before start)."""
        return self._slave_path

    @property
    def plugged(self) -> bool:
        """True while a pty pair is open."""
        return self._master is not None

    @property
    def port_open(self) -> bool:
        """True while a driver holds the slave side open (as last seen by the server thread)."""
        return self._port_open

    def start(self) -> str:
        """Power the device on, open the pty pair and serve it. Returns :attr:`port`."""
        with self._lock:
            if self._closed:
                raise RuntimeError(f"{type(self).__name__}: start() after close()")
            if self._thread is not None:
                return self.port
            self._plug()
            self._on_power_on(time.monotonic())
            self._thread = threading.Thread(target=self._serve, name=f"{type(self).__name__}-pty", daemon=True)
            self._thread.start()
            return self.port

    def unplug(self) -> None:
        """Pull the cable: close the master so the driver's I/O fails. Idempotent."""
        with self._lock:
            if self._master is None:
                return
            os.close(self._master)
            self._master = None
            self._port_open = False
            self.wire.clear()
            if self._link:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self._link)
            self.stats["unplugs"] += 1
            log.debug("%s: unplugged %s", type(self).__name__, self._slave_path)
            self._on_unplug(time.monotonic())
            self._wake()

    def replug(self) -> str:
        """Plug the cable back in on a new pty pair; returns :attr:`port` (see the module doc)."""
        with self._lock:
            if self._closed or self._thread is None:
                raise RuntimeError(f"{type(self).__name__}: replug() needs a started, open emulator")
            if self._master is None:
                self._plug()
                self.stats["replugs"] += 1
                self._on_replug(time.monotonic())
                self._wake()
            return self.port

    def close(self) -> None:
        """Stop serving and close the pty pair. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._stop.set()
            self._wake()
            thread = self._thread
        if thread is not None:
            thread.join(timeout=5.0)
        self.unplug()
        with self._lock:
            for fd in (self._wake_r, self._wake_w):
                os.close(fd)

    def __enter__(self) -> PtySerialDevice:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _plug(self) -> None:
        master, slave = os.openpty()
        try:
            tty.setraw(slave)  # no echo, no CR/LF translation even before the driver configures the port
            self._slave_path = os.ttyname(slave)
        finally:
            os.close(slave)
        os.set_blocking(master, False)
        self._master = master
        self._port_open = False
        if self._link:
            tmp = f"{self._link}.{os.getpid()}.tmp"
            os.symlink(self._slave_path, tmp)
            os.replace(tmp, self._link)
        log.debug("%s: serving %s", type(self).__name__, self.port)

    def _wake(self) -> None:
        with contextlib.suppress(OSError):  # the pipe is full: the thread is already woken
            os.write(self._wake_w, b"\0")

    # ------------------------------------------------------------------ server thread
    def _serve(self) -> None:
        due: float | None = None
        wake_r, monotonic, wait_readable = self._wake_r, time.monotonic, select.select
        while not self._stop.is_set():
            # read without the lock: unplug/replug/close change these under it and wake this thread,
            # and the state is looked at again under the lock below
            master, port_open = self._master, self._port_open
            fds = [wake_r, master] if master is not None and port_open else [wake_r]
            # a driver opening the port is seen only by polling (EIO until then); everything else
            # that needs this thread (bytes written, unplug/replug/close, test controls) wakes it
            cap = None if port_open else OPEN_POLL_S if master is not None else IDLE_WAIT_S
            wait = cap if due is None else max(0.0, due - monotonic())
            if cap is not None and wait is not None:
                wait = min(cap, wait)
            try:
                readable = wait_readable(fds, (), (), wait)[0]
            except (OSError, ValueError):  # a descriptor closed by unplug() meanwhile
                readable = []
            with self._lock:
                if self._stop.is_set():
                    break
                self.stats["passes"] += 1
                due = self._serve_once(readable, monotonic())

    def _serve_once(self, readable: list[int], now: float) -> float | None:
        """One pass of the server thread (lock held): read, carry, timers; returns the next due time."""
        if self._wake_r in readable:
            self._drain_wake()
        self._now = now
        if self._master is not None and (self._master in readable or not self._port_open):
            data = self._noisy(self._read_master(now))
            if data:
                self.wire.received(data, now)
        wire = self.wire
        if wire.due(now) or wire.holding():
            self._carry(now)
        due = self._on_time(now)
        wire_due = wire.next_due()
        self._changed.notify_all()
        return wire_due if due is None else due if wire_due is None else min(due, wire_due)

    def _carry(self, now: float) -> None:
        """Hand every request read to the device, stamped with its arrival on the wire (see the module
        docstring), and write the replies that are due."""
        for arrived, data in self.wire.requests():
            self._now = arrived
            self._on_bytes(data, arrived)
        self._now = now
        for data in self.wire.sent(now):
            self._write_master(data)

    def _drain_wake(self) -> None:
        try:
            while os.read(self._wake_r, 64):
                pass
        except BlockingIOError:
            pass

    def _read_master(self, now: float) -> bytes:
        """Read what the driver wrote; EIO means no one holds the slave open."""
        data, port_open = b"", True
        try:
            data = os.read(self._master, READ_CHUNK)  # type: ignore[arg-type]
        except BlockingIOError:
            pass
        except OSError as err:
            port_open = False
            if err.errno != errno.EIO:
                log.debug("%s: reading the pty master: %s", type(self).__name__, err)
        if port_open != self._port_open:
            self._port_open = port_open
            log.debug("%s: port %s by the driver", type(self).__name__, "opened" if port_open else "closed")
            if port_open:
                self._on_port_open(now)
            else:
                self._on_port_close(now)
        return data

    def _send(self, data: bytes) -> None:
        """Write a reply to the driver, applying the pending reply faults. Call with the lock held."""
        if self._faults["drop"]:
            self._faults["drop"] -= 1
            self.stats["dropped_replies"] += 1
            return
        if self._faults["truncate"]:
            self._faults["truncate"] -= 1
            self.stats["truncated_replies"] += 1
            data = data[: len(data) // 2]
        elif self._faults["corrupt"]:
            self._faults["corrupt"] -= 1
            self.stats["corrupted_replies"] += 1
            data = self._corrupt(data)
        if self._prefixes:
            data = self._prefixes.popleft() + data
        if not data or self._master is None:
            return
        late = self._late(self._now)
        if self.wire.baud is not None or late is not None or self.wire.sending():   # in order behind a late one
            self.wire.reply(data, self._now if late is None else late)
            if threading.current_thread() is not self._thread:
                self._wake()       # sent from a test or hook thread: the server writes it when due
            return
        self._write_master(data)

    def _write_master(self, data: bytes) -> None:
        if self._master is None:
            return
        try:
            os.write(self._master, data)
        except BlockingIOError:
            self.stats["overflow"] += 1
            log.debug("%s: driver not reading; reply of %d bytes dropped", type(self).__name__, len(data))
        except OSError as err:
            log.debug("%s: writing the pty master: %s", type(self).__name__, err)

    def _record(self, packet: bytes) -> None:
        """Remember a received packet (bounded). Call with the lock held."""
        self._received.append(bytes(packet))

    # ------------------------------------------------------------------ hooks
    def _on_bytes(self, data: bytes, now: float) -> None:
        """Bytes the driver wrote arrived at ``now`` (monotonic s). The base ignores them."""
        self.stats["ignored_bytes"] += len(data)

    def _on_time(self, now: float) -> float | None:
        """Run timers; return the monotonic time the next one is due, or None."""
        return None

    def _on_power_on(self, now: float) -> None:
        """The device was powered on (at :meth:`start`)."""

    def _on_unplug(self, now: float) -> None:
        """The link was lost (the device keeps its power unless a subclass says otherwise)."""

    def _on_replug(self, now: float) -> None:
        """The link is back."""

    def _on_port_open(self, now: float) -> None:
        """A driver opened the port."""

    def _on_port_close(self, now: float) -> None:
        """The driver closed the port (or its process died)."""

    def _corrupt(self, data: bytes) -> bytes:
        """A reply whose checksum no longer matches: the last byte with its low bit flipped."""
        return data[:-1] + bytes([data[-1] ^ 0x01]) if data else data

    # ------------------------------------------------------------------ test API (faults: FaultInjection)
    def wait_for(self, predicate: Callable[[], bool], timeout_s: float) -> bool:
        """Block until ``predicate()`` (checked after every device event) is true or ``timeout_s`` passes.

        Returns:
            The last value of ``predicate()``.
        """
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while not predicate():
                left = deadline - time.monotonic()
                if left <= 0:
                    return bool(predicate())
                self._changed.wait(min(left, IDLE_WAIT_S))
            return True
