"""Raspberry Pi camera modules (CSI, libcamera) through Picamera2, behind the capture surface
:class:`drivers.camera.Camera` drives (``isOpened``, ``read``, ``set``, ``get``, ``release``).

PyPI OpenCV cannot open a Pi camera module on Bookworm (libcamera, not V4L2). Picamera2
comes from the distro (``sudo apt install python3-picamera2``; it is not usable from PyPI)
and is imported lazily, so the agent runs without it; the venv must see the system
packages (``python3 -m venv --system-site-packages``, which scripts/install.sh does).

Calls used, with the signatures of raspberrypi/picamera2, picamera2/picamera2.py:

- ``Picamera2.global_camera_info()`` (static): one dict per attached camera (``Model``, ``Id``...);
- ``Picamera2(camera_num)``; ``create_video_configuration(main={"size": (w, h), "format":
  "RGB888"}, controls={"FrameDurationLimits": (us, us)}, buffer_count=4, queue=True)``;
  ``configure(config)``; ``camera_configuration()["main"]["size"]`` (what libcamera accepted);
  ``start()``; ``capture_request()`` -> request; ``request.make_array("main")`` (a copy,
  shape (h, w, 3)); ``request.get_metadata()["SensorTimestamp"]`` (ns); ``request.release()``;
  ``stop()``; ``close()``.

Latest frame: with ``queue=True`` and more than one buffer Picamera2 keeps only the most recent
completed request (``_max_queue_len = 1``), so ``capture_request`` hands out the newest frame or
waits for the next one; older frames are recycled, never queued. The reader-visible queue is
therefore one frame deep and ``CAP_PROP_BUFFERSIZE`` reads 1.

Pixel format: Picamera2's ``RGB888`` is stored B, G, R per pixel (the DRM fourcc naming), which is
OpenCV's BGR, so frames need no conversion. There is no FOURCC to choose.

Capture time: ``SensorTimestamp`` is the start of exposure in ns on the clock of the V4L2 buffer
timestamps, CLOCK_MONOTONIC on the Pi's unicam/rp1-cfe receivers (the same clock as
:func:`time.monotonic`). :attr:`Picamera2Capture.frame_age_s` is how long before ``read`` returned
the frame was exposed; an implausible age (negative or over 1 s: another clock) reads 0 and the
frame is stamped with its receive time, as the OpenCV backends do.
"""

from __future__ import annotations

import errno
import importlib
import logging
import time
from typing import Any

import cv2
import numpy as np

from drivers.errors import DriverError

log = logging.getLogger(__name__)

#: libcamera buffers: enough for the ISP pipeline plus the one latest frame Picamera2 holds.
BUFFER_COUNT = 4
#: A frame age beyond this means SensorTimestamp is on another clock: stamp at receive time.
MAX_PLAUSIBLE_AGE_S = 1.0

MISSING = ("Picamera2 is not importable here ({error}): install it from the distro with "
           "`sudo apt install python3-picamera2` (it is not usable from PyPI) and run the agent from a "
           "venv created with --system-site-packages (scripts/install.sh does both)")


#: picamera2 is there but a module of its stack (simplejpeg, libcamera bindings: compiled against
#: the distro's numpy 1.x) refuses the numpy in front of it (numpy 2 from PyPI in the venv):
#: raspberrypi/picamera2 issues 1088 and 1211.
NUMPY_ABI = ("Picamera2 cannot load beside numpy {numpy} ({error}): the distro's python3-picamera2 and "
             "simplejpeg are built for the distro's numpy 1.x, and a numpy 2 in the venv hides it; fix: re-run "
             "scripts/install.sh (on Bookworm it keeps the distro's numpy, scripts/constraints-numpy1.txt), or "
             "`/opt/robot-agent/venv/bin/pip install -c /opt/robot-agent/src/scripts/constraints-numpy1.txt "
             "'numpy<2' 'opencv-python-headless<4.12'` and restart")
#: words of the errors a numpy ABI mismatch raises at import
NUMPY_ABI_WORDS = ("numpy.dtype size changed", "_ARRAY_API", "multiarray failed to import",
                   "compiled using NumPy 1.x", "numpy.core", "binary incompatibility")


def picamera2_class() -> Any:
    """The ``Picamera2`` class, imported now.

    Raises:
        ImportError: one line naming the cause and the fix: Picamera2 missing (:data:`MISSING`: apt
            package, venv with system site packages) or its stack refusing the venv's numpy
            (:data:`NUMPY_ABI`: the distro's numpy 1.x, scripts/constraints-numpy1.txt).
    """
    try:
        return importlib.import_module("picamera2").Picamera2
    except (ImportError, ValueError, AttributeError, RuntimeError) as err:
        text = " ".join(str(err).split())[:200] or type(err).__name__
        if any(w in text for w in NUMPY_ABI_WORDS):
            raise ImportError(NUMPY_ABI.format(numpy=np.__version__, error=text)) from err
        if not isinstance(err, ImportError):
            raise ImportError(f"Picamera2 failed to import ({type(err).__name__}: {text}); check "
                              "`python3 -c 'import picamera2'` with the venv's python") from err
        raise ImportError(MISSING.format(error=text)) from err


def camera_models() -> list[str]:
    """Model names of the attached Pi cameras, by camera number (``Picamera2.global_camera_info()``)."""
    return [str(info.get("Model", "?")) for info in picamera2_class().global_camera_info()]


def camera_number(source: int | str) -> int:
    """``"picam:1"`` -> 1, ``"picam:"`` -> 0. Raises ValueError for anything else after ``picam:``."""
    text = str(source).partition(":")[2].strip() or "0"
    if not text.isdigit():
        raise ValueError(f"picam source must be picam:<camera number>, got {source!r}")
    return int(text)


def check_source(source: int | str, name: str) -> None:
    """Before opening ``picam:N``: Picamera2 importable and camera N attached.

    Raises:
        DriverError: Picamera2 missing (install advice), a bad source, or no camera N (errno ENOENT).
    """
    try:
        number, models = camera_number(source), camera_models()
    except (ValueError, ImportError) as err:
        raise DriverError(f"{name}: {err}", device=name) from err
    if number >= len(models):
        raise DriverError(f"{name}: no Pi camera {number} (libcamera sees {len(models)}: {', '.join(models) or '-'}; "
                          "ribbon seated? camera_auto_detect=1 in config.txt?)", device=name, errno=errno.ENOENT)


def capture(camera_num: int, api: int) -> "Picamera2Capture":
    """Capture factory of the ``picam`` backend (``api`` unused: not an OpenCV capture)."""
    return Picamera2Capture(camera_num)


class Picamera2Capture:
    """One Pi camera with the ``cv2.VideoCapture`` calls the camera driver makes.

    Settings (width, height, fps) are collected by :meth:`set` and applied when the camera is
    first read or queried (``configure`` + ``start``); a later :meth:`set` restarts it.

    Args:
        camera_num: Picamera2 camera number (``picam:N``).
        picamera2: the ``Picamera2`` class (default: the distro's, imported now).
        clock_ns: the clock ``SensorTimestamp`` is on, ns (default :func:`time.monotonic_ns`).

    Attributes:
        frame_age_s: age of the last frame when :meth:`read` returned it, s (0 when unknown).

    Raises:
        OSError: Picamera2 is missing (with the install advice) or cannot open the camera.
    """

    def __init__(self, camera_num: int, *, picamera2: Any = None, clock_ns: Any = time.monotonic_ns) -> None:
        try:
            cls = picamera2 or picamera2_class()
            self._cam = cls(camera_num)
        except (ImportError, RuntimeError, IndexError) as err:
            raise OSError(errno.ENODEV, str(err) or type(err).__name__) from err
        self._clock_ns = clock_ns
        self._wanted = {cv2.CAP_PROP_FRAME_WIDTH: 640.0, cv2.CAP_PROP_FRAME_HEIGHT: 480.0, cv2.CAP_PROP_FPS: 30.0}
        self._size = (0, 0)
        self._started = False
        self._opened = True
        self.frame_age_s = 0.0

    def isOpened(self) -> bool:  # noqa: N802 - cv2.VideoCapture's name
        """True until :meth:`release`."""
        return self._opened

    def set(self, prop_id: int, value: float) -> bool:
        """Width, height and fps are accepted (applied at the next start); buffer size only 1."""
        prop = int(prop_id)
        if prop == cv2.CAP_PROP_BUFFERSIZE:
            return value == 1
        if prop not in self._wanted or value <= 0:
            return False
        self._wanted[prop] = float(value)
        if self._started:
            self._stop()
        return True

    def get(self, prop_id: int) -> float:
        """What the camera runs at (starting it first); 0.0 for what it does not report.

        Raises:
            OSError: the camera could not be configured or started.
        """
        if not self._ensure_started():
            return 0.0
        values = {cv2.CAP_PROP_FRAME_WIDTH: self._size[0], cv2.CAP_PROP_FRAME_HEIGHT: self._size[1],
                  cv2.CAP_PROP_FPS: self._wanted[cv2.CAP_PROP_FPS], cv2.CAP_PROP_BUFFERSIZE: 1}
        return float(values.get(int(prop_id), 0.0))

    def read(self) -> tuple[bool, np.ndarray | None]:
        """The newest frame: ``(True, image_bgr)``, or ``(False, None)`` when the camera failed."""
        try:
            if not self._ensure_started():
                return False, None
            request = self._cam.capture_request()
            try:
                image = request.make_array("main")
                stamp_ns = request.get_metadata().get("SensorTimestamp")
            finally:
                request.release()
        except (RuntimeError, OSError) as err:
            log.debug("picamera2: capture failed: %s", err)
            return False, None
        self.frame_age_s = self._age_s(stamp_ns)
        return True, image

    def release(self) -> None:
        """Stop and close the camera. Idempotent, never raises."""
        if not self._opened:
            return
        self._opened = False
        self._stop()
        try:
            self._cam.close()
        except (RuntimeError, OSError) as err:
            log.warning("picamera2: close failed: %s", err)

    # ------------------------------------------------------------------ internals

    def _ensure_started(self) -> bool:
        """Configure and start once; True when running. Raises OSError when Picamera2 refuses."""
        if self._started or not self._opened:
            return self._started
        w = self._wanted
        frame_us = int(round(1e6 / w[cv2.CAP_PROP_FPS]))
        try:
            config = self._cam.create_video_configuration(
                main={"size": (int(w[cv2.CAP_PROP_FRAME_WIDTH]) & ~1, int(w[cv2.CAP_PROP_FRAME_HEIGHT]) & ~1),
                      "format": "RGB888"},
                controls={"FrameDurationLimits": (frame_us, frame_us)}, buffer_count=BUFFER_COUNT, queue=True)
            self._cam.configure(config)
            width, height = self._cam.camera_configuration()["main"]["size"]
            self._cam.start()
        except (RuntimeError, OSError, ValueError, KeyError, TypeError) as err:
            raise OSError(errno.EIO, f"cannot start the camera: {err}") from err
        self._size, self._started = (int(width), int(height)), True
        return True

    def _stop(self) -> None:
        self._started = False
        try:
            self._cam.stop()
        except (RuntimeError, OSError) as err:
            log.debug("picamera2: stop failed: %s", err)

    def _age_s(self, stamp_ns: Any) -> float:
        if not isinstance(stamp_ns, int):
            return 0.0
        age_s = (self._clock_ns() - stamp_ns) / 1e9
        return age_s if 0.0 <= age_s <= MAX_PLAUSIBLE_AGE_S else 0.0
