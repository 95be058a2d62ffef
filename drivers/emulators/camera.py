"""Test-pattern camera with the ``cv2.VideoCapture`` surface the camera driver uses.

:class:`PatternCapture` stands in for a V4L2 webcam: the driver sets width,
height, fps, FOURCC and buffer size on it and reads back what it accepted
(hardware-reference §7.4: buffer sizes outside 1..10 are refused, an unknown
FOURCC keeps the previous one). Each :meth:`PatternCapture.read` returns a new
BGR frame: colour bars, a box moving one step per frame, and the wall-clock
time and frame counter drawn in the top rows, so consecutive frames always
differ. Reads are paced at the configured fps, like a real device.

Fault injection for the video hub's supervision: :meth:`~PatternCapture.freeze`
(the same frame forever), :meth:`~PatternCapture.block` (``read`` hangs until
:meth:`~PatternCapture.unblock` or ``release``), :meth:`~PatternCapture.fail`
(``read`` returns ``(False, None)``). :func:`write_test_video` writes a short
MJPG ``.avi`` for the file-camera tests.

The thread CPU time spent drawing and handing out frames (not the pacing wait) is counted in
:attr:`PatternCapture.emulation` and the process-wide ``drivers.emulators.cputime.TOTALS["pattern"]``:
the capture thread draws the pattern inline, and scripts/bench_side.py shows it apart.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence

import cv2
import numpy as np

from drivers.camera import fourcc_code, fourcc_text
from drivers.emulators.cputime import PATTERN, TOTALS, CpuMeter

#: SMPTE-like colour bars, BGR: white, yellow, cyan, green, magenta, red, blue.
_BARS_BGR = ((255, 255, 255), (0, 255, 255), (255, 255, 0), (0, 255, 0),
             (255, 0, 255), (0, 0, 255), (255, 0, 0))
#: FOURCCs the emulated device offers (a typical UVC webcam).
SUPPORTED_FOURCC = ("MJPG", "YUYV")
MIN_SIZE, MAX_SIZE = 16, 4096


def _bars(width: int, height: int) -> np.ndarray:
    """Colour-bar background, shape (height, width, 3), uint8 BGR."""
    img = np.empty((height, width, 3), np.uint8)
    edges = np.linspace(0, width, len(_BARS_BGR) + 1).astype(int)
    for colour, x0, x1 in zip(_BARS_BGR, edges[:-1], edges[1:]):
        img[:, x0:x1] = colour
    return img


class PatternCapture:
    """Moving test pattern behind the ``cv2.VideoCapture`` calls the driver makes.

    Args:
        width, height: initial frame size, px.
        fps: initial frame rate, Hz; reads are paced to it when ``paced``.
        modes: sizes the "sensor" supports; a requested size snaps to the
            nearest one (as V4L2 drivers do). None accepts any size 16..4096.
        max_fps: highest rate accepted by ``set(CAP_PROP_FPS)``; higher is clamped.
        paced: sleep until the next frame is due (False: as fast as asked).
        clock: monotonic clock for pacing, s. wall_clock: Unix time drawn on frames, s.

    Attributes:
        frames: frames rendered so far. reads: ``read`` calls that returned a frame.
        set_calls: every ``(prop_id, value, accepted)`` passed to :meth:`set`.
        emulation: thread CPU time, s, spent drawing and copying frames (drivers.emulators.cputime.CpuMeter).
    """

    def __init__(self, width: int = 640, height: int = 480, fps: float = 30.0, *,
                 modes: Sequence[tuple[int, int]] | None = None, max_fps: float = 120.0,
                 paced: bool = True, clock: Callable[[], float] = time.monotonic,
                 wall_clock: Callable[[], float] = time.time) -> None:
        self._modes = tuple(modes) if modes else None
        self._max_fps = max_fps
        self._paced = paced
        self._clock = clock
        self._wall = wall_clock
        self._cond = threading.Condition()
        self._opened = True
        self._blocked = False
        self._failing = False
        self._frozen = False
        self._requested = (width, height)
        self._size = self._snap(width, height)
        self._fps = min(float(fps), max_fps)
        self._fourcc = fourcc_code("MJPG")
        self._buffers = 4  # V4L2 default (DEFAULT_V4L_BUFFERS)
        self._background = _bars(*self._size)
        self._last: np.ndarray | None = None
        self._next_due = clock()
        self.frames = 0
        self.reads = 0
        self.set_calls: list[tuple[int, float, bool]] = []
        self.emulation = CpuMeter(TOTALS[PATTERN])

    # ------------------------------------------------------------------ VideoCapture surface

    def isOpened(self) -> bool:  # noqa: N802 - cv2.VideoCapture's name
        """True until :meth:`release`."""
        return self._opened

    def read(self) -> tuple[bool, np.ndarray | None]:
        """Next frame, paced at the current fps: ``(True, image_bgr)`` or ``(False, None)``.

        Blocks while :meth:`block` is in effect; returns ``(False, None)`` after
        :meth:`release` or while :meth:`fail` is in effect.
        """
        with self._cond:
            while True:
                if not self._opened or self._failing:
                    return False, None
                if self._blocked:
                    self._cond.wait()
                    continue
                wait_s = self._next_due - self._clock() if self._paced else 0.0
                if wait_s > 0:
                    self._cond.wait(wait_s)
                    continue
                break
            start = time.thread_time()
            self._next_due = max(self._next_due + 1.0 / self._fps, self._clock())
            if not self._frozen or self._last is None:
                self._last = self._render()
            self.reads += 1
            frame = self._last.copy()
            self.emulation.since(start)
            return True, frame

    def set(self, prop_id: int, value: float) -> bool:
        """Apply a capture property; False when the device refuses it (previous value kept)."""
        with self._cond:
            accepted = self._apply(int(prop_id), float(value))
            self.set_calls.append((int(prop_id), float(value), accepted))
            return accepted

    def get(self, prop_id: int) -> float:
        """Current value of a property (what the device accepted); 0.0 when unknown, as OpenCV does."""
        with self._cond:
            values = {
                cv2.CAP_PROP_FRAME_WIDTH: self._size[0],
                cv2.CAP_PROP_FRAME_HEIGHT: self._size[1],
                cv2.CAP_PROP_FPS: self._fps,
                cv2.CAP_PROP_FOURCC: self._fourcc,
                cv2.CAP_PROP_BUFFERSIZE: self._buffers,
                cv2.CAP_PROP_POS_FRAMES: self.frames,
            }
            return float(values.get(int(prop_id), 0.0))

    def release(self) -> None:
        """Close the device; a blocked or pacing ``read`` returns ``(False, None)``. Idempotent."""
        self._set(opened=False)

    # ------------------------------------------------------------------ fault injection

    def freeze(self) -> None:
        """From now on ``read`` returns the last frame again, forever (a stuck driver)."""
        self._set(frozen=True)

    def block(self) -> None:
        """From now on ``read`` blocks until :meth:`unblock` or :meth:`release`."""
        self._set(blocked=True)

    def unblock(self) -> None:
        """End :meth:`block`; blocked reads continue."""
        self._set(blocked=False)

    def fail(self) -> None:
        """From now on ``read`` returns ``(False, None)`` (unplugged / broken stream)."""
        self._set(failing=True)

    def heal(self) -> None:
        """Clear :meth:`freeze`, :meth:`block` and :meth:`fail`."""
        self._set(frozen=False, blocked=False, failing=False)

    # ------------------------------------------------------------------ internals

    def _set(self, **flags: bool) -> None:
        """Set state flags (``opened``, ``frozen``, ``blocked``, ``failing``) and wake waiting reads."""
        with self._cond:
            for name, value in flags.items():
                setattr(self, f"_{name}", value)
            self._cond.notify_all()

    def _snap(self, width: int, height: int) -> tuple[int, int]:
        if self._modes is None:
            return (min(max(int(width), MIN_SIZE), MAX_SIZE), min(max(int(height), MIN_SIZE), MAX_SIZE))
        return min(self._modes, key=lambda m: abs(m[0] - width) + abs(m[1] - height))

    def _apply(self, prop: int, value: float) -> bool:
        if prop in (cv2.CAP_PROP_FRAME_WIDTH, cv2.CAP_PROP_FRAME_HEIGHT):
            if value < 1:
                return False
            w, h = self._requested
            self._requested = (int(value), h) if prop == cv2.CAP_PROP_FRAME_WIDTH else (w, int(value))
            size = self._snap(*self._requested)
            if size != self._size:
                self._size = size
                self._background = _bars(*size)
            return True
        if prop == cv2.CAP_PROP_FPS:
            if value <= 0:
                return False
            self._fps = min(value, self._max_fps)
            return True
        if prop == cv2.CAP_PROP_FOURCC:
            if fourcc_text(value) not in SUPPORTED_FOURCC:
                return False
            self._fourcc = int(value)
            return True
        if prop == cv2.CAP_PROP_BUFFERSIZE:
            if not 1 <= value <= 10:  # MAX_V4L_BUFFERS; "Bad buffer size" otherwise
                return False
            self._buffers = int(value)
            return True
        return False

    def _render(self) -> np.ndarray:
        """One frame: bars, a box moving 8 px per frame, time and counter text on top."""
        w, h = self._size
        img = self._background.copy()
        box = max(8, min(w, h) // 6)
        x = (self.frames * 8) % max(1, w - box)
        y = h // 2 - box // 2 + int((h // 4) * np.sin(self.frames / 15.0))
        cv2.rectangle(img, (x, y), (x + box, y + box), (32, 32, 32), -1)
        t = self._wall()
        stamp = time.strftime("%H:%M:%S", time.localtime(t)) + f".{int(t * 1000) % 1000:03d}"
        scale = max(0.3, h / 480.0)
        bar_h = max(10, int(28 * scale))
        img[:bar_h] = 0
        cv2.putText(img, f"{stamp} #{self.frames}", (4, bar_h - max(3, bar_h // 5)),
                    cv2.FONT_HERSHEY_SIMPLEX, 0.6 * scale, (255, 255, 255), 1, cv2.LINE_AA)
        self.frames += 1
        return img


def write_test_video(path: str | os.PathLike[str], *, frames: int = 30, width: int = 320,
                     height: int = 240, fps: float = 15.0) -> str:
    """Write ``frames`` pattern frames to an MJPG ``.avi`` with ``cv2.VideoWriter``; return the path.

    Raises:
        OSError: the writer could not be opened (no MJPG encoder, unwritable path).
    """
    out = os.fspath(path)
    writer = cv2.VideoWriter(out, fourcc_code("MJPG"), fps, (width, height))
    if not writer.isOpened():
        raise OSError(f"cannot write MJPG video {out!r}")
    source = PatternCapture(width, height, fps, paced=False)
    try:
        for _ in range(frames):
            _, image = source.read()
            writer.write(image)
    finally:
        writer.release()
        source.release()
    return out
