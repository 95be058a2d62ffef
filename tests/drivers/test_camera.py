"""drivers/camera.py through the test-pattern emulator, through a real video file (cv2.VideoCapture),
and (tests parametrised over ``backend``) through Picamera2 against a fake with its signatures."""

from __future__ import annotations

import errno
import logging
import threading
import time

import cv2
import numpy as np
import pytest
from pydantic import ValidationError

from agent.config.drivers import CameraConfig
from agent.errors import DeviceClosed, DriverError
from drivers.camera import (
    BACKENDS, SCHEME_KINDS, Camera, fourcc_code, fourcc_text, gstreamer_available, source_kind)
from drivers.emulators.camera import PatternCapture, write_test_video
from tests.drivers import fake_picamera2


class Recorder:
    """Capture factory handing out PatternCaptures (with ``kwargs``) and remembering them."""

    def __init__(self, **kwargs) -> None:
        self.kwargs = kwargs
        self.made: list[PatternCapture] = []
        self.calls: list[tuple[object, int]] = []

    def __call__(self, target, api):
        self.calls.append((target, api))
        cap = PatternCapture(**self.kwargs)
        self.made.append(cap)
        return cap


def cam_cfg(**kw) -> CameraConfig:
    return CameraConfig(**{"id": "front", "source": "sim://pattern", "width": 160, "height": 120, **kw})


class Backend:
    """One camera backend for the shared tests: ``sim`` (PatternCapture as a cv2.VideoCapture)
    or ``picam`` (Picamera2, the fake module); ``made`` are the patterns behind the cameras opened."""

    def __init__(self, kind: str, monkeypatch, **pattern) -> None:
        self.kind = kind
        if kind == "sim":
            self._rec = Recorder(**pattern)
        else:
            self._cams = fake_picamera2.install(monkeypatch, modes=pattern.get("modes"))

    def camera(self, **kw) -> Camera:
        if self.kind == "sim":
            return Camera(cam_cfg(**kw), capture_factory=self._rec)
        return Camera(cam_cfg(source="picam:0", **kw))

    @property
    def made(self) -> list[PatternCapture]:
        return self._rec.made if self.kind == "sim" else self._cams.patterns


@pytest.fixture(params=["sim", "picam"])
def backend(request, monkeypatch):
    """Build with ``backend(**pattern_options)``."""
    return lambda **pattern: Backend(request.param, monkeypatch, **pattern)


# --------------------------------------------------------------------------- source selection


@pytest.mark.parametrize("source, kind", [
    (0, "v4l2"), ("2", "v4l2"), ("/dev/video0", "v4l2"), ("/dev/v4l/by-id/usb-Cam-video-index0", "v4l2"),
    ("gst:libcamerasrc ! videoconvert ! appsink", "gst"), ("clip.avi", "file"), ("/home/pi/c.mp4", "file"),
    ("picam:0", "picam"), ("picam:1", "picam"),
    ("rtsp://10.0.0.2:8554/cam", "url"), ("http://cam.local/mjpg", "url"), ("sim://pattern", "sim"),
])
def test_source_kind_by_value(source, kind):
    assert source_kind(source) == kind
    assert kind in BACKENDS


def test_every_config_scheme_has_a_backend():
    assert set(SCHEME_KINDS) == set(CameraConfig.SOURCE_SCHEMES)
    assert set(SCHEME_KINDS.values()) <= set(BACKENDS)


def test_unknown_scheme_rejected_by_config_and_driver():
    with pytest.raises(ValidationError, match="unknown camera source scheme 'ftp'"):
        CameraConfig(id="x", source="ftp://host/cam")
    with pytest.raises(DriverError, match="unknown camera source scheme 'ftp'"):
        source_kind("ftp://host/cam")


@pytest.mark.parametrize("bad", [{"source": -1}, {"source": "  "}, {"fourcc": "MJ"}])
def test_config_rejects_bad_camera_values(bad):
    with pytest.raises(ValidationError):
        cam_cfg(**bad)


def test_fourcc_round_trip():
    assert fourcc_text(fourcc_code("MJPG")) == "MJPG"
    assert fourcc_text(0) == ""


# --------------------------------------------------------------------------- pattern camera


def test_frames_change_and_match_config(backend):
    b = backend()
    with b.camera(fps=60) as cam:
        frames = [cam.read() for _ in range(4)]
        assert cam.kind == b.kind
        assert (cam.settings.width, cam.settings.height) == (160, 120)
        assert cam.settings.fourcc == ("MJPG" if b.kind == "sim" else "")  # Picamera2 has no FOURCC
        assert cam.settings.buffer_size == 1
    images = [f[0] for f in frames]
    times = [f[1] for f in frames]
    assert all(i.shape == (120, 160, 3) and i.dtype == np.uint8 for i in images)
    assert all(not np.array_equal(a, b) for a, b in zip(images, images[1:]))
    assert times == sorted(times)
    assert b.made[0].isOpened() is False  # released on close


def test_frames_are_stamped_between_request_and_return(backend):
    with backend().camera(fps=30) as cam:
        for _ in range(3):
            before = time.monotonic()
            _, t_mono_s = cam.read()
            assert before - 1.0 < t_mono_s <= time.monotonic()


def test_settings_applied_fourcc_first_then_size():
    rec = Recorder()
    with Camera(cam_cfg(buffer_size=2, fps=15), capture_factory=rec):
        pass
    props = [p for p, _, _ in rec.made[0].set_calls]
    assert props == [cv2.CAP_PROP_FOURCC, cv2.CAP_PROP_FRAME_WIDTH, cv2.CAP_PROP_FRAME_HEIGHT,
                     cv2.CAP_PROP_FPS, cv2.CAP_PROP_BUFFERSIZE]
    assert all(ok for _, _, ok in rec.made[0].set_calls)


def test_default_sim_source_uses_the_emulator():
    with Camera(cam_cfg(source="sim://pattern")) as cam:
        image, _ = cam.read()
    assert image.shape == (120, 160, 3)


def test_reads_are_paced_at_fps(backend):
    with backend().camera(fps=20) as cam:
        t0 = time.monotonic()
        for _ in range(5):
            cam.read()
        elapsed = time.monotonic() - t0
    assert elapsed >= 4 / 20 * 0.8  # never faster than the device rate (load only slows it)


def test_device_refusals_read_back_and_logged_once(backend, caplog):
    b = backend(modes=[(320, 240), (1280, 720)])
    caplog.set_level(logging.INFO, logger="drivers.camera")
    with b.camera(width=640, height=480, fourcc="H264") as cam:
        image, _ = cam.read()
        cam.read()
        assert (cam.settings.width, cam.settings.height) == (320, 240)
    assert image.shape == (240, 320, 3)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "size 640x480 -> 320x240" in warnings[0]
    assert ("fourcc H264 -> MJPG" in warnings[0]) is (b.kind == "sim")  # refused: previous kept


# --------------------------------------------------------------------------- real file via cv2.VideoCapture


def test_video_file_through_opencv_loops(tmp_path):
    path = write_test_video(tmp_path / "clip.avi", frames=5, width=320, height=240, fps=15)
    with Camera(cam_cfg(source=path, fps=120)) as cam:
        images = [cam.read()[0] for _ in range(12)]  # past the end twice
        assert cam.kind == "file"
        assert (cam.settings.width, cam.settings.height) == (320, 240)
    assert all(i.shape == (240, 320, 3) for i in images)
    assert not np.array_equal(images[0], images[1])
    # frame 5 is frame 0 again (MJPG decode is deterministic)
    assert np.array_equal(images[0], images[5])


# --------------------------------------------------------------------------- errors


def test_missing_file_and_device_name_the_problem():
    with pytest.raises(DriverError, match="no such file") as info:
        Camera(cam_cfg(source="/nonexistent/clip.avi")).open()
    assert info.value.errno == errno.ENOENT and info.value.device == "camera.front"
    with pytest.raises(DriverError, match="/dev/video97") as info:
        Camera(cam_cfg(source=97)).open()
    assert info.value.errno == errno.ENOENT


@pytest.mark.skipif(gstreamer_available(), reason="this OpenCV build has GStreamer")
def test_gstreamer_source_without_gstreamer_says_so():
    with pytest.raises(DriverError, match="no GStreamer"):
        Camera(cam_cfg(source="gst:videotestsrc ! appsink")).open()


def test_unknown_sim_camera():
    with pytest.raises(DriverError, match="unknown simulated camera"):
        Camera(cam_cfg(source="sim://checkerboard")).open()


def test_capture_that_does_not_open():
    def closed_capture(target, api):
        cap = PatternCapture()
        cap.release()
        return cap

    with pytest.raises(DriverError, match="OpenCV cannot open"):
        Camera(cam_cfg(), capture_factory=closed_capture).open()


def test_capture_factory_raising_opencv_error():
    def broken(target, api):
        raise cv2.error("backend exploded")

    with pytest.raises(DriverError, match="backend exploded"):
        Camera(cam_cfg(), capture_factory=broken).open()


def test_failed_read_raises_driver_error(backend):
    b = backend()
    with b.camera() as cam:
        cam.read()
        b.made[0].fail()
        with pytest.raises(DriverError, match="no frame"):
            cam.read()


def test_lifecycle_errors(backend):
    cam = backend().camera()
    with pytest.raises(DriverError, match="before open"):
        cam.read()
    cam.open()
    cam.open()  # idempotent while open
    cam.close()
    cam.close()  # idempotent
    with pytest.raises(DeviceClosed):
        cam.read()
    with pytest.raises(DeviceClosed):
        cam.open()


class ConvertingCapture(PatternCapture):
    """Pattern frames passed through ``convert`` (a device delivering another pixel layout)."""

    def __init__(self, convert) -> None:
        super().__init__(paced=False)
        self.convert = convert

    def read(self):
        ok, image = super().read()
        return ok, self.convert(image)


@pytest.mark.parametrize("convert", [
    lambda i: cv2.cvtColor(i, cv2.COLOR_BGR2GRAY), lambda i: cv2.cvtColor(i, cv2.COLOR_BGR2BGRA)])
def test_gray_and_bgra_frames_become_bgr(convert):
    with Camera(cam_cfg(), capture_factory=lambda t, a: ConvertingCapture(convert)) as cam:
        image, _ = cam.read()
    assert image.shape == (120, 160, 3) and image.dtype == np.uint8


@pytest.mark.parametrize("convert, problem", [
    (lambda i: i.astype(np.float32), "not a uint8 array"), (lambda i: i[:, :, :2], "unusable frame shape")])
def test_unusable_frames_rejected(convert, problem):
    with Camera(cam_cfg(), capture_factory=lambda t, a: ConvertingCapture(convert)) as cam:
        with pytest.raises(DriverError, match=problem):
            cam.read()


# --------------------------------------------------------------------------- emulator faults


def test_emulator_freeze_repeats_the_same_frame():
    cap = PatternCapture(64, 48, 120)
    _, a = cap.read()
    cap.freeze()
    _, b = cap.read()
    _, c = cap.read()
    assert np.array_equal(b, c)
    cap.heal()
    _, d = cap.read()
    assert not np.array_equal(c, d)


@pytest.mark.parametrize("release", [True, False])
def test_emulator_block_until_unblock_or_release(release):
    cap = PatternCapture(64, 48, 120)
    cap.block()
    result: list = []
    reader = threading.Thread(target=lambda: result.append(cap.read()))
    reader.start()
    reader.join(0.2)
    assert reader.is_alive()  # blocked
    cap.release() if release else cap.unblock()
    reader.join(5)
    assert not reader.is_alive()
    assert result[0][0] is (not release)


def test_emulator_refuses_bad_buffer_size():
    cap = PatternCapture()
    assert cap.set(cv2.CAP_PROP_BUFFERSIZE, 11) is False
    assert cap.set(cv2.CAP_PROP_BUFFERSIZE, 2) is True
    assert cap.get(cv2.CAP_PROP_BUFFERSIZE) == 2
