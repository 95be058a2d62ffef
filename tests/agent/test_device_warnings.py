"""A device that never comes up says why once, at WARNING, with DEVICE/FAULT extras (issue 12)."""

from __future__ import annotations

import errno
import logging
import time

from agent.config.drivers import CameraConfig
from agent.devices.supervisor import Supervised
from agent.video import VideoHub
from drivers.camera import Camera
from drivers.errors import DriverError


def _warnings(caplog, logger: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == logger and r.levelno == logging.WARNING]


def test_missing_port_is_logged_once_at_warning_with_the_reason(caplog):
    def factory():
        raise DriverError("motor: cannot open /dev/ttyACM9: no such port", device="motor", errno=errno.ENOENT)

    caplog.set_level(logging.DEBUG, logger="agent.devices.supervisor")
    dev = Supervised("motor", factory)
    assert not dev.try_open()
    assert not dev.try_open()
    lines = _warnings(caplog, "agent.devices.supervisor")
    assert len(lines) == 1 and "no such port" in lines[0].getMessage()
    assert (lines[0].device, lines[0].fault) == ("motor", "motor: cannot open /dev/ttyACM9: no such port")


def test_a_lost_device_logs_its_reason_with_extras(caplog):
    class Flaky:
        def open(self):
            pass

        def close(self):
            pass

        def read(self):
            raise DriverError("imu: [Errno 121] Remote I/O error", device="imu", errno=121)

    caplog.set_level(logging.DEBUG, logger="agent.devices.supervisor")
    dev = Supervised("imu", Flaky, lost_after=1)
    assert dev.try_open()
    dev.call(lambda d: d.read())
    lost = [r for r in caplog.records if "ok -> lost" in r.getMessage()]
    assert len(lost) == 1 and lost[0].device == "imu" and "Remote I/O" in lost[0].fault
    assert lost[0].levelno == logging.WARNING         # handled (tracks at zero, reopened): not ERROR
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_missing_camera_is_logged_at_warning(caplog):
    caplog.set_level(logging.DEBUG, logger="agent.video")
    hub = VideoHub([CameraConfig(id="front", source="/dev/video97")], camera_factory=Camera,
                   reopen_delay_s=0.05, reopen_delay_max_s=0.1)
    hub.start()
    try:
        deadline = time.monotonic() + 10.0
        while not _warnings(caplog, "agent.video") and time.monotonic() < deadline:
            time.sleep(0.02)
        errors = hub.health()[0].errors                 # a few more reopen attempts: still one line
        while hub.health()[0].errors < errors + 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert hub.health()[0].errors >= errors + 3
    finally:
        hub.close()
    lines = _warnings(caplog, "agent.video")
    assert len(lines) == 1 and "/dev/video97" in lines[0].getMessage()
    assert lines[0].device == "camera.front" and "no such device" in lines[0].fault
