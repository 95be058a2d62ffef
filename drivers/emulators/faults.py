"""Fault injection and the received record of a pty serial emulator (drivers/emulators/pty.py).

Mixed into :class:`drivers.emulators.pty.PtySerialDevice`, which owns the state
these methods touch (``_lock``, ``_received``, ``_faults``, ``_prefixes``) and
applies the faults when it reads a request or sends a reply.
"""

from __future__ import annotations

import collections
import threading


class FaultInjection:
    """Test API of a pty emulator: what it received, and faults for its next replies or requests."""

    _lock: threading.RLock
    _received: collections.deque[bytes]
    _faults: dict[str, int]
    _prefixes: collections.deque[bytes]
    _delay_s: float
    _late_at: float | None
    stats: collections.Counter[str]

    def received(self) -> list[bytes]:
        """The last ``record`` packets received, oldest first (including rejected ones)."""
        with self._lock:
            return list(self._received)

    def clear_received(self) -> None:
        """Forget the received packets."""
        with self._lock:
            self._received.clear()

    def drop_next_reply(self, n: int = 1) -> None:
        """Send nothing for the next ``n`` replies (a missing ack / read timeout)."""
        self._add_fault("drop", n)

    def corrupt_next_reply(self, n: int = 1) -> None:
        """Break the checksum of the next ``n`` replies."""
        self._add_fault("corrupt", n)

    def truncate_next_reply(self, n: int = 1) -> None:
        """Send only the first half of the next ``n`` replies (a partial packet)."""
        self._add_fault("truncate", n)

    def prefix_next_reply(self, data: bytes) -> None:
        """Send ``data`` immediately before the next reply (a stale or unsolicited line, garbage)."""
        with self._lock:
            self._prefixes.append(bytes(data))

    def delay_next_reply(self, n: int = 1, delay_s: float = 0.5) -> None:
        """A stall (a slow device, or an emulator thread on a loaded machine): the next ``n`` replies go
        out together ``delay_s`` after the first of their requests arrived, past the driver's reply
        timeout; the replies after them queue behind, in order, as on a UART."""
        if delay_s < 0:
            raise ValueError(f"delay_s must be >= 0, got {delay_s}")
        with self._lock:
            self._delay_s = delay_s
            self._late_at = None
        self._add_fault("delay", n)

    def _late(self, now: float) -> float | None:
        """When a reply to a request that arrived at ``now`` goes out under a pending delay fault, or None."""
        if not self._faults["delay"]:
            return None
        self._faults["delay"] -= 1
        self.stats["delayed_replies"] += 1
        if self._late_at is None:
            self._late_at = now + self._delay_s
        late_at = self._late_at
        if not self._faults["delay"]:
            self._late_at = None
        return late_at

    def corrupt_next_request(self, n: int = 1) -> None:
        """Flip one bit in the middle of the next ``n`` chunks received (noise on the driver's TX line)."""
        self._add_fault("noise", n)

    def _noisy(self, data: bytes) -> bytes:
        """``data`` with one bit flipped in its middle byte while a corrupt_next_request fault is pending."""
        if not data or not self._faults["noise"]:
            return data
        self._faults["noise"] -= 1
        self.stats["corrupted_requests"] += 1
        mid = len(data) // 2
        return data[:mid] + bytes((data[mid] ^ 0x01,)) + data[mid + 1:]

    def _add_fault(self, kind: str, n: int) -> None:
        if n < 0:
            raise ValueError(f"fault count must be >= 0, got {n}")
        with self._lock:
            self._faults[kind] += n

