"""A fake ``picamera2`` module for tests: ``Picamera2`` with the library's call signatures
(raspberrypi/picamera2, picamera2/picamera2.py) over the test-pattern emulator.

``install(monkeypatch)`` puts it in ``sys.modules["picamera2"]`` so the real lazy import in
drivers/picamera.py finds it. Frames come from a :class:`PatternCapture` (BGR, which is
Picamera2's ``RGB888`` byte order), paced at the configured frame duration; its fault
injection (``fail``, ``block``, ``freeze``) works as for the OpenCV backends. Like the real
library, ``configure`` refuses while started, sizes snap to the sensor's modes, and every
request handed out must be released.
"""

from __future__ import annotations

import sys
import threading
import time
import types
from typing import Any

import numpy as np

from drivers.emulators.camera import PatternCapture


class FakeRequest:
    """A completed request: one frame of the ``main`` stream and its metadata."""

    def __init__(self, owner: "FakePicamera2", image: np.ndarray, stamp_ns: int) -> None:
        self._owner, self._image, self._stamp_ns = owner, image, stamp_ns

    def make_array(self, name: str) -> np.ndarray:
        if name != "main":
            raise RuntimeError(f"Stream {name!r} is not defined")  # the fake has no lores/raw stream
        return self._image.copy()

    def get_metadata(self) -> dict[str, Any]:
        return {"SensorTimestamp": self._stamp_ns, "FrameDuration": self._owner.frame_us}

    def release(self) -> None:
        with self._owner.lock:
            self._owner.released += 1


class FakeCameras:
    """What the tests control: attached models, sensor modes, timestamp offset; every camera made."""

    def __init__(self, models: tuple[str, ...], modes: list[tuple[int, int]] | None,
                 exposure_ns: int, clock_offset_ns: int) -> None:
        self.models, self.modes = models, modes
        self.exposure_ns, self.clock_offset_ns = exposure_ns, clock_offset_ns
        self.made: list[FakePicamera2] = []

    @property
    def patterns(self) -> list[PatternCapture]:
        """The pattern behind each configured camera, in order of creation (fault injection handles)."""
        return [cam.pattern for cam in self.made if cam.pattern is not None]


class FakePicamera2:
    """``Picamera2`` with the methods the driver calls (signatures as in picamera2.py)."""

    cameras: FakeCameras

    @classmethod
    def global_camera_info(cls) -> list[dict[str, Any]]:
        return [{"Model": m, "Location": 2, "Rotation": 180, "Id": f"/base/axi/i2c@{i}/{m}@1a"}
                for i, m in enumerate(cls.cameras.models)]

    def __init__(self, camera_num: int = 0, verbose_console: Any = None, tuning: Any = None) -> None:
        if camera_num >= len(self.cameras.models):
            raise RuntimeError("Camera __init__ sequence did not complete.")
        self.camera_num = camera_num
        self.lock = threading.Lock()
        self.calls: list[tuple[str, Any]] = []
        self.camera_config: dict[str, Any] | None = None
        self.started = False
        self.is_open = True
        self.pattern: PatternCapture | None = None
        self.frame_us = 0
        self.released = self.handed_out = 0
        self.cameras.made.append(self)

    def create_video_configuration(self, main={}, lores=None, raw={}, transform=None, colour_space=None,
                                   buffer_count=6, controls={}, display="main", encode="main",
                                   queue=True) -> dict:
        self.calls.append(("create_video_configuration", {"main": dict(main), "controls": dict(controls),
                                                          "buffer_count": buffer_count, "queue": queue}))
        stream = {"format": "XBGR8888", "size": (1280, 720), **main}
        w, h = stream["size"]
        stream["size"] = (w - w % 2, h - h % 2)
        return {"use_case": "video", "buffer_count": buffer_count, "queue": queue, "main": stream,
                "lores": lores, "raw": raw, "controls": {"FrameDurationLimits": (33333, 33333), **controls}}

    def configure(self, camera_config: dict) -> None:
        if self.started:
            raise RuntimeError("Camera must be stopped before configuring")
        self.calls.append(("configure", camera_config))
        config = {**camera_config, "main": dict(camera_config["main"])}
        modes = self.cameras.modes
        if modes:
            w, h = config["main"]["size"]
            config["main"]["size"] = min(modes, key=lambda m: abs(m[0] - w) + abs(m[1] - h))
        self.camera_config = config

    def camera_configuration(self) -> dict:
        return self.camera_config

    def start(self, config: Any = None, show_preview: bool = False) -> None:
        if self.camera_config is None:
            raise RuntimeError("Camera has not been configured")
        self.calls.append(("start", None))
        self.frame_us = self.camera_config["controls"]["FrameDurationLimits"][0]
        if self.pattern is not None:
            self.pattern.release()
        w, h = self.camera_config["main"]["size"]
        self.pattern = PatternCapture(w, h, 1e6 / self.frame_us)
        self.started = True

    def capture_request(self, wait: Any = None, signal_function: Any = None) -> FakeRequest:
        pattern = self.pattern
        if not self.started or pattern is None:
            raise RuntimeError("Camera is not running")
        ok, image = pattern.read()
        if not ok:
            raise RuntimeError("Camera frontend has timed out!")
        stamp = time.monotonic_ns() - self.cameras.exposure_ns + self.cameras.clock_offset_ns
        with self.lock:
            self.handed_out += 1
        return FakeRequest(self, image, stamp)

    def stop(self) -> None:
        self.calls.append(("stop", None))
        self.started = False

    def close(self) -> None:
        self.calls.append(("close", None))
        if self.pattern is not None:
            self.pattern.release()
        self.is_open = False


def install(monkeypatch, models: tuple[str, ...] = ("imx708",), modes: list[tuple[int, int]] | None = None,
            exposure_ns: int = 0, clock_offset_ns: int = 0) -> FakeCameras:
    """Make ``import picamera2`` find the fake for this test; returns the handle on its cameras."""
    cameras = FakeCameras(models, modes, exposure_ns, clock_offset_ns)
    module = types.ModuleType("picamera2")
    module.Picamera2 = type("Picamera2", (FakePicamera2,), {"cameras": cameras})
    monkeypatch.setitem(sys.modules, "picamera2", module)
    return cameras
