"""A console tab's video that follows its link: what the path carries, newest frame first.

One tab's WebSocket carries its video (binary JPEG messages) and its control traffic (``state``
10 times a second, ``control``, ``error``) down the same path, and its key presses and STOP up
it. :class:`TabVideo` sends a frame only when

- the page showed the previous one (it answered ``{"type": "frame"}``: a slow page gets fewer
  frames), and
- the previous one has drained: the transport's write buffer and the kernel's send queue
  (``SIOCOUTQ``, bytes not yet acknowledged by the peer: :func:`agent.video.links.transport_backlog`)
  are empty, so there is at most one frame on the path and it is always the newest, and
- the link had time to carry it: each frame is followed by ``size / rate`` s of the link at the
  rate :class:`agent.video.budget.LinkRate` learned from how long frames took to drain.

The frame is encoded to at most a quarter second of the link at that rate (lower JPEG quality,
then a smaller size: :func:`agent.video.budget.fit_to_link`, the stream's
:class:`~agent.video.budget.LinkPacer` level), so a ``state`` message (or an ``error`` answer)
written meanwhile waits behind at most that much video, and the link keeps idle time for it.
Up the path nothing competes: the page's commands never wait for video.

Every frame carries its capture time: a JPEG comment segment (COM, ``FF FE``) right after the
start-of-image marker holding ``{"seq": N, "t": UNIX_S}`` (browsers ignore it;
:func:`capture_stamp` reads it back).
"""

from __future__ import annotations

import asyncio
import json
import logging
import struct
import time
from collections.abc import Callable
from typing import Any

from agent.video.budget import LinkPacer, LinkRate, fit_to_link
from agent.video.frames import EncodedFrame, FrameFormat
from agent.video.links import transport_backlog, wait_drained

log = logging.getLogger(__name__)

#: How long one wait for a camera frame lasts before it is retried, s.
FRAME_WAIT_S = 1.0
#: A frame older than this (capture -> handed to the socket) is not sent, s.
MAX_AGE_S = 0.5
#: Longest wait for a frame to drain before the next is considered, s (the drain time so far
#: counts as a slow drain: the rate is cut).
DRAIN_WAIT_S = 2.0
#: The JPEG start-of-image and comment markers.
SOI, COM = b"\xff\xd8", b"\xff\xfe"


def stamped(data: bytes | memoryview, seq: int, t_unix_s: float) -> bytes:
    """The JPEG ``data`` with a comment segment after its start-of-image: ``{"seq": seq, "t": t_unix_s}``.

    Raises:
        ValueError: ``data`` does not start with the JPEG start-of-image marker.
    """
    view = memoryview(data)
    if bytes(view[:2]) != SOI:
        raise ValueError("not a JPEG: no start-of-image marker")
    text = json.dumps({"seq": seq, "t": round(t_unix_s, 6)}, separators=(",", ":")).encode("ascii")
    return b"".join((SOI, COM, struct.pack(">H", len(text) + 2), text, view[2:]))


def capture_stamp(jpeg: bytes) -> dict[str, Any] | None:
    """``{"seq": int, "t": Unix s}`` of a console frame (:func:`stamped`), or None without a stamp."""
    if len(jpeg) < 6 or jpeg[:2] != SOI or jpeg[2:4] != COM:
        return None
    (length,) = struct.unpack(">H", jpeg[4:6])
    try:
        stamp = json.loads(jpeg[6:4 + length])
    except ValueError:
        return None
    return stamp if isinstance(stamp, dict) and "t" in stamp else None


class TabVideo:
    """The frames of one tab, fitted and paced to its link. Event-loop only.

    Args:
        hub: the VideoHub (``next_frame``, ``encoded``, ``encoded_within``).
        camera: hub camera id. fmt: the asked format (``console.width``, ``console.jpeg_quality``).
        transport: the tab's asyncio transport (its write buffer and socket), or None (no drain
            wait: the link counts as unlimited).
        max_fps: most frames per second. clock: monotonic clock, s.

    Attributes:
        rate: the link's :class:`LinkRate`. pacer: the stream's :class:`LinkPacer` (ladder level,
            frame ages capture -> handed to the socket).
        too_big: frames over the rate's frame size even at the smallest step (sent, spaced out).
        bytes_sent: wire payload bytes of frames, in all.
    """

    def __init__(self, hub: Any, camera: str, fmt: FrameFormat, transport: Any, max_fps: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.hub, self.camera, self.fmt, self.transport = hub, camera, fmt, transport
        self.period_s = 1.0 / max_fps
        self.clock = clock
        self.rate = LinkRate(clock=clock)
        self.pacer = LinkPacer(MAX_AGE_S, self.period_s, clock)
        self.too_big = 0
        self.bytes_sent = 0
        self.seq = -1
        self.due = clock()          # no frame before this (the fps cap, the link's share of the last one)

    async def next(self) -> tuple[EncodedFrame, bytes] | None:
        """The newest frame after the last one sent, once it is due, fitted to the link: ``(frame,
        message bytes)``; None on timeout, close, or a frame too old by the time it was encoded
        (the next call then waits a frame period first: a closed hub is not asked in a busy loop)."""
        wait = self.due - self.clock()
        if wait > 0:
            await asyncio.sleep(wait)
        frame = await self.hub.next_frame(self.camera, self.seq, FRAME_WAIT_S)
        if frame is None:       # a closed hub answers at once: the next look waits a period
            self.due = self.clock() + self.period_s
            return None
        self.seq = frame.seq
        out, too_big = await fit_to_link(self.hub, frame, self.fmt, self.rate, self.pacer)
        self.too_big += too_big
        if out is None or not self.pacer.fresh(out.t_mono_s):
            self.due = self.clock() + self.period_s
            return None
        return out, stamped(out.data, out.seq, out.t_unix_s)

    def backlog(self) -> int:
        """Bytes the tab's link still has to deliver (transport buffer + kernel send queue)."""
        return transport_backlog(self.transport)

    async def sent(self, frame: EncodedFrame, nbytes: int, start_s: float) -> None:
        """``frame`` (``nbytes`` on the wire) was handed to the socket at ``start_s``: wait until it
        drained (at most :data:`DRAIN_WAIT_S`), learn the link's rate from it and set when the
        next frame is due."""
        self.pacer.handed(frame.t_mono_s, start_s)
        self.bytes_sent += nbytes
        if self.transport is not None:
            await wait_drained(self.backlog, DRAIN_WAIT_S, clock=self.clock, max_poll_s=0.02)
        took = self.clock() - start_s
        self.pacer.drained(nbytes, took)
        self.rate.drained(nbytes, took)
        log.debug("console video: %d bytes drained in %.3f s; rate %s B/s, level %d", nbytes, took,
                  self.rate.bps, self.pacer.level)
        self.due = max(start_s + self.period_s, self.clock() + self.rate.spacing_s(nbytes))

    def stats(self) -> dict[str, Any]:
        """Frame ages (capture -> handed to the socket: ``p50_s``, ``p95_s``, ``p99_s``, ``max_s``),
        ``sent``, ``too_old``, ``level`` (ladder step), ``link_Bps`` (the rate learned, bytes/s;
        None: unlimited), ``rate_cuts``, ``too_big``, ``bytes_sent``."""
        return {**self.pacer.age_stats(), "sent": self.pacer.sent, "too_old": self.pacer.too_old,
                "level": self.pacer.level, "link_Bps": None if self.rate.bps is None else round(self.rate.bps),
                "rate_cuts": self.rate.cuts, "too_big": self.too_big, "bytes_sent": self.bytes_sent}
