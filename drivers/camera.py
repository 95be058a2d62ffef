"""Cameras through OpenCV: USB webcams (V4L2), CSI sensors (GStreamer), files and streams.

The backend is chosen by the value of ``CameraConfig.source`` through a
registry keyed by kind (:data:`BACKENDS`), never by a chain of ``if``\\s:

=========================================== ======== ======================================
source                                      kind     opened as
=========================================== ======== ======================================
``0``, ``"/dev/video0"``, ``/dev/v4l/...``   v4l2     ``cv2.VideoCapture(src, CAP_V4L2)``
``"gst:<pipeline>"``                        gst      ``cv2.VideoCapture(pipeline, CAP_GSTREAMER)``
``"clip.avi"``                              file     ``cv2.VideoCapture(path)``, loops, paced at fps
``"rtsp://..."``, ``"http://..."``, ...     url      ``cv2.VideoCapture(url)``
``"sim://pattern"``                         sim      :class:`drivers.emulators.camera.PatternCapture`
``"picam:0"`` (Pi camera module N)          picam    :class:`drivers.picamera.Picamera2Capture`
=========================================== ======== ======================================

Pi camera modules (libcamera) go through Picamera2 from the distro (drivers/picamera.py);
on a Jetson a CSI camera is a ``gst:`` source through the distro's OpenCV (built with
GStreamer), e.g. for 1280x720 at 30 fps::

    gst:nvarguscamerasrc sensor-id=0 ! video/x-raw(memory:NVMM),width=1280,height=720,framerate=30/1
    ! nvvidconv ! video/x-raw,format=BGRx ! videoconvert ! video/x-raw,format=BGR
    ! appsink drop=true max-buffers=1

(one line in the config; ``appsink drop=true max-buffers=1`` keeps only the newest frame).

On open the driver applies FOURCC, width, height, fps and buffer size (in that
order: a FOURCC change resets the V4L2 stream, and the size applies once both
width and height are set; hardware-reference §7.4), reads back what the device
accepted and logs the differences once per open. The PyPI OpenCV wheels lack
GStreamer (hardware-reference §7.5); a ``gst:`` source then fails with a
message saying so.

Frames are BGR ``uint8`` arrays of shape (height, width, 3) stamped with the
monotonic time at which ``read`` got them (Picamera2: the sensor's exposure time).
"""

from __future__ import annotations

import errno
import functools
import logging
import os
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import cv2
import numpy as np

from drivers import picamera
from drivers.config import CameraConfig
from drivers.errors import DeviceClosed, DriverError
from drivers.base import Device

log = logging.getLogger(__name__)

#: ``(target, api_preference) -> capture`` with the ``cv2.VideoCapture`` surface
#: (isOpened, read, set, get, release). ``cv2.VideoCapture`` itself is one.
CaptureFactory = Callable[[Any, int], Any]


def fourcc_code(text: str) -> int:
    """FOURCC text (``"MJPG"``) -> the int OpenCV uses for ``CAP_PROP_FOURCC``."""
    return cv2.VideoWriter_fourcc(*text)


def fourcc_text(code: float) -> str:
    """``CAP_PROP_FOURCC`` value -> 4-character text; "" when 0 or not printable."""
    value = int(code)
    text = "".join(chr((value >> (8 * i)) & 0xFF) for i in range(4))
    return text if value and text.isprintable() else ""


@dataclass(frozen=True, slots=True)
class CaptureSettings:
    """What a camera runs at, as read back from the device after open.

    Attributes:
        width, height: frame size, px. fps: frame rate, Hz (0 = not reported).
        fourcc: pixel format, e.g. ``MJPG`` ("" = not reported). buffer_size: driver buffers (0 = not reported).
    """

    width: int
    height: int
    fps: float
    fourcc: str
    buffer_size: int

    def differences(self, wanted: CaptureSettings) -> list[str]:
        """Human-readable ``name wanted -> got`` for every setting that differs from ``wanted``."""
        pairs = (("size", f"{wanted.width}x{wanted.height}", f"{self.width}x{self.height}"),
                 ("fps", f"{wanted.fps:g}", f"{self.fps:g}") if abs(wanted.fps - self.fps) > 0.5 else None,
                 ("fourcc", wanted.fourcc, self.fourcc) if wanted.fourcc else None,
                 ("buffer_size", str(wanted.buffer_size), str(self.buffer_size)))
        return [f"{name} {w} -> {g}" for name, w, g in filter(None, pairs) if w != g]


# --------------------------------------------------------------------------- backends


@dataclass(frozen=True, slots=True)
class Backend:
    """How one kind of source is opened.

    Attributes:
        label: name used in messages. api: OpenCV API preference (``cv2.CAP_*``).
        target: config source -> what ``cv2.VideoCapture`` receives.
        check: ``(source, device_name)``, raises DriverError (with errno) when the source cannot
            be opened here for a known reason; runs before OpenCV is asked.
        configure: apply size/fps/FOURCC/buffers (devices yes; files, streams, pipelines no).
        rewind: the source ends (a file): loop at the end, pace reads at the configured fps.
        factory: default capture factory.
        fourcc: the source has a selectable FOURCC (Picamera2: no).
        stamped: the capture reports ``frame_age_s`` (sensor timestamp) for the frame it read.
    """

    label: str
    api: int
    target: Callable[[int | str], Any]
    check: Callable[[int | str, str], None]
    configure: bool = False
    rewind: bool = False
    factory: CaptureFactory = cv2.VideoCapture
    fourcc: bool = True
    stamped: bool = False


def _v4l2_target(source: int | str) -> int | str:
    return int(source) if str(source).isdigit() else source


def _check_device(source: int | str, name: str) -> None:
    path = f"/dev/video{int(source)}" if str(source).isdigit() else str(source)
    if not os.path.exists(path):
        raise DriverError(f"{name}: no such device {path} (camera unplugged?)", device=name, errno=errno.ENOENT)
    if not os.access(path, os.R_OK | os.W_OK):
        raise DriverError(f"{name}: permission denied on {path}: add the user to group 'video' "
                          "(hardware-reference §7.4)", device=name, errno=errno.EACCES)


@functools.cache
def gstreamer_available() -> bool:
    """True when this OpenCV build has GStreamer (``cv2.getBuildInformation()``)."""
    match = re.search(r"^\s*GStreamer:\s*(\S+)", cv2.getBuildInformation(), re.MULTILINE)
    return bool(match) and match.group(1).upper() != "NO"


def _check_gstreamer(source: int | str, name: str) -> None:
    if not gstreamer_available():
        raise DriverError(
            f"{name}: cannot open {source!r}: this OpenCV build has no GStreamer (cv2.getBuildInformation() "
            "says 'GStreamer: NO'; the PyPI opencv-python wheels lack it): install the distro's "
            "python3-opencv or build OpenCV with -DWITH_GSTREAMER=ON (hardware-reference §7.5)", device=name)


def _check_file(source: int | str, name: str) -> None:
    if not os.path.isfile(str(source)):
        raise DriverError(f"{name}: no such file {source!r}", device=name, errno=errno.ENOENT)


def _check_sim(source: int | str, name: str) -> None:
    if source != "sim://pattern":
        raise DriverError(f"{name}: unknown simulated camera {source!r}; known: sim://pattern", device=name)


def _pattern_capture(target: Any, api: int) -> Any:
    from drivers.emulators.camera import PatternCapture  # emulator imports this module's helpers
    return PatternCapture()


def _check_nothing(source: int | str, name: str) -> None:
    """Streams and URLs: only OpenCV can tell."""


def _identity(source: int | str) -> int | str:
    return source


#: Backend per source kind; :func:`source_kind` maps a config value to a key.
BACKENDS: dict[str, Backend] = {
    "v4l2": Backend("V4L2", cv2.CAP_V4L2, _v4l2_target, _check_device, configure=True),
    "gst": Backend("GStreamer", cv2.CAP_GSTREAMER, lambda s: str(s)[len("gst:"):], _check_gstreamer),
    "file": Backend("file", cv2.CAP_ANY, _identity, _check_file, rewind=True),
    "url": Backend("stream", cv2.CAP_ANY, _identity, _check_nothing),
    "sim": Backend("test pattern", cv2.CAP_ANY, _identity, _check_sim, configure=True,
                   factory=_pattern_capture),
    "picam": Backend("Picamera2", cv2.CAP_ANY, picamera.camera_number, picamera.check_source, configure=True,
                     factory=picamera.capture, fourcc=False, stamped=True),
}

#: URL scheme -> source kind (every scheme in ``CameraConfig.SOURCE_SCHEMES``).
SCHEME_KINDS: dict[str, str] = {
    "gst": "gst", "sim": "sim", "picam": "picam",
    **{s: "url" for s in ("http", "https", "rtsp", "rtsps", "rtmp", "udp", "tcp")},
}


def source_kind(source: int | str) -> str:
    """Kind of a config ``source``: a key of :data:`BACKENDS`.

    Raises:
        DriverError: the source has a URL scheme no backend handles.
    """
    scheme = CameraConfig.source_scheme(source)
    if scheme:
        if scheme not in SCHEME_KINDS:
            raise DriverError(f"unknown camera source scheme {scheme!r} in {source!r}; "
                              f"known: {', '.join(SCHEME_KINDS)}")
        return SCHEME_KINDS[scheme]
    text = str(source)
    return "v4l2" if text.isdigit() or text.startswith("/dev/") else "file"


# --------------------------------------------------------------------------- driver


class Camera(Device):
    """One OpenCV camera (see module docstring for the sources).

    Args:
        cfg: the camera's config section.
        capture_factory: ``(target, api) -> capture`` replacing the backend's
            default (``cv2.VideoCapture`` or the test pattern); for tests.
        name: device name for errors and logs; default ``camera.<id>``.
        clock: monotonic clock stamping frames, s.

    Attributes:
        kind: source kind (key of :data:`BACKENDS`), known after :meth:`open`.
        settings: what the device accepted, known after :meth:`open`.
    """

    def __init__(self, cfg: CameraConfig, *, capture_factory: CaptureFactory | None = None,
                 name: str | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.cfg = cfg
        self.name = name or f"camera.{cfg.id}"
        self.kind = ""
        self.settings: CaptureSettings | None = None
        self._factory = capture_factory
        self._clock = clock
        self._backend: Backend | None = None
        self._cap: Any = None
        self._closed = False
        self._closing = threading.Event()
        self._next_due = 0.0

    @property
    def wanted(self) -> CaptureSettings:
        """The settings asked for in config."""
        c = self.cfg
        return CaptureSettings(c.width, c.height, c.fps, c.fourcc, c.buffer_size)

    def open(self) -> None:
        """Open the source and apply the configured settings. Idempotent while open.

        Raises:
            DriverError: unknown scheme, missing device/file, no GStreamer in this
                OpenCV build, or OpenCV could not open the source (``errno`` set when known).
            DeviceClosed: after :meth:`close`.
        """
        if self._closed:
            raise DeviceClosed(f"{self.name}: open() after close()", device=self.name)
        if self._cap is not None:
            return
        source = self.cfg.source
        try:
            kind = source_kind(source)
        except DriverError as err:
            raise DriverError(f"{self.name}: {err}", device=self.name) from err
        backend = BACKENDS[kind]
        backend.check(source, self.name)
        factory = self._factory or backend.factory
        try:
            cap = factory(backend.target(source), backend.api)
            opened = bool(cap.isOpened())
        except (cv2.error, OSError, ValueError) as err:
            raise DriverError(f"{self.name}: cannot open {source!r} through {backend.label}: {err}",
                              device=self.name) from err
        if not opened:
            cap.release()
            raise DriverError(f"{self.name}: OpenCV cannot open {source!r} through {backend.label}",
                              device=self.name)
        try:
            if backend.configure:
                self._configure(cap, backend)
            settings = self._read_back(cap)
        except (cv2.error, OSError) as err:
            cap.release()
            raise DriverError(f"{self.name}: cannot start {source!r} through {backend.label}: {err}",
                              device=self.name) from err
        self.kind, self._backend, self._cap, self.settings = kind, backend, cap, settings
        self._next_due = self._clock()
        self._report(self.settings, backend)

    def read(self) -> tuple[np.ndarray, float]:
        """Next frame.

        Returns:
            ``(image_bgr, t_mono_s)``: uint8 array of shape (height, width, 3) and
            the monotonic time the frame was received, s.

        Raises:
            DriverError: not open, the device returned no frame, or a frame of an unusable shape.
            DeviceClosed: after :meth:`close`.
        """
        cap, backend = self._cap, self._backend
        if self._closed:
            raise DeviceClosed(f"{self.name}: read() after close()", device=self.name)
        if cap is None or backend is None:
            raise DriverError(f"{self.name}: read() before open()", device=self.name)
        if backend.rewind:
            self._pace()
        try:
            ok, image = cap.read()
            if not ok and backend.rewind and not self._closed:
                cap.set(cv2.CAP_PROP_POS_FRAMES, 0)
                ok, image = cap.read()
        except cv2.error as err:
            raise DriverError(f"{self.name}: read failed: {err}", device=self.name) from err
        t_mono_s = self._clock() - (cap.frame_age_s if backend.stamped else 0.0)
        if self._closed:
            raise DeviceClosed(f"{self.name}: closed during read()", device=self.name)
        if not ok or image is None:
            raise DriverError(f"{self.name}: no frame from {self.cfg.source!r}", device=self.name)
        return self._as_bgr(image), t_mono_s

    def close(self) -> None:
        """Release the capture. Idempotent, never raises."""
        self._closed = True
        self._closing.set()
        cap, self._cap = self._cap, None
        if cap is not None:
            try:
                cap.release()
            except cv2.error as err:
                log.warning("%s: release failed: %s", self.name, err)

    # ------------------------------------------------------------------ internals

    def _configure(self, cap: Any, backend: Backend) -> None:
        c = self.cfg
        props = ([(cv2.CAP_PROP_FOURCC, fourcc_code(c.fourcc))] if c.fourcc and backend.fourcc else []) + [
            (cv2.CAP_PROP_FRAME_WIDTH, c.width), (cv2.CAP_PROP_FRAME_HEIGHT, c.height),
            (cv2.CAP_PROP_FPS, c.fps), (cv2.CAP_PROP_BUFFERSIZE, c.buffer_size)]
        for prop, value in props:
            try:
                if not cap.set(prop, value):
                    log.debug("%s: device refused property %d = %s", self.name, prop, value)
            except cv2.error as err:
                log.debug("%s: setting property %d = %s failed: %s", self.name, prop, value, err)

    @staticmethod
    def _read_back(cap: Any) -> CaptureSettings:
        return CaptureSettings(
            width=int(cap.get(cv2.CAP_PROP_FRAME_WIDTH)), height=int(cap.get(cv2.CAP_PROP_FRAME_HEIGHT)),
            fps=float(cap.get(cv2.CAP_PROP_FPS)), fourcc=fourcc_text(cap.get(cv2.CAP_PROP_FOURCC)),
            buffer_size=int(cap.get(cv2.CAP_PROP_BUFFERSIZE)))

    def _report(self, s: CaptureSettings, backend: Backend) -> None:
        log.info("%s: opened %r through %s: %dx%d %s %g fps, %d buffers", self.name, self.cfg.source,
                 backend.label, s.width, s.height, s.fourcc or "-", s.fps, s.buffer_size)
        if backend.configure:
            wanted = self.wanted if backend.fourcc else replace(self.wanted, fourcc="")
            diff = s.differences(wanted)
            if diff:
                log.warning("%s: device did not accept every setting: %s", self.name, "; ".join(diff))

    def _pace(self) -> None:
        """Sleep until the next frame is due at the configured fps (files play in real time)."""
        wait_s = self._next_due - self._clock()
        if wait_s > 0:
            self._closing.wait(wait_s)
        self._next_due = max(self._next_due + 1.0 / self.cfg.fps, self._clock())

    def _as_bgr(self, image: Any) -> np.ndarray:
        if not isinstance(image, np.ndarray) or image.dtype != np.uint8:
            raise DriverError(f"{self.name}: frame is not a uint8 array ({type(image).__name__})",
                              device=self.name)
        if image.ndim == 2:
            return cv2.cvtColor(image, cv2.COLOR_GRAY2BGR)
        if image.ndim == 3 and image.shape[2] == 4:
            return cv2.cvtColor(image, cv2.COLOR_BGRA2BGR)
        if image.ndim == 3 and image.shape[2] == 3:
            return image
        raise DriverError(f"{self.name}: unusable frame shape {image.shape}", device=self.name)
