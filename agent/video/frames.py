"""Frames and formats: what the hub captures (:class:`Frame`), how a consumer wants it
(:class:`FrameFormat`) and what it gets (:class:`EncodedFrame`), plus :func:`encode`.

Raw RGBA is bottom-up (the first row sent is the image's bottom row), as the
Sim2Bot reference reader ``sim2bot.client.CameraFrame.image`` flips raw frames.

OpenCV and NumPy are imported by the first encode, not by this module: an adapter needs
:class:`FrameFormat` whether or not a camera is configured, and a config without cameras
never loads them (``scripts/bench_start.py``: they cost ~0.2 s of a start).
"""

from __future__ import annotations

import functools
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from agent.errors import CommandError, CommandRejected

if TYPE_CHECKING:
    import numpy as np

MAX_OUTPUT_SIZE = 4096


@dataclass(frozen=True, slots=True, eq=False)
class Frame:
    """One captured frame. Immutable; ``image`` is a read-only array.

    Attributes:
        camera_id: config id of the camera.
        seq: per-camera frame counter, from 1, increasing across reopens.
        t_mono_s: capture time, s, agent monotonic clock. t_unix_s: the same instant, Unix s.
        image: BGR uint8, shape (height, width, 3).
    """

    camera_id: str
    seq: int
    t_mono_s: float
    t_unix_s: float
    image: np.ndarray

    @property
    def width(self) -> int:
        """Frame width, px."""
        return int(self.image.shape[1])

    @property
    def height(self) -> int:
        """Frame height, px."""
        return int(self.image.shape[0])


def _encode_jpeg(image: np.ndarray, quality: int) -> bytes:
    import cv2

    ok, buf = cv2.imencode(".jpg", image, [cv2.IMWRITE_JPEG_QUALITY, quality])
    if not ok:
        raise cv2.error("cv2.imencode('.jpg') returned False")
    return buf.tobytes()


def _encode_rgba(image: np.ndarray, quality: int) -> memoryview:
    """Raw RGBA, width*height*4 bytes, rows bottom-up (WebGL order); ``quality`` unused.

    A read-only byte view of the flipped array, not a copy: OpenCV releases the GIL while it
    converts and flips, a ``tobytes()`` of a full-HD frame would hold it for an 8 MB copy."""
    import cv2

    rgba = cv2.flip(cv2.cvtColor(image, cv2.COLOR_BGR2RGBA), 0)
    rgba.flags.writeable = False
    return memoryview(rgba).cast("B")


#: codec -> ``(image_bgr, quality) -> bytes`` (raw RGBA: a read-only ``memoryview`` of bytes).
ENCODERS: dict[str, Callable[[np.ndarray, int], bytes | memoryview]] = {"jpeg": _encode_jpeg, "rgba": _encode_rgba}


def _optional_size(name: str, value: object) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_OUTPUT_SIZE:
        raise CommandRejected(f"frame {name} must be an integer 1..{MAX_OUTPUT_SIZE} or None, got {value!r}")


@dataclass(frozen=True, slots=True)
class FrameFormat:
    """How a consumer wants frames encoded. Frozen and hashable: the encode-cache key.

    Attributes:
        codec: ``jpeg`` or ``rgba`` (raw, bottom-up rows).
        width, height: output size, px; None keeps the camera's. One alone keeps the aspect ratio.
        quality: JPEG quality 1..100 (ignored for ``rgba``).

    Raises:
        CommandRejected: unknown codec, size out of 1..4096, quality out of 1..100.
    """

    codec: str = "jpeg"
    width: int | None = None
    height: int | None = None
    quality: int = 80

    def __post_init__(self) -> None:
        if self.codec not in ENCODERS:
            raise CommandRejected(f"unknown frame codec {self.codec!r}; known: {', '.join(ENCODERS)}")
        _optional_size("width", self.width)
        _optional_size("height", self.height)
        q = self.quality
        if isinstance(q, bool) or not isinstance(q, int) or not 1 <= q <= 100:
            raise CommandRejected(f"JPEG quality must be an integer 1..100, got {q!r}")

    def output_size(self, width: int, height: int) -> tuple[int, int]:
        """Size, px, of a ``width`` x ``height`` frame encoded in this format."""
        if self.width is not None and self.height is not None:
            return self.width, self.height
        if self.width is not None:
            return self.width, max(1, round(height * self.width / width))
        if self.height is not None:
            return max(1, round(width * self.height / height)), self.height
        return width, height

    def resolved(self, width: int, height: int) -> FrameFormat:
        """The canonical spelling of this format for a ``width`` x ``height`` frame: the output size
        spelt out and, for ``rgba``, the unused quality fixed at 80. Two formats that give the same
        bytes for that frame resolve to the same key, e.g. ``FrameFormat("jpeg", quality=80)`` and
        ``FrameFormat("jpeg", 640, 480, 80)`` for a 640x480 frame (the encode cache's key)."""
        w, h = self.output_size(width, height)
        quality = self.quality if self.codec == "jpeg" else 80
        if (w, h, quality) == (self.width, self.height, self.quality):
            return self
        out = object.__new__(FrameFormat)    # sizes come from the frame: no re-validation (a >4096 px camera)
        for name, value in (("codec", self.codec), ("width", w), ("height", h), ("quality", quality)):
            object.__setattr__(out, name, value)
        return out


@functools.lru_cache(maxsize=128)
def resolved_format(fmt: FrameFormat, width: int, height: int) -> FrameFormat:
    """``fmt.resolved(width, height)`` (:meth:`FrameFormat.resolved`), worked out once per (format,
    frame size): the hub resolves a consumer's format for every frame it asks."""
    return fmt.resolved(width, height)


@dataclass(frozen=True, slots=True)
class EncodedFrame:
    """One frame in one format.

    Attributes:
        seq: the :class:`Frame` seq. t_unix_s: capture time, Unix s.
        width, height: encoded size, px. codec: ``jpeg`` | ``rgba``.
        data: JPEG file bytes, or width*height*4 RGBA bytes with bottom-up rows (a read-only
            ``memoryview``, shared by every consumer: never copied on the way to a socket).
        t_mono_s: capture time, s, agent monotonic clock (the :class:`Frame`'s).
        encode_s: time the encoder thread spent on this encode, s (0 when unknown).
    """

    seq: int
    t_unix_s: float
    width: int
    height: int
    codec: str
    data: bytes | memoryview
    t_mono_s: float = 0.0
    encode_s: float = 0.0

    def age_s(self, now_mono_s: float) -> float:
        """Seconds since capture at monotonic time ``now_mono_s`` (0 when the capture time is unknown)."""
        return now_mono_s - self.t_mono_s if self.t_mono_s else 0.0


def encode(frame: Frame, fmt: FrameFormat) -> EncodedFrame:
    """Resize (area when shrinking, linear when growing) and encode ``frame``. Blocking: not on the event loop.

    Raises:
        cv2.error: OpenCV failed to encode.
    """
    w, h = fmt.output_size(frame.width, frame.height)
    image = frame.image
    if (w, h) != (frame.width, frame.height):
        import cv2

        shrink = w * h < frame.width * frame.height
        image = cv2.resize(image, (w, h), interpolation=cv2.INTER_AREA if shrink else cv2.INTER_LINEAR)
    return EncodedFrame(frame.seq, frame.t_unix_s, w, h, fmt.codec, ENCODERS[fmt.codec](image, fmt.quality),
                        frame.t_mono_s)


def content_digest(image: np.ndarray) -> int:
    """CRC32 of a ~64-row subsample: equal digests mean a frozen source, not a still scene (sensor noise)."""
    import numpy as np

    step = max(1, min(image.shape[0], image.shape[1]) // 64)
    return zlib.crc32(np.ascontiguousarray(image[::step, ::step]))
