"""Video budgets: encoder CPU share, wire size of one message, and per-link pacing.

- :class:`CpuBudget`: the encoders may use ``share`` of one core over a sliding
  window; above it, a consumer waits (frames captured meanwhile are skipped:
  frames are dropped before the control loop is starved).
- :func:`socketio_wire_size`: bytes python-socketio really puts on the wire for
  one event (the Socket.IO packet encoded by ``socketio.packet.Packet``: the text
  part with JSON escapes, ``\\uXXXX`` for non-ASCII, plus each binary attachment raw,
  as the websocket transport sends them).
- :func:`fit_ladder`: the formats tried, in order, to bring a frame under a size
  (quality first, then scale).
- :class:`SendBudget`: per link, bytes/s and share of one core for the whole send path of
  video (encode + pack + send); a frame that would go over it is dropped (the stream's
  delivered fps falls), never delayed.
- :class:`LinkPacer`: per link and camera, at most one frame in flight, frames
  older than ``max_age_s`` never sent, throughput measured and the ladder level
  adapted down (slow link, oversize frames) and back up.
- :class:`LinkRate`: per link, the bytes per second video may use, learned from how long
  frames take to drain (cut on a slow drain, doubled every clean second), so frames are
  paced and sized below what the path carries and nothing piles up in buffers the sender
  cannot see (a router's, a proxy's) ahead of the newest frame or the control socket.
"""

from __future__ import annotations

import functools
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from agent.video.frames import FrameFormat

__all__ = ["CpuBudget", "LinkPacer", "LinkRate", "SendBudget", "fit_ladder", "fit_to_link", "socketio_wire_size",
           "json_wire_size"]

#: JPEG qualities tried (each capped by the requested one) before the frame is scaled down.
QUALITY_STEPS = (60, 40)
#: Scale factors tried after the quality steps, at the last quality.
SCALE_STEPS = (0.75, 0.5, 0.35, 0.25)
#: Most ladder steps one slow delivery moves a camera down.
MAX_STEP = 3
#: Smallest side, px, a frame is scaled down to.
MIN_SIDE_PX = 64
#: Highest ladder level a pacer goes to (the longest ladder has 1 + 2 + 4 steps): a long slow
#: spell must not leave a level that takes minutes of good frames to climb back from.
MAX_LEVEL = len(QUALITY_STEPS) + len(SCALE_STEPS)


class CpuBudget:
    """Share of one core the encoders may use, over a sliding window. Thread-safe.

    Args:
        share: fraction of one core, 0 < share <= 1 (1 or more: no limit).
        window_s: averaging window, s.
        clock: monotonic clock, s.
    """

    def __init__(self, share: float = 0.3, window_s: float = 1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.share = share
        self.window_s = window_s
        self._clock = clock
        self._lock = threading.Lock()
        self._spent: deque[tuple[float, float]] = deque()   # (end time, seconds of encoding)
        self._total = 0.0
        self.waits = 0

    def _trim(self, now: float) -> None:
        while self._spent and self._spent[0][0] <= now - self.window_s:
            self._total -= self._spent.popleft()[1]

    def spend(self, seconds: float) -> None:
        """Record one encode that took ``seconds`` of CPU, ending now."""
        with self._lock:
            now = self._clock()
            self._spent.append((now, seconds))
            self._total += seconds
            self._trim(now)

    def wait_s(self) -> float:
        """Seconds to wait before the next encode keeps within the share (0: go now)."""
        if self.share >= 1.0:
            return 0.0
        with self._lock:
            now = self._clock()
            self._trim(now)
            allowed = self.share * self.window_s
            excess, wait = self._total - allowed - 1e-9, 0.0
            for end, spent in self._spent:
                if excess <= 0:
                    break
                excess -= spent
                wait = end + self.window_s - now
            if wait > 0:
                self.waits += 1
            return max(0.0, wait)

    def used_share(self) -> float:
        """Share of one core used by encoding over the last window."""
        with self._lock:
            self._trim(self._clock())
            return self._total / self.window_s


class SendBudget:
    """What one link may spend on video over a sliding window: wire bytes and CPU. Event-loop only.

    Args:
        max_bytes_per_s: wire bytes per second (None: no limit).
        cpu_share: share of one core for encode + pack + send of this link's frames (1 or more:
            no limit). The encode of a frame counts in full for every link sending it.
        window_s: averaging window, s. clock: monotonic clock, s.

    Attributes:
        dropped: frames refused, in all.
    """

    def __init__(self, max_bytes_per_s: float | None = None, cpu_share: float = 1.0, window_s: float = 1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.max_bytes_per_s = max_bytes_per_s
        self.cpu_share = cpu_share
        self.window_s = window_s
        self._clock = clock
        self._spent: deque[tuple[float, int, float]] = deque()     # (time, bytes, cpu s)
        self._bytes = 0
        self._cpu = 0.0
        self.dropped = 0

    def _trim(self) -> None:
        horizon = self._clock() - self.window_s
        while self._spent and self._spent[0][0] <= horizon:
            _, nbytes, cpu = self._spent.popleft()
            self._bytes -= nbytes
            self._cpu -= cpu

    def admit(self, nbytes: int, cpu_s: float) -> bool:
        """True when a frame expected to cost ``nbytes`` and ``cpu_s`` fits the window; else counts a
        drop. The first frame of an empty window always fits (a frame bigger than the budget
        still goes out, at most once per window)."""
        self._trim()
        if not self._spent:
            return True
        fits_bytes = self.max_bytes_per_s is None or self._bytes + nbytes <= self.max_bytes_per_s * self.window_s
        fits_cpu = self.cpu_share >= 1.0 or self._cpu + cpu_s <= self.cpu_share * self.window_s
        if fits_bytes and fits_cpu:
            return True
        self.dropped += 1
        return False

    def spend(self, nbytes: int, cpu_s: float) -> None:
        """Record a frame sent now: ``nbytes`` on the wire, ``cpu_s`` of CPU (encode + pack + send)."""
        self._spent.append((self._clock(), nbytes, cpu_s))
        self._bytes += nbytes
        self._cpu += cpu_s
        self._trim()

    @classmethod
    def from_config(cls, video: Any) -> SendBudget:
        """The budget of one link from the ``video`` config section (``link_max_mib_per_s``, ``link_cpu_share``)."""
        return cls(video.link_max_mib_per_s * 1024 * 1024, video.link_cpu_share)

    def usage(self) -> dict[str, float]:
        """``{"bytes_per_s", "cpu_share"}`` over the window."""
        self._trim()
        return {"bytes_per_s": round(self._bytes / self.window_s), "cpu_share": round(self._cpu / self.window_s, 3)}


def socketio_wire_size(event: str, data: Any, namespace: str = "/robot") -> int:
    """Bytes python-socketio sends for ``emit(event, data)`` on ``namespace``, websocket transport.

    The text packet counts its UTF-8 length (JSON escapes as python-socketio's ``json``
    writes them) plus one byte of Engine.IO packet type; binary attachments count raw.
    """
    from socketio import packet

    pkt = packet.Packet(packet.EVENT, data=[event, data], namespace=namespace)
    encoded = pkt.encode()
    parts = encoded if isinstance(encoded, list) else [encoded]
    size = 0
    for part in parts:
        size += len(part) if isinstance(part, bytes) else len(part.encode("utf-8")) + 1
    return size


def json_wire_size(text: str) -> int:
    """Bytes of ``text`` as a JSON string value on the wire (python-socketio: ``ensure_ascii``)."""
    from socketio import packet

    return len(packet.Packet.json.dumps(text, separators=(",", ":")).encode("utf-8"))


def fit_ladder(fmt: FrameFormat, width: int, height: int) -> list[FrameFormat]:
    """Formats to try, in order, to make a ``width`` x ``height`` frame smaller than ``fmt`` gives.

    Level 0 is ``fmt`` itself; then lower JPEG qualities; then smaller sizes (aspect kept).
    Raw RGBA only scales. Built once per (format, size) (formats are frozen): a link asks it for
    every frame.
    """
    return list(_ladder(fmt, width, height))


@functools.lru_cache(maxsize=64)
def _ladder(fmt: FrameFormat, width: int, height: int) -> tuple[FrameFormat, ...]:
    out_w, out_h = fmt.output_size(width, height)
    ladder = [fmt]
    quality = fmt.quality
    if fmt.codec == "jpeg":
        for q in QUALITY_STEPS:
            if q < quality:
                quality = q
                ladder.append(replace(fmt, quality=q))
    for scale in SCALE_STEPS:
        w, h = round(out_w * scale), round(out_h * scale)
        if min(w, h) < MIN_SIDE_PX:
            break
        ladder.append(replace(fmt, width=w, height=h, quality=quality))
    return tuple(ladder)


class LinkPacer:
    """Pacing of one camera on one link: ladder level, age limit, throughput. Event-loop only.

    Args:
        max_age_s: a frame older than this (capture -> handed to the socket) is never sent.
        period_s: the link's normal period between frames, s.
        clock: monotonic clock, s.

    The level is the :func:`fit_ladder` index the next frame starts from: raised when a
    frame did not fit or the link took longer than the period to drain it (one step per
    doubling of the period, at most :data:`MAX_STEP`), lowered again
    after ``RECOVER_AFTER`` frames in a row that went out within half the period.
    """

    RECOVER_AFTER = 10

    def __init__(self, max_age_s: float, period_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.max_age_s = max_age_s
        self.period_s = period_s
        self._clock = clock
        self.level = 0
        self._good = 0
        self.throughput_bps = 0.0
        self.ages: deque[float] = deque(maxlen=512)
        self.sent = 0
        self.too_old = 0
        self.dropped = 0
        self.last_bytes = 0     # size of the last frame :func:`fit_to_link` gave, bytes

    def fresh(self, t_mono_s: float) -> bool:
        """True when a frame captured at ``t_mono_s`` may still be sent; counts the stale ones."""
        if t_mono_s and self._clock() - t_mono_s > self.max_age_s:
            self.too_old += 1
            self.slower()
            return False
        return True

    def handed(self, t_mono_s: float, at_s: float | None = None) -> None:
        """A frame captured at ``t_mono_s`` was handed to the socket at ``at_s`` (default now)."""
        self.sent += 1
        if t_mono_s:
            self.ages.append((self._clock() if at_s is None else at_s) - t_mono_s)

    def drained(self, nbytes: int, seconds: float) -> None:
        """The link took ``seconds`` to write ``nbytes``: update throughput and the level."""
        if seconds > 0:
            bps = nbytes / seconds
            self.throughput_bps = bps if not self.throughput_bps else 0.7 * self.throughput_bps + 0.3 * bps
        if seconds > self.period_s:
            # one step per doubling of the period, at most MAX_STEP at once: a 4 s first frame on a
            # slow link moves three steps, not one per frame
            self.slower(min(MAX_STEP, max(1, int(seconds / self.period_s).bit_length() - 1)))
        elif seconds < self.period_s / 2:
            self._good += 1
            if self._good >= self.RECOVER_AFTER and self.level > 0:
                self.level -= 1
                self._good = 0

    def slower(self, steps: int = 1) -> None:
        """Start the next frame ``steps`` ladder steps smaller (at most :data:`MAX_LEVEL`)."""
        self.level = min(MAX_LEVEL, self.level + steps)
        self._good = 0

    def age_stats(self) -> dict[str, float | None]:
        """``{"p50_s", "p95_s", "p99_s", "max_s"}`` of recent frame ages (None before any)."""
        if not self.ages:
            return {"p50_s": None, "p95_s": None, "p99_s": None, "max_s": None}
        ages = sorted(self.ages)
        pick = lambda p: round(ages[min(len(ages) - 1, int(p * len(ages)))], 4)  # noqa: E731
        return {"p50_s": pick(0.5), "p95_s": pick(0.95), "p99_s": pick(0.99), "max_s": round(ages[-1], 4)}


class LinkRate:
    """Bytes per second one link's video may use, learned from drains (AIMD). Event-loop only.

    A frame that took longer than ``slow_s`` to drain (handed to the socket until the transport
    and the kernel wrote it) says the path is full: the rate becomes ``backoff`` times what that
    frame drained at (at most one cut per ``slow_s``; the drain includes bytes queued ahead of it,
    so the cut errs low). Without a slow drain it grows: by a quarter each second within
    ``settle_s`` of the last cut (near the path's rate), doubling every half second after that
    (the path got better); above ``max_bps`` the link counts as unlimited again (None). The sender
    paces frames to the rate (a frame of ``n`` bytes takes ``n / rate`` s of the link) and sizes
    them to at most ``frame_s`` s of it.

    Args:
        slow_s: a drain longer than this is a full path, s. backoff: share of the drained rate kept.
        frame_s: largest frame, in seconds of the link at the rate. max_bps: unlimited above, bytes/s.
        min_bps: the rate never falls below this, bytes/s. settle_s: slow growth this long after a
        cut, s. clock: monotonic clock, s.

    Attributes:
        bps: the rate now, bytes/s; None: unlimited (no slow drain seen, or recovered).
        cuts: slow drains that lowered the rate, in all.
    """

    def __init__(self, slow_s: float = 0.1, backoff: float = 0.7, frame_s: float = 0.25,
                 max_bps: float = 8e6, min_bps: float = 4000.0, settle_s: float = 2.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.slow_s, self.backoff, self.frame_s, self.settle_s = slow_s, backoff, frame_s, settle_s
        self.max_bps, self.min_bps = max_bps, min_bps
        self._clock = clock
        self.bps: float | None = None
        self.cuts = 0
        self._changed = self._cut = clock()

    def drained(self, nbytes: int, seconds: float) -> None:
        """A frame of ``nbytes`` took ``seconds`` to drain: cut the rate, or grow it after a clean second."""
        now = self._clock()
        if seconds > self.slow_s and nbytes > 0:
            if now - self._changed >= self.slow_s or self.bps is None:
                drained_at = nbytes / seconds
                self.bps = max(self.min_bps, self.backoff * min(drained_at, self.bps or drained_at))
                self._changed = self._cut = now
                self.cuts += 1
            return
        if self.bps is None:
            return
        if now - self._cut > self.settle_s:       # no cut for a while: the path got better, probe fast
            grow, every = 2.0, 0.5
        else:                                     # near the path's rate: creep up
            grow, every = 1.25, 1.0
        if now - self._changed >= every:
            self.bps *= grow
            self._changed = now
            if self.bps > self.max_bps:
                self.bps = None

    def frame_bytes(self) -> int | None:
        """Largest frame to send now, bytes (None: any)."""
        return None if self.bps is None else max(1, int(self.bps * self.frame_s))

    def spacing_s(self, nbytes: int) -> float:
        """Seconds of the link a frame of ``nbytes`` uses at the rate (0 when unlimited)."""
        return 0.0 if self.bps is None else nbytes / self.bps


async def fit_to_link(hub: Any, frame: Any, fmt: FrameFormat, rate: LinkRate,
                      pacer: LinkPacer) -> tuple[Any, bool]:
    """``frame`` encoded to fit what the link carries now: ``fmt`` while ``rate`` is unlimited, else
    at most ``rate.frame_bytes()`` long, from the pacer's ladder level (one step bigger when the last
    frame was well under the limit); the pacer's level follows.

    Args:
        hub: the :class:`agent.video.VideoHub` (``encoded``, ``encoded_within``). frame: a hub Frame.
        fmt: the wanted format. rate, pacer: the link's :class:`LinkRate` and the stream's :class:`LinkPacer`.

    Returns:
        ``(encoded, too_big)``: the EncodedFrame (None on hub close or an encoder failure) and
        whether even the smallest ladder step was over the limit (it is returned anyway: the
        caller spaces it out to the rate).
    """
    limit = rate.frame_bytes()
    if limit is None:       # the path carries what we send: the asked format
        pacer.level = 0
        out = await hub.encoded(frame, fmt)
        pacer.last_bytes = len(out.data) if out is not None else 0
        return out, False
    start = pacer.level
    if start and 0 < (pacer.last_bytes or limit) < limit // 2:
        start -= 1
    out, level = await hub.encoded_within(frame, fmt, limit, start)
    too_big = out is None
    if too_big:
        out, level = await hub.encoded_within(frame, fmt, 1 << 62, MAX_LEVEL)
    if out is not None:
        pacer.level = level
        pacer.last_bytes = len(out.data)
    return out, too_big
