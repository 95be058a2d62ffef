"""drivers/picamera.py: the Picamera2 backend against a fake picamera2 module with the library's
call signatures (tests/drivers/fake_picamera2.py). The camera behaviour shared with the OpenCV
backends runs in tests/drivers/test_camera.py (parametrised over backends); here: the calls made,
the sensor timestamp, the missing-library and missing-camera messages, reopen through the hub."""

from __future__ import annotations

import errno
import sys
import time

import pytest
from pydantic import ValidationError

from agent.video import VideoHub
from drivers.camera import Camera
from drivers.config import CameraConfig
from drivers.errors import DriverError
from tests.conftest import wait_for
from tests.drivers import fake_picamera2


def cfg(**kw) -> CameraConfig:
    return CameraConfig(**{"id": "front", "source": "picam:0", "width": 320, "height": 240, "fps": 30, **kw})


def test_the_camera_is_configured_started_read_and_closed_with_picamera2_calls(monkeypatch):
    cams = fake_picamera2.install(monkeypatch)
    with Camera(cfg(width=321)) as cam:
        for _ in range(3):
            cam.read()
        fake = cams.made[0]
    names = [name for name, _ in fake.calls]
    assert names == ["create_video_configuration", "configure", "start", "stop", "close"]
    created = fake.calls[0][1]
    assert created["main"] == {"size": (320, 240), "format": "RGB888"}       # even width, BGR bytes
    assert created["controls"] == {"FrameDurationLimits": (33333, 33333)}   # 30 fps
    assert created["queue"] is True and created["buffer_count"] > 1         # Picamera2 keeps the newest
    assert fake.handed_out == fake.released == 3                            # every request released


def test_frames_carry_the_sensor_exposure_time(monkeypatch):
    fake_picamera2.install(monkeypatch, exposure_ns=200_000_000)            # exposed 200 ms before readout
    with Camera(cfg()) as cam:
        before = time.monotonic()
        _, t_mono_s = cam.read()
        after = time.monotonic()
    assert before - 0.2 - 0.1 < t_mono_s < after - 0.15


def test_a_timestamp_on_another_clock_falls_back_to_the_receive_time(monkeypatch):
    fake_picamera2.install(monkeypatch, clock_offset_ns=3600 * 10**9)       # e.g. CLOCK_BOOTTIME after suspend
    with Camera(cfg()) as cam:
        before = time.monotonic()
        _, t_mono_s = cam.read()
    assert before <= t_mono_s <= time.monotonic()


def test_missing_picamera2_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "picamera2", None)                     # import picamera2 -> ImportError
    with pytest.raises(DriverError) as info:
        Camera(cfg()).open()
    text = str(info.value)
    assert "apt install python3-picamera2" in text and "--system-site-packages" in text


async def test_picamera2_refusing_the_venvs_numpy_names_the_cause_and_the_fix_in_one_line(tmp_path, monkeypatch, caplog):
    # a picamera2 whose compiled stack fails as simplejpeg does beside numpy 2 (picamera2 issue 1088)
    (tmp_path / "picamera2.py").write_text(
        'raise ValueError("numpy.dtype size changed, may indicate binary incompatibility. '
        'Expected 96 from C header, got 88 from PyObject")\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "picamera2", raising=False)
    hub = VideoHub([cfg()])
    hub.start()
    try:
        await wait_for(lambda: "Picamera2 cannot load" in caplog.text, timeout_s=10)
    finally:
        hub.close()
    lines = [r.getMessage() for r in caplog.records if "Picamera2 cannot load" in r.getMessage()]
    assert lines and "\n" not in lines[0]                                       # one line
    assert "numpy.dtype size changed" in lines[0] and "constraints-numpy1.txt" in lines[0]   # cause and fix
    assert "scripts/install.sh" in lines[0]


def test_a_missing_camera_names_what_libcamera_sees(monkeypatch):
    fake_picamera2.install(monkeypatch, models=("imx708",))
    with pytest.raises(DriverError, match=r"no Pi camera 1 \(libcamera sees 1: imx708") as info:
        Camera(cfg(source="picam:1")).open()
    assert info.value.errno == errno.ENOENT


def test_picamera2_refusing_to_start_is_a_driver_error_and_releases_the_camera(monkeypatch):
    cams = fake_picamera2.install(monkeypatch)

    def refuse(self, config):
        raise RuntimeError("Configuration failed")

    monkeypatch.setattr(fake_picamera2.FakePicamera2, "configure", refuse)
    with pytest.raises(DriverError, match="cannot start 'picam:0' through Picamera2: .*Configuration failed"):
        Camera(cfg()).open()
    assert cams.made[0].is_open is False


@pytest.mark.parametrize("source", ["picam:x", "picam:-1", "picam:0:1"])
def test_config_rejects_malformed_picam_sources(source):
    with pytest.raises(ValidationError, match="picam:<camera number>"):
        cfg(source=source)


def test_the_hub_reopens_a_failed_pi_camera_and_frames_resume(monkeypatch):
    cams = fake_picamera2.install(monkeypatch)
    hub = VideoHub([cfg(width=160, height=120)], reopen_delay_s=0.05, reopen_delay_max_s=0.1)
    hub.start()
    try:
        _wait(lambda: hub.health()[0].state == "ok", "first frame")
        cams.patterns[0].fail()
        _wait(lambda: len(cams.made) >= 2 and hub.health()[0].state == "ok", "reopened")
        seq = hub.latest("front").seq
        _wait(lambda: hub.latest("front").seq > seq, "frames after the reopen")
    finally:
        hub.close()
    assert cams.made[0].is_open is False                                   # the failed camera was closed


def _wait(predicate, what: str, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)
