"""Big binary WebSocket messages from the client side without long GIL holds on the event loop.

``websockets`` sends one message as one frame: it masks the whole payload into a new
``bytes`` (C speed-up, GIL held), copies it into a ``BytesIO`` and the asyncio transport copies
what the kernel did not take at once into its buffer (GIL held); for an 8.3 MB raw full-HD
frame, measured with py-spy under the ``raw`` bench, ~17 ms of GIL per frame on the event
loop thread, the control thread waiting behind it. :class:`FragmentWriter` sends the same
message as a fragmented one (RFC 6455 5.4: a binary frame, continuation frames, the last
with FIN), each fragment masked with its own fresh key by a numpy XOR (the GIL released while
it runs) into a reused buffer behind its header, written to the transport (one ``write``) only
when its buffer is empty (the
kernel takes it: the copy runs in ``send()``, GIL released). Control frames the library sends
meanwhile (ping, pong, close) may legally sit between fragments. A message once started is
always finished (the write runs as its own task, shielded from the caller's cancellation) or
the connection is closing: the peer never sees half a message followed by another. A message
whose every fragment the transport takes at once (its buffer empty before each: a frame of a
camera stream on a link that keeps up) is written in the caller's own step, without that task,
its lock or a pass of the event loop; the bytes on the wire are the same.

The library's own ``send`` must not be used for data while a writer is attached.
"""

from __future__ import annotations

import asyncio
import math
import secrets
import struct
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from agent.compat import websockets as ws_compat
from agent.video.links import wait_drained

__all__ = ["FRAGMENT_BYTES", "FragmentWriter", "frame_header", "mask_into"]

#: Payload bytes per fragment: short XOR and write steps (~50 us each), few enough per frame (33 for 8.3 MB).
FRAGMENT_BYTES = 256 * 1024
OP_CONTINUATION, OP_BINARY = 0x0, 0x2
#: How often the writer looks whether the transport took the previous fragment, s: first after
#: POLL_S, then when the rest should be gone at the rate seen so far, within POLL_S..MAX_POLL_S (a
#: slow link is not polled 1000 times a second, a fast one is not left idle).
POLL_S = 0.001
MAX_POLL_S = 0.016
#: A payload this short is masked as one Python integer into a new ``bytes`` (a few us, no numpy calls:
#: the stream's ~30-byte frame prefix), a longer one by numpy into the reused buffer; a short fragment
#: goes out in one ``write`` with the fragment after it (one ``send()`` for a prefix and its image).
SMALL_BYTES = 512
#: Room before the payload in the fragment buffer: the longest client frame header (2 + 8 + 4 bytes)
#: and a short fragment before it fit, and the payload starts 16-byte aligned for the word-wise XOR.
HEAD_ROOM = 16 + SMALL_BYTES + 16
_SHORT, _MEDIUM, _LONG = struct.Struct("!BB"), struct.Struct("!BBH"), struct.Struct("!BBQ")


def frame_header(opcode: int, fin: bool, length: int, mask: bytes) -> bytes:
    """The header of one masked (client -> server) frame of ``length`` payload bytes."""
    head1 = (0x80 if fin else 0) | opcode
    if length < 126:
        head = _SHORT.pack(head1, 0x80 | length)
    elif length < 65536:
        head = _MEDIUM.pack(head1, 0x80 | 126, length)
    else:
        head = _LONG.pack(head1, 0x80 | 127, length)
    return head + mask


def mask_bytes(src: bytes | memoryview, mask: bytes) -> bytes:
    """``src`` XOR the 4-byte ``mask`` repeated, as new bytes (one big-integer XOR: for short payloads)."""
    n = len(src)
    key = (mask * (n // 4 + 1))[:n]
    return (int.from_bytes(src, "little") ^ int.from_bytes(key, "little")).to_bytes(n, "little")


def mask_into(src: memoryview, mask: bytes, out: np.ndarray) -> memoryview:
    """XOR ``src`` with the 4-byte ``mask`` repeated into ``out`` (uint8, at least ``len(src)``); the
    masked bytes as a view of ``out``. numpy runs the XOR with the GIL released."""
    n = len(src)
    words = n // 4
    source = np.frombuffer(src, np.uint8, n)
    if words:
        np.bitwise_xor(source[:words * 4].view(np.uint32), np.frombuffer(mask, np.uint32)[0],
                       out=out[:words * 4].view(np.uint32))
    if n > words * 4:       # the last 1-3 bytes
        out[words * 4:n] = np.frombuffer(mask_bytes(src[words * 4:n], mask), np.uint8)
    return memoryview(out)[:n]


class FragmentWriter:
    """Writes whole binary messages as masked fragments onto one client WebSocket connection.

    Args:
        connection: a ``websockets`` asyncio client connection (``transport``, ``protocol.state``).
        fragment_bytes: payload bytes per fragment (a multiple of 4).

    Attributes:
        cpu_s: event-loop CPU seconds spent masking and writing, in all (``time.thread_time``).
    """

    def __init__(self, connection: Any, fragment_bytes: int = FRAGMENT_BYTES) -> None:
        self._conn = connection
        self._size = fragment_bytes - fragment_bytes % 4
        self._buf = np.empty(HEAD_ROOM + self._size, np.uint8)
        self._lock = asyncio.Lock()
        self._tasks = 0             # messages written (or waiting to be) by a task: none -> the caller may write
        self.cpu_s = 0.0

    def open(self) -> bool:
        """The connection still takes data (open, transport not closing)."""
        return ws_compat.is_open(self._conn)

    async def send(self, parts: Sequence[bytes | memoryview]) -> tuple[int, float]:
        """Send ``parts`` joined as one binary message (never copied into one buffer).

        Returns:
            ``(bytes on the wire, event-loop CPU seconds spent)``; ``(0, 0.0)`` when the
            connection closed before the message started.

        Raises:
            ConnectionError: the connection closed in the middle of the message.
        """
        chunks = self._chunks(parts)
        done = 0, 0, 0.0
        if not self._tasks:         # nothing in progress: the fragments the transport takes at once go now
            done = self._write_now(chunks, 0, 0, 0.0)
            if done[0] == len(chunks) or done[0] < 0:
                self.cpu_s += done[2]
                return (done[1], done[2]) if done[0] >= 0 else (0, done[2])
        self._tasks += 1
        task = asyncio.get_running_loop().create_task(self._write(chunks, *done))
        task.add_done_callback(self._ended)     # retrieved even if the caller left
        return await asyncio.shield(task)

    def _ended(self, task: asyncio.Task) -> None:
        self._tasks -= 1
        if not task.cancelled():
            task.exception()

    def _chunks(self, parts: Sequence[bytes | memoryview]) -> list[memoryview]:
        out = []
        for part in parts:
            view = memoryview(part).cast("B") if not isinstance(part, bytes) else memoryview(part)
            out += [view[i:i + self._size] for i in range(0, len(view), self._size)] or [view]
        return out

    async def _write(self, chunks: list[memoryview], index: int, sent: int, cpu: float) -> tuple[int, float]:
        async with self._lock:      # held by the task, not the caller: a cancelled caller never lets
            return await self._fragments(chunks, index, sent, cpu)   # a second message in mid-way

    async def _emptied(self, transport: Any) -> None:
        """Wait until the transport's buffer is empty or the connection closes (adaptive polling:
        :func:`agent.video.links.wait_drained`)."""
        await wait_drained(lambda: transport.get_write_buffer_size() if self.open() else 0, math.inf,
                           poll_s=POLL_S, clock=asyncio.get_running_loop().time, max_poll_s=MAX_POLL_S)

    def _write_now(self, chunks: list[memoryview], index: int, sent: int, cpu: float) -> tuple[int, int, float]:
        """Write ``chunks[index:]`` while the transport's buffer is empty before each, without waiting:
        ``(index of the first fragment not written, bytes sent, CPU s)``; the index is -1 when the
        connection is closed before the first fragment.

        Raises:
            ConnectionError: the connection closed in the middle of the message.
        """
        transport = ws_compat.transport(self._conn)
        last, first, held = len(chunks) - 1, index, b""      # held: a short fragment written with the next
        while index <= last:
            # the connection's state changes only on the loop: once per call, then the transport's closing
            if (index == first or transport.is_closing()) and not self.open():
                if index == 0:
                    return -1, 0, cpu
                raise ConnectionError("video socket closed in the middle of a frame")
            if transport.get_write_buffer_size():
                break
            start = time.thread_time()
            chunk = chunks[index]
            mask = secrets.token_bytes(4)
            header = frame_header(OP_BINARY if index == 0 else OP_CONTINUATION, index == last, len(chunk), mask)
            if len(chunk) <= SMALL_BYTES:
                frame = header + mask_bytes(chunk, mask)
                if held or index == last:
                    transport.write(held + frame)
                    frame = b""
                held = frame
            else:   # [held fragment][header][payload] side by side in the buffer: one write, one send()
                begin = HEAD_ROOM - len(header) - len(held)
                self._buf[begin:HEAD_ROOM] = np.frombuffer(held + header, np.uint8)
                mask_into(chunk, mask, self._buf[HEAD_ROOM:])
                transport.write(memoryview(self._buf)[begin:HEAD_ROOM + len(chunk)])
                held = b""
            cpu += time.thread_time() - start
            sent += len(header) + len(chunk)
            index += 1
        if held:        # the transport took no write since it was held (its buffer is still as checked)
            transport.write(held)
        return index, sent, cpu

    async def _fragments(self, chunks: list[memoryview], index: int = 0, sent: int = 0,
                         cpu: float = 0.0) -> tuple[int, float]:
        transport = ws_compat.transport(self._conn)
        while index < len(chunks):
            await self._emptied(transport)
            index, sent, cpu = self._write_now(chunks, index, sent, cpu)
            if index < 0:
                return 0, cpu
        self.cpu_s += cpu
        return sent, cpu
