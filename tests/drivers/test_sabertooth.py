"""Sabertooth packetized serial: byte-exact vectors (hardware-reference §2.2), and the
real driver against the emulator on a real pty: autobaud, timeout, duty, the one-way
link's blindness, unplug/replug, lifecycle."""

from __future__ import annotations

import math
import time

import pytest
import serial

from agent.config.drivers import SabertoothConfig
from agent.errors import DeviceClosed, DriverError
from drivers import sabertooth as stt
from drivers.base import MotorFeedback
from drivers.emulators.sabertooth import SabertoothEmulator
from tests.drivers.test_pty import new_physics, raw_port, rig_fixture

H = bytes.fromhex


def config(port: str, **kw) -> SabertoothConfig:
    # a generous controller timeout: a loaded test machine must not trip it unless a test means to
    return SabertoothConfig(**{"kind": "sabertooth", "port": port, "autobaud_wait_s": 0.0, "serial_timeout_s": 5.0,
                               **kw})


physics = pytest.fixture(new_physics)
rig = rig_fixture(SabertoothEmulator, lambda port, **kw: stt.Sabertooth(config(port, **kw)))


def delivered(emu: SabertoothEmulator, n: int) -> bool:
    """Wait until the emulator has seen ``n`` packets (the link is one-way: no ack to wait on)."""
    return emu.wait_for(lambda: len(emu.received()) >= n, 5.0)


# ---------------------------------------------------------------------- wire format

@pytest.mark.parametrize("address, cmd, data, wire", [
    (130, stt.CMD_M1_FORWARD, 64, "82 00 40 42"),      # the manual's own example
    (128, stt.CMD_M1_FORWARD, 127, "80 00 7F 7F"),
    (128, stt.CMD_M2_BACKWARD, 64, "80 05 40 45"),
    (128, 8, 100, "80 08 64 6C"),
    (128, stt.CMD_SERIAL_TIMEOUT, 10, "80 0E 0A 18"),
])
def test_packets_match_reference_vectors(address, cmd, data, wire):
    assert stt.packet(address, cmd, data) == H(wire)


@pytest.mark.parametrize("address, cmd, data", [(127, 0, 0), (136, 0, 0), (128, 128, 0), (128, 0, 128), (128, 0, -1)])
def test_packet_rejects_bytes_out_of_range(address, cmd, data):
    with pytest.raises(ValueError):
        stt.packet(address, cmd, data)


def test_motor_packets_full_scale_127_and_zero_forward():
    assert stt.motor_packet(128, 1, 1.0) == stt.packet(128, stt.CMD_M1_FORWARD, 127)
    assert stt.motor_packet(128, 1, -1.0) == stt.packet(128, stt.CMD_M1_BACKWARD, 127)
    assert stt.motor_packet(128, 2, 0.5) == stt.packet(128, stt.CMD_M2_FORWARD, 64)
    assert stt.motor_packet(128, 2, -0.001) == stt.packet(128, stt.CMD_M2_FORWARD, 0)


@pytest.mark.parametrize("seconds, units", [(0.1, 1), (0.25, 3), (0.5, 5), (1.0, 10), (12.7, 127), (20.0, 127)])
def test_timeout_rounds_up_to_100ms(seconds, units):
    assert stt.timeout_value(seconds) == units


# ---------------------------------------------------------------------- driver through the emulator

def test_open_autobauds_then_sets_the_timeout(rig):
    emu, _ = rig({"serial_timeout_s": 0.5})
    assert delivered(emu, 2)
    assert emu.received() == [b"\xaa", H("80 0E 05 13")]
    assert emu.bauded and emu.timeout_s == pytest.approx(0.5)


def test_set_duty_sends_both_motor_packets_and_moves_the_tracks(rig, physics):
    emu, drv = rig()
    drv.set_duty(64 / 127, -1.0)
    assert delivered(emu, 4)
    assert emu.received()[-2:] == [H("80 00 40 40"), H("80 05 7F 04")]
    assert physics.duty == pytest.approx([64 / 127, -1.0])


def test_address_channel_mapping_and_inversion(rig, physics):
    emu, drv = rig({"address": 130, "left_channel": 2, "invert_right": True}, address=130, left_channel=2)
    drv.set_duty(-1.0, 64 / 127)
    assert delivered(emu, 4)
    # right track (inverted) on motor 1, left track on motor 2
    assert emu.received()[-2:] == [H("82 01 40 43"), H("82 05 7F 06")]
    assert physics.duty == pytest.approx([-1.0, -64 / 127])


def test_read_feedback_reports_nothing(rig):
    _, drv = rig()
    assert drv.read_feedback() == MotorFeedback()


def test_original_units_obey_only_after_autobaud(physics):
    with SabertoothEmulator(physics, autobaud=True) as emu:
        with stt.Sabertooth(config(emu.port, autobaud=False)) as drv:
            drv.set_duty(0.5, 0.5)
            assert emu.wait_for(lambda: emu.stats["not_bauded"] == 3, 5.0)
            assert physics.duty == [0.0, 0.0]                # the host cannot tell: one-way link
        with stt.Sabertooth(config(emu.port, autobaud=True)) as drv:
            drv.set_duty(0.5, 0.5)
            assert emu.wait_for(lambda: physics.duty != [0.0, 0.0], 5.0)


def test_emulator_ignores_bad_checksums_and_resyncs_on_the_next_address(physics):
    emu = SabertoothEmulator(physics)
    with raw_port(emu, 9600, timeout_s=0.2) as port:
        port.write(H("80 00 7F 7E") + H("05 06") + H("80 00") + H("80 00 7F 7F"))
        assert emu.wait_for(lambda: emu.stats["packets"] == 1, 5.0)
        assert (emu.stats["bad_checksum"], emu.stats["noise"], emu.stats["partial"]) == (1, 2, 1)
        assert physics.duty == [1.0, 0.0]
        assert port.read(1) == b""                          # never answers


def test_noise_on_the_line_goes_unnoticed_by_the_driver(rig, physics):
    emu, drv = rig()
    emu.corrupt_next_request(1)
    drv.set_duty(0.5, 0.5)                                  # no error: nothing comes back
    assert emu.wait_for(lambda: emu.stats["bad_checksum"] == 1, 5.0)
    assert physics.duty[0] == 0.0


def test_controller_timeout_stops_the_motors_when_the_driver_goes_silent(rig, physics):
    emu, drv = rig({"serial_timeout_s": 0.2})
    t0 = time.monotonic()
    drv.set_duty(0.6, 0.6)
    assert emu.wait_for(lambda: emu.stats["timeouts"] == 1, 10.0)   # fires only on running motors
    assert time.monotonic() - t0 >= 0.2
    assert physics.duty == [0.0, 0.0]


def test_unplug_while_driving_raises_driver_error_and_the_timeout_still_stops(rig, physics):
    emu, drv = rig({"serial_timeout_s": 0.2})
    drv.set_duty(0.5, 0.5)
    assert delivered(emu, 4)
    emu.unplug()
    with pytest.raises(DriverError) as err:
        # Write-only: the kernel may still buffer a write or two while it hangs the tty up
        # (a USB adapter does the same), but a write fails soon, as a DriverError.
        for _ in range(200):
            drv.set_duty(0.5, 0.5)
            time.sleep(0.01)
    assert not isinstance(err.value, serial.SerialException) and err.value.__cause__ is not None
    assert emu.wait_for(lambda: physics.duty == [0.0, 0.0], 10.0)
    port = emu.replug()
    with stt.Sabertooth(config(port)) as fresh:
        fresh.set_duty(0.3, 0.3)
        assert emu.wait_for(lambda: emu.received()[-2:] == [H("80 00 26 26"), H("80 04 26 2A")], 5.0)
    drv.close()


def test_close_commands_zero_first_and_is_final(rig, physics):
    emu, drv = rig()
    drv.set_duty(0.5, 0.5)
    drv.close()
    assert delivered(emu, 6)
    assert emu.received()[-2:] == [H("80 00 00 00"), H("80 04 00 04")]
    assert emu.wait_for(lambda: physics.duty == [0.0, 0.0], 5.0)
    drv.close()
    for call in (lambda: drv.set_duty(0.1, 0.1), drv.read_feedback, drv.open):
        with pytest.raises(DeviceClosed):
            call()


def test_non_finite_duty_is_rejected_and_nothing_is_sent(rig):
    emu, drv = rig()
    assert delivered(emu, 2)
    with pytest.raises(DriverError):
        drv.set_duty(math.nan, 0.0)
    drv.set_duty(0.0, 0.0)
    assert delivered(emu, 4)
    assert len(emu.received()) == 4
