"""The motor line's descriptor path (drivers/serialfd.py) through SerialLink on a real pty: same
results as pyserial's read/write (bytes, short reads on timeout, write timeout, a vanished device)."""

from __future__ import annotations

import os
import select
import time
import tty

import pytest
import serial

from drivers.errors import DeviceTimeout, DriverError
from drivers.serialfd import port_fd
from drivers.serialport import SerialLink, open_serial


@pytest.fixture
def pty_pair():
    master, slave = os.openpty()
    tty.setraw(slave)
    path = os.ttyname(slave)
    os.close(slave)
    ser = open_serial(path, 115200, timeout_s=0.2)
    link = SerialLink(ser, "motor", timeout_s=0.2, write_timeout_s=0.1)
    yield master, link
    link.close()
    try:
        os.close(master)
    except OSError:
        pass


def test_a_posix_port_takes_the_descriptor_path_and_others_do_not(pty_pair):
    _, link = pty_pair
    assert port_fd(link.ser) == link.ser.fd
    loop = serial.serial_for_url("loop://", timeout=0.1)
    assert port_fd(loop) is None
    lk = SerialLink(loop, "loop", timeout_s=0.1)       # pyserial's own methods: the same results
    lk.write(b"\x80\x15")
    assert lk.read(2) == b"\x80\x15"
    lk.close()


def test_write_then_read_a_reply_of_known_length(pty_pair):
    master, link = pty_pair
    link.write(b"\x80\x4e")
    assert select.select([master], [], [], 1.0)[0]
    assert os.read(master, 16) == b"\x80\x4e"
    os.write(master, bytes(range(10)))
    assert link.read(10) == bytes(range(10))


def test_a_reply_in_two_pieces_is_joined_and_a_short_one_ends_at_the_timeout(pty_pair):
    master, link = pty_pair
    os.write(master, b"\x01\x02\x03")
    started = time.monotonic()
    assert link.read(6) == b"\x01\x02\x03"                 # the rest never comes: short after 0.2 s
    assert 0.15 <= time.monotonic() - started < 2.0
    os.write(master, b"\x04\x05")
    os.write(master, b"\x06")
    assert link.read(3) == b"\x04\x05\x06"


def test_flush_drops_stale_input(pty_pair):
    master, link = pty_pair
    os.write(master, b"stale")
    deadline = time.monotonic() + 1.0
    while not select.select([link.ser.fd], [], [], 0.05)[0] and time.monotonic() < deadline:
        pass
    link.flush_input()
    os.write(master, b"\xff")
    assert link.read(1) == b"\xff"


def test_a_full_buffer_is_a_write_timeout(pty_pair):
    _, link = pty_pair                                   # nobody reads the master: the buffer fills
    with pytest.raises(DeviceTimeout, match="timed out"):
        for _ in range(10_000):
            link.write(bytes(256))


def test_a_vanished_device_is_a_driver_error(pty_pair):
    master, link = pty_pair
    os.close(master)                                     # the pty hung up: as a pulled USB cable
    with pytest.raises(DriverError, match="disconnected"):      # ready, no data: pyserial's words
        link.read(4)
    with pytest.raises(DriverError) as err:
        link.write(b"\x80\x4e")
    assert err.value.errno == 5                          # EIO


def test_a_spy_port_keeps_its_logging_read_and_write(tmp_path):
    """``spy://`` (a scheme drivers/transport.py accepts) is a POSIX port whose read, write and flush
    log the traffic: the descriptor path must not go around them (it once did: an empty trace)."""
    master, slave = os.openpty()
    tty.setraw(slave)
    path = os.ttyname(slave)
    os.close(slave)
    trace = tmp_path / "spy.txt"
    ser = open_serial(f"spy://{path}?file={trace}", 115200, timeout_s=0.2)
    link = SerialLink(ser, "motor", timeout_s=0.2)
    try:
        assert port_fd(ser) is None                      # pyserial's (the spy's) own methods
        link.flush_input()
        link.write(b"\x80\x4e")
        assert select.select([master], [], [], 1.0)[0]
        assert os.read(master, 16) == b"\x80\x4e"
        os.write(master, b"\x01\x02")
        assert link.read(2) == b"\x01\x02"
    finally:
        link.close()
        os.close(master)
    text = trace.read_text()
    assert "TX" in text and "80 4E" in text.upper(), text
    assert "RX" in text and "01 02" in text, text
    assert "reset_input_buffer" in text, text


def test_a_port_class_with_its_own_write_keeps_it(pty_pair):
    """serial.rs485.RS485 raises RTS around each write (a half-duplex transceiver's direction):
    handed in by a serial factory, its write must run, not the descriptor path's."""
    import serial.rs485

    _, link = pty_pair
    rs485 = serial.rs485.RS485(link.ser.port, 115200, timeout=0.2, write_timeout=0.1)
    try:
        assert port_fd(rs485) is None
        assert port_fd(link.ser) == link.ser.fd          # plain pyserial: the descriptor path
    finally:
        rs485.close()
