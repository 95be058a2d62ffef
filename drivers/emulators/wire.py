"""Wire time for the emulators: a serial line paced at its baud rate, an I2C bus at its clock.

A pty or a fake SMBus moves bytes as fast as two threads run, so a driver
measured against a bare emulator looks faster than the wire allows. These
helpers put the wire back:

- :class:`SerialWire` stamps what the driver wrote with the time its last byte
  would have arrived at ``baud`` (8N1: 10 bits per byte, drivers.serialport.transfer_s)
  and hands it over at once with that stamp (:meth:`SerialWire.requests`: the pty emulators,
  drivers/emulators/pty.py, act on a request when they read it, one wake-up less per
  transaction), and holds each reply until the device's reply latency plus the reply's own
  wire time have passed after that stamp; one direction's bytes never overlap (a UART sends
  one byte at a time), the two directions run at once (full duplex).
- :func:`i2c_transfer_s` is the time of one SMBus transaction at the bus clock:
  9 clocks per byte (8 data bits + ACK) plus a start, a stop and the address
  byte (and a repeated start and the address again for a read).

Sources: docs hardware-reference §1.1 (RoboClaw 8N1), §2.1 (Sabertooth 8N1),
§3.1 / §5.1 (I2C at up to 400 kHz; the Raspberry Pi default is 100 kHz), §8.2
(the line-protocol firmware answers within 20 ms).
"""

from __future__ import annotations

import collections

from drivers.serialport import transfer_s

#: Clocks per I2C byte: 8 data bits and the ACK/NACK bit.
I2C_CLOCKS_PER_BYTE = 9
#: Clocks of a start or repeated start plus a stop condition, rounded up.
I2C_FRAME_CLOCKS = 2
#: The Raspberry Pi's default I2C clock, Hz (``dtparam=i2c_arm_baudrate`` default).
I2C_DEFAULT_HZ = 100_000


def i2c_transfer_s(data_bytes: int, clock_hz: float, *, read: bool) -> float:
    """Wire time of one SMBus transaction moving ``data_bytes`` after the register byte, s.

    A write is start, address, register, data, stop; a read adds a repeated start and
    the address again before the data.
    """
    frame_bytes = 2 + (1 if read else 0)                  # address + register (+ address again)
    frames = 2 if read else 1
    clocks = (frame_bytes + data_bytes) * I2C_CLOCKS_PER_BYTE + frames * I2C_FRAME_CLOCKS
    return clocks / clock_hz


class SerialWire:
    """One full-duplex 8N1 line at ``baud``; see the module docstring. Not thread-safe (the
    emulator calls it with its lock held).

    Args:
        baud: line rate, bit/s; None passes bytes through at once (a bare pty).
        reply_latency_s: device time from the last byte of a request to the first of its reply, s.
    """

    def __init__(self, baud: int | None, reply_latency_s: float = 0.0) -> None:
        if baud is not None and baud <= 0:
            raise ValueError(f"baud must be positive, got {baud}")
        self.baud = baud
        self.reply_latency_s = reply_latency_s
        self._rx: collections.deque[tuple[float, bytes]] = collections.deque()
        self._tx: collections.deque[tuple[float, bytes]] = collections.deque()
        self._rx_free = 0.0     # when the host -> device direction is idle again, s
        self._tx_free = 0.0     # the same for device -> host

    def received(self, data: bytes, now: float) -> None:
        """The driver wrote ``data`` at ``now`` (monotonic s); it arrives after its wire time."""
        done = max(now, self._rx_free) + self._time(len(data))
        self._rx_free = done
        self._rx.append((done, data))

    def holding(self) -> bool:
        """Requests were received and not yet taken by :meth:`requests`."""
        return bool(self._rx)

    def requests(self) -> list[tuple[float, bytes]]:
        """(arrival time, bytes) of every request received, oldest first, whether its last byte has
        arrived yet or not (the time may be ahead of now): a device that acts on a request when it
        reads it, its clock running from the arrival. Its replies still wait (:meth:`reply`)."""
        out = list(self._rx)
        self._rx.clear()
        return out

    def reply(self, data: bytes, request_done: float) -> None:
        """Queue a reply to a request whose last byte arrived at ``request_done``."""
        done = max(request_done + self.reply_latency_s, self._tx_free) + self._time(len(data))
        self._tx_free = done
        self._tx.append((done, data))

    def sending(self) -> bool:
        """Replies are queued and not all sent yet."""
        return bool(self._tx)

    def sent(self, now: float) -> list[bytes]:
        """Replies whose last byte has left the device by ``now``, oldest first."""
        out = []
        while self._tx and self._tx[0][0] <= now:
            out.append(self._tx.popleft()[1])
        return out

    def next_due(self) -> float | None:
        """Monotonic time of the next arrival or reply, or None."""
        rx, tx = self._rx, self._tx
        if rx and tx:
            return min(rx[0][0], tx[0][0])
        return rx[0][0] if rx else tx[0][0] if tx else None

    def due(self, now: float) -> bool:
        """True when a request's last byte has arrived or a reply is due (:meth:`sent` would return it)
        by ``now``."""
        return bool(self._rx and self._rx[0][0] <= now or self._tx and self._tx[0][0] <= now)

    def clear(self) -> None:
        """Drop what is on the wire (the cable was pulled)."""
        self._rx.clear()
        self._tx.clear()

    def _time(self, n: int) -> float:
        return transfer_s(n, self.baud) if self.baud else 0.0
