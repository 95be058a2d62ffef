"""The pty serial-device base (drivers/emulators/pty.py), seen from a plain pyserial
port as a driver sees /dev/ttyUSB0: open detection, unplug / replug with and without a
stable link, reply faults, the bounded record, lifecycle, and its server thread's wake-ups."""

from __future__ import annotations

import contextlib
import os
import stat
import threading
import time
from typing import Any
from collections.abc import Callable, Iterator

import pytest
import serial

from drivers import roboclaw as rc
from drivers.emulators.roboclaw import RoboclawEmulator
from drivers.emulators.sabertooth import SabertoothEmulator
from drivers.emulators.tank import TankPhysics

VERSION_REQUEST = bytes.fromhex("80 15")


def new_physics() -> TankPhysics:
    """A tank whose time moves only with step(): deterministic encoder counts (the driver tests' fixture)."""
    return TankPhysics(auto_step=False)


@contextlib.contextmanager
def raw_port(emu: Any, baud: int, timeout_s: float = 0.5) -> Iterator[serial.Serial]:
    """Start ``emu`` and open a plain pyserial port on it, for wire-level checks; both closed on exit."""
    emu.start()
    try:
        with serial.Serial(emu.port, baud, timeout=timeout_s) as port:
            yield port
    finally:
        emu.close()


@contextlib.contextmanager
def pty_rig(physics: Any, emulator_cls: type, driver_for: Callable[..., Any]) -> Iterator[Callable[..., tuple]]:
    """For the driver tests: ``make(cfg_overrides, **emulator_options) -> (started emulator, open driver)``.

    ``driver_for(port, **cfg_overrides)`` builds the driver; everything made is closed on exit, drivers first.
    """
    made: list[Any] = []

    def make(cfg: dict | None = None, **emu_opts: Any) -> tuple:
        emu = emulator_cls(physics, **emu_opts)
        made.append(emu)
        emu.start()
        drv = driver_for(emu.port, **(cfg or {}))
        made.append(drv)
        drv.open()
        return emu, drv

    try:
        yield make
    finally:
        for obj in reversed(made):
            obj.close()


def raw_fixture(emulator_cls: type, baud: int, banner: bytes = b"") -> Any:
    """A fixture yielding ``(emulator, plain pyserial port)`` on the module's ``physics``, ``banner`` already read."""

    def raw(physics: TankPhysics) -> Iterator[tuple[Any, serial.Serial]]:
        emu = emulator_cls(physics)
        with raw_port(emu, baud) as port:
            if banner:
                assert port.readline() == banner
            yield emu, port

    return pytest.fixture(raw)


def rig_fixture(emulator_cls: type, driver_for: Callable[..., Any]) -> Any:
    """A ``rig`` fixture over :func:`pty_rig`, using the test module's ``physics`` fixture."""

    def rig(physics: TankPhysics) -> Iterator[Callable[..., tuple]]:
        with pty_rig(physics, emulator_cls, driver_for) as make:
            yield make

    return pytest.fixture(rig)


def version_reply(emu: RoboclawEmulator) -> bytes:
    return rc.with_crc(VERSION_REQUEST + emu.version.encode() + b"\n\x00")[2:]


def test_start_serves_a_tty_the_driver_opens_like_a_device():
    with RoboclawEmulator() as emu:
        assert emu.port == emu.slave_path and emu.port.startswith("/dev/")
        assert stat.S_ISCHR(os.stat(emu.port).st_mode)
        assert emu.start() == emu.port                       # already started: same port
        assert not emu.port_open
        with serial.Serial(emu.port, 38400, timeout=1.0) as port:
            port.write(VERSION_REQUEST)
            assert port.read(len(version_reply(emu))) == version_reply(emu)
            assert emu.port_open
        assert emu.wait_for(lambda: not emu.port_open, 5.0)
        assert emu.received() == [VERSION_REQUEST]


def test_unplug_fails_the_driver_io_and_removes_the_node():
    with RoboclawEmulator() as emu:
        port = serial.Serial(emu.port, 38400, timeout=0.2)
        old = emu.port
        emu.unplug()
        emu.unplug()                                         # idempotent
        assert not emu.plugged and not os.path.exists(old)
        with pytest.raises(serial.SerialException):
            port.write(VERSION_REQUEST)
        with pytest.raises(serial.SerialException):
            serial.Serial(old, 38400)
        port.close()
        new = emu.replug()
        assert emu.replug() == new                           # already plugged: same port
        with serial.Serial(new, 38400, timeout=1.0) as again:
            again.write(VERSION_REQUEST)
            assert again.read(len(version_reply(emu))) == version_reply(emu)


def test_a_link_path_survives_replug(tmp_path):
    link = str(tmp_path / "serial-by-id-roboclaw")
    with RoboclawEmulator(link=link) as emu:
        assert emu.port == link and os.readlink(link) == emu.slave_path
        held = serial.Serial(link, 38400, timeout=0.2)       # the driver still holds the dead pty
        emu.unplug()
        assert not os.path.lexists(link)
        assert emu.replug() == link
        assert os.readlink(link) == emu.slave_path
        with serial.Serial(link, 38400, timeout=1.0) as port:
            port.write(VERSION_REQUEST)
            assert port.read(len(version_reply(emu))) == version_reply(emu)
        held.close()
    assert not os.path.lexists(link)


def test_each_reply_fault_hits_the_next_reply_only():
    with RoboclawEmulator() as emu, serial.Serial(emu.port, 38400, timeout=0.2) as port:
        good = version_reply(emu)
        cases = [
            (emu.drop_next_reply, b""),
            (emu.truncate_next_reply, good[: len(good) // 2]),
            (emu.corrupt_next_reply, good[:-1] + bytes([good[-1] ^ 1])),
            (lambda: emu.prefix_next_reply(b"\x00\x01"), b"\x00\x01" + good),
        ]
        for inject, expected in cases:
            inject()
            for reply in (expected, good):
                port.write(VERSION_REQUEST)
                assert port.read(len(good) + 2) == reply
        faults = ("dropped_replies", "truncated_replies", "corrupted_replies")
        assert [emu.stats[k] for k in faults] == [1, 1, 1]
        with pytest.raises(ValueError):
            emu.drop_next_reply(-1)


def test_record_is_bounded_and_clearable():
    with SabertoothEmulator(record=3) as emu, serial.Serial(emu.port, 9600) as port:
        packets = [bytes((128, 0, d, (128 + d) & 0x7F)) for d in range(5)]
        port.write(b"".join(packets))
        assert emu.wait_for(lambda: emu.stats["packets"] == 5, 5.0)
        assert emu.received() == packets[-3:]
        emu.clear_received()
        assert emu.received() == []


def test_wait_for_is_bounded():
    with SabertoothEmulator() as emu:
        assert emu.wait_for(lambda: False, 0.05) is False
        assert emu.wait_for(lambda: True, 0.0) is True


def test_lifecycle_errors_and_idempotent_close():
    emu = SabertoothEmulator()
    with pytest.raises(RuntimeError):
        emu.replug()                                         # never started
    emu.start()
    emu.close()
    emu.close()
    with pytest.raises(RuntimeError):
        emu.start()
    with pytest.raises(ValueError):
        SabertoothEmulator(record=0)


def test_a_paced_request_is_handled_when_read_stamped_with_its_arrival_and_answered_after_both_wire_times():
    """Two server passes per transaction (drivers/emulators/pty.py, "Wake-ups"): the device handles a
    request in the pass that reads it, stamped with the time its last byte arrives; the reply still
    waits for the request's and its own wire time plus the reply latency."""
    emu = RoboclawEmulator(new_physics())
    emu.pace(300, 0.001)                                  # 33 ms a byte: a request's arrival is far ahead
    handled: list[tuple[float, float]] = []
    inner = emu._on_bytes

    def on_bytes(data: bytes, now: float) -> None:
        handled.append((time.monotonic(), now))
        inner(data, now)

    emu._on_bytes = on_bytes
    with raw_port(emu, 300, timeout_s=2.0) as port:
        assert emu.wait_for(lambda: emu.port_open, 5)
        started = time.monotonic()
        port.write(bytes((0x80, rc.CMD_READ_MAIN_BATTERY)))
        reply = port.read(4)
        took = time.monotonic() - started
    at, stamp = handled[0]
    assert len(reply) == 4
    assert stamp >= started + 2 * 10 / 300                # stamped with the last byte's arrival
    assert at < stamp                                     # handled before it: in the pass that read it
    assert took >= 2 * 10 / 300 + 0.001 + 4 * 10 / 300    # both wire times and the latency kept


def test_the_server_thread_passes_twice_per_transaction_and_sleeps_while_the_line_is_quiet():
    emu = RoboclawEmulator(new_physics())
    emu.pace(115200, 0.001)
    with raw_port(emu, 115200) as port:
        assert emu.wait_for(lambda: emu.port_open, 5)
        passes = emu.stats["passes"]
        for _ in range(20):
            port.write(bytes((0x80, rc.CMD_READ_MAIN_BATTERY)))
            assert len(port.read(4)) == 4
        assert emu.stats["passes"] - passes <= 2 * 20 + 2      # the request read, the reply written
        passes = emu.stats["passes"]
        count, stop = [0], threading.Event()                   # a 10 ms ticker is the clock of the quiet

        def tick() -> None:
            while not stop.wait(0.01):
                count[0] += 1
        ticker = threading.Thread(target=tick, name="ticker", daemon=True)
        ticker.start()
        try:
            assert emu.wait_for(lambda: count[0] >= 30, 5)
        finally:
            stop.set()
            ticker.join()
        assert emu.stats["passes"] == passes                   # no periodic timeout: it never woke
