"""Line protocol: the codec against docs/line-protocol.md and the NMEA checksum, the
emulated firmware on the wire, and the real driver through it on a real pty: READY,
T, P scaling, E/? feedback, the firmware watchdog, retries, restart, unplug/replug."""

from __future__ import annotations

import math
import re
import time
from pathlib import Path

import pytest
import serial
from hypothesis import given
from hypothesis import strategies as st

from agent.config.drivers import LineMotorConfig
from agent.errors import ChecksumError, DeviceClosed, DeviceTimeout, DriverError
from drivers import linemotor as lp
from drivers.emulators.linemotor import LineMotorEmulator
from tests.drivers.test_pty import new_physics, raw_fixture, rig_fixture

DOC = Path(__file__).resolve().parents[2] / "docs" / "line-protocol.md"


def config(port: str, **kw) -> LineMotorConfig:
    # a generous firmware watchdog: a loaded test machine must not trip it unless a test means to
    return LineMotorConfig(**{"kind": "line", "port": port, "reply_timeout_s": 0.5, "ready_timeout_s": 3.0,
                              "firmware_timeout_s": 5.0, **kw})


physics = pytest.fixture(new_physics)
rig = rig_fixture(LineMotorEmulator, lambda port, **kw: lp.LineMotor(config(port, **kw)))

wire = raw_fixture(LineMotorEmulator, 115200, banner=b"READY tankfw 1.0.0\r\n")


def ask(port: serial.Serial, line: bytes) -> bytes:
    port.write(line)
    return port.readline()


# ---------------------------------------------------------------------- codec

def test_checksum_is_the_nmea_xor():
    body = b"GPGGA,123519,4807.038,N,01131.000,E,1,08,0.9,545.4,M,46.9,M,,"
    assert lp.checksum(body) == 0x47


def test_encode_line_formats():
    assert lp.encode_line("P 120 -120") == b"P 120 -120\n"
    assert lp.encode_line("P 120 -120", with_checksum=True) == b"P 120 -120 *7D\n"
    assert lp.encode_line("P 120 -120", seq=7, with_checksum=True) == b"#7 P 120 -120 *49\n"
    assert lp.encode_line("OK", seq=7, with_checksum=True, eol="\r\n") == b"#7 OK *30\r\n"


def test_every_example_line_of_the_protocol_page_checks():
    block = DOC.read_text().split("## 8.")[1].split("```")[1]
    lines = [m.group(1) for m in re.finditer(r"^[<>] (.+?)(?:\s{2,}\(.*)?$", block, re.M)]
    assert len(lines) == 13
    for text in lines:
        line = lp.parse_line(text.encode() + b"\n")
        assert line.checked or line.words[0] == "READY"


@given(st.integers(0, lp.SEQ_MAX), st.lists(st.from_regex(r"[A-Z?][A-Za-z0-9-]{0,5}", fullmatch=True),
                                            min_size=1, max_size=4), st.booleans())
def test_parse_inverts_encode(seq, words, with_checksum):
    line = lp.parse_line(lp.encode_line(" ".join(words), seq=seq, with_checksum=with_checksum))
    assert (line.seq, line.words, line.checked) == (seq, tuple(words), with_checksum)


@pytest.mark.parametrize("raw, code", [
    (b"P " + b"1" * 70 + b"\n", "LEN"),
    (b"P 1 2 *7\n", "CHK"),
    (b"P 1 2 *ZZ\n", "CHK"),
    (b"P 120 -120 *7E\n", "CHK"),
    (b"#70000 P 1 2\n", "ARG"),
    (b"#x P 1 2\n", "ARG"),
    (b"P \xff 2\n", "ARG"),
])
def test_parse_line_errors(raw, code):
    with pytest.raises(lp.LineError) as err:
        lp.parse_line(raw)
    assert err.value.code == code


@pytest.mark.parametrize("token", ["+5", "1_0", " 5", "5.0", "", "--1", "12345678901", "256"])
def test_parse_int_is_strict(token):
    with pytest.raises(lp.LineError):
        lp.parse_int(token, -255, 255)


def test_flag_names():
    assert lp.flag_names(0) == ()
    assert lp.flag_names(0x01) == ("TIMEOUT",)
    assert lp.flag_names(0x81) == ("TIMEOUT", "bit 7")


# ---------------------------------------------------------------------- emulated firmware on the wire

def test_firmware_commands_and_errors(wire, physics):
    emu, port = wire
    assert ask(port, b"T 5000\n") == b"OK\r\n"
    assert ask(port, b"#7 P 120 -120 *49\n") == b"#7 OK *30\r\n"
    assert emu.pwm == [120, -120] and physics.duty == pytest.approx([120 / 255, -120 / 255])
    assert ask(port, b"V\n") == b"V tankfw 1.0.0\r\n"
    assert ask(port, b"#3 P 300 0\n") == b"#3 ERR ARG\r\n"
    assert ask(port, b"P 1\n") == b"ERR ARG\r\n"
    assert ask(port, b"#4 X\n") == b"#4 ERR CMD\r\n"
    assert ask(port, b"#5 P 1 2 *00\n") == lp.encode_line("ERR CHK", with_checksum=True, eol="\r\n")
    assert ask(port, b"P " + b"9" * 80 + b"\n") == b"ERR LEN\r\n"
    assert ask(port, b"T 99\n") == b"ERR ARG\r\n"
    assert emu.pwm == [120, -120]                          # no ERR line changed anything
    port.write(b"\n")                                      # empty line: no reply
    assert ask(port, b"?\r\n") == b"ST 00 120 -120\r\n"
    assert ask(port, b"S\n") == b"OK\r\n" and physics.duty == [0.0, 0.0]


def test_firmware_encoders_and_reset(wire, physics):
    emu, port = wire
    ask(port, b"P 255 -255\n")
    physics.step(0.5)
    words = ask(port, b"E\n").split()
    assert words[0] == b"E" and (int(words[1]), int(words[2])) == physics.encoder_counts()
    assert ask(port, b"R\n") == b"OK\r\n"
    assert ask(port, b"E\n").split()[1:3] == [b"0", b"0"]


def test_firmware_ignores_input_while_booting(physics):
    # 1 s of boot: under load, opening the port took long enough for a 0.3 s boot to end first
    with LineMotorEmulator(physics, boot_delay_s=1.0) as emu, \
            serial.Serial(emu.port, 115200, timeout=0.1) as port:
        port.write(b"P 100 100\n")
        assert port.readline() == b""
        assert emu.stats["lost_while_booting"] > 0 and emu.pwm == [0, 0]
        port.timeout = 5.0
        assert port.readline() == b"READY tankfw 1.0.0\r\n"


# ---------------------------------------------------------------------- driver through the firmware

def test_open_waits_for_ready_and_sets_the_watchdog(rig):
    emu, drv = rig({"firmware_timeout_s": 0.3}, boot_delay_s=0.3)
    assert drv.firmware == "tankfw 1.0.0"
    assert emu.received() == [lp.encode_line("T 300", seq=1, with_checksum=True)]
    assert emu.watchdog_ms == 300


def test_open_without_banner_probes_with_v(physics):
    with LineMotorEmulator(physics, boot_delay_s=0.0, reset_on_open=False) as emu:
        assert emu.wait_for(lambda: emu.booted, 5.0)      # READY went out before anyone opened the port
        with lp.LineMotor(config(emu.port, ready_timeout_s=0.2)) as drv:
            assert drv.firmware == "tankfw 1.0.0"
            assert [lp.parse_line(r).words[0] for r in emu.received()] == ["V", "T"]


def test_open_fails_on_a_silent_board(physics):
    with LineMotorEmulator(physics, boot_delay_s=60.0) as emu:   # stuck in its bootloader
        drv = lp.LineMotor(config(emu.port, ready_timeout_s=0.2, reply_timeout_s=0.05))
        with pytest.raises(DeviceTimeout):
            drv.open()
        assert not drv.is_open


def test_set_duty_scales_by_max_pwm_and_inverts(rig, physics):
    emu, drv = rig({"max_pwm": 200, "invert_left": True})
    drv.set_duty(0.5, -1.0)
    assert lp.parse_line(emu.received()[-1]).words == ("P", "-100", "-200")
    assert physics.duty == pytest.approx([-100 / 255, -200 / 255])
    drv.stop()
    assert lp.parse_line(emu.received()[-1]).words == ("S",)
    assert physics.duty == [0.0, 0.0]


def test_feedback_counts_speeds_and_status(rig, physics):
    emu, drv = rig()
    drv.set_duty(1.0, -0.5)
    physics.step(1.0)
    fb = drv.read_feedback()
    assert (fb.left_counts, fb.right_counts) == physics.encoder_counts()
    assert fb.left_cps is None and fb.battery_v is None    # one E reading: no rate yet
    assert (fb.status, fb.status_text) == (0, ())
    physics.step(0.5)
    fb = drv.read_feedback()
    assert (fb.left_counts, fb.right_counts) == physics.encoder_counts()
    assert fb.left_cps > 0 > fb.right_cps


def test_firmware_watchdog_stops_and_polling_does_not_feed_it(rig, physics):
    emu, drv = rig({"firmware_timeout_s": 0.2})
    t0 = time.monotonic()
    drv.set_duty(0.5, 0.5)
    while physics.duty != [0.0, 0.0] and time.monotonic() - t0 < 10.0:
        drv.read_feedback()                                # E and ? only
    assert time.monotonic() - t0 >= 0.2
    assert physics.duty == [0.0, 0.0]
    assert drv.read_feedback().status_text == ("TIMEOUT",)
    assert emu.stats["timeouts"] == 1


def test_firmware_watchdog_flag_clears_on_the_next_p(wire, physics):
    emu, port = wire
    assert ask(port, b"T 100\n") == b"OK\r\n"
    assert ask(port, b"P 10 10\n") == b"OK\r\n"
    assert emu.wait_for(lambda: emu.flags == lp.FLAG_TIMEOUT, 10.0)
    assert ask(port, b"?\n") == b"ST 01 0 0\r\n"
    assert ask(port, b"T 5000\n") == b"OK\r\n"          # long enough not to fire again here
    assert ask(port, b"P 10 -10\n") == b"OK\r\n"
    assert ask(port, b"?\n") == b"ST 00 10 -10\r\n"


def test_without_checksums_lines_are_plain(rig, physics):
    emu, drv = rig({"checksum": False})
    drv.set_duty(0.2, 0.2)
    assert emu.received()[-1] == b"#2 P 51 51\n"
    assert drv.read_feedback().status == 0


# ---------------------------------------------------------------------- retries and faults

def test_one_corrupt_reply_is_retried(rig, physics):
    emu, drv = rig()
    emu.corrupt_next_reply(1)
    drv.set_duty(0.5, 0.5)
    assert emu.received()[-2] == b"\n"                     # resync before the retry
    assert [lp.parse_line(r).words[0] for r in emu.received() if r.strip()][-2:] == ["P", "P"]
    assert physics.duty == pytest.approx([128 / 255, 128 / 255])


def test_corrupt_replies_three_times_raise_checksum_error(rig):
    emu, drv = rig({"reply_timeout_s": 0.05})
    emu.corrupt_next_reply(3)
    with pytest.raises(ChecksumError):
        drv.read_feedback()
    assert drv.read_feedback().status == 0


def test_err_chk_from_line_noise_is_retried(rig, physics):
    emu, drv = rig()
    emu.corrupt_next_request(1)
    drv.set_duty(-0.5, 0.5)
    assert emu.stats["rejected"] == 1
    assert emu.pwm == [-128, 128]


def test_missing_replies_raise_device_timeout(rig):
    emu, drv = rig({"reply_timeout_s": 0.05})
    emu.drop_next_reply(3)
    with pytest.raises(DeviceTimeout):
        drv.set_duty(0.1, 0.1)
    assert emu.stats["commands"] == 4                      # T, then P three times
    drv.set_duty(0.1, 0.1)


def test_a_cut_reply_times_out_and_is_retried(rig, physics):
    emu, drv = rig({"reply_timeout_s": 0.2})
    emu.truncate_next_reply(1)                             # "#2 OK" arrives cut: timeout, retry as #3
    drv.set_duty(0.3, 0.3)
    assert drv.read_feedback().status == 0 and emu.stats["truncated_replies"] == 1


def test_stale_replies_are_skipped_by_sequence_number(rig, physics):
    emu, drv = rig()
    physics.step(1.0)
    emu.prefix_next_reply(b"#999 E 1 2 3\r\n")             # a late answer to some earlier request
    fb = drv.read_feedback()
    assert (fb.left_counts, fb.right_counts) == physics.encoder_counts()


def test_a_banner_among_replies_means_the_board_restarted(rig):
    emu, drv = rig()
    emu.prefix_next_reply(b"READY tankfw 1.0.0\r\n")
    with pytest.raises(DriverError, match="restarted"):
        drv.set_duty(0.1, 0.1)


def test_firmware_restart_is_reported_and_a_reopen_restores_the_watchdog(rig, physics):
    emu, drv = rig({"firmware_timeout_s": 0.3})
    emu.reset()
    assert emu.wait_for(lambda: emu.booted, 5.0)
    assert emu.watchdog_ms == lp.WATCHDOG_MS_DEFAULT
    with pytest.raises(DriverError, match="restarted"):
        drv.set_duty(0.2, 0.2)
    drv.close()                                            # the supervisor drops the old driver first
    with lp.LineMotor(config(emu.port, firmware_timeout_s=0.3, ready_timeout_s=0.2)) as fresh:
        assert emu.watchdog_ms == 300
        fresh.set_duty(0.2, 0.2)


def test_unplug_stops_the_usb_powered_board_and_replug_boots_it(rig, physics):
    emu, drv = rig()
    drv.set_duty(0.5, 0.5)
    emu.unplug()
    assert physics.duty == [0.0, 0.0]
    with pytest.raises(DriverError) as err:
        drv.set_duty(0.5, 0.5)
    assert not isinstance(err.value, serial.SerialException) and err.value.__cause__ is not None
    port = emu.replug()
    with lp.LineMotor(config(port)) as fresh:              # finds the new READY
        fresh.set_duty(0.5, 0.5)
        assert fresh.firmware == "tankfw 1.0.0" and emu.pwm == [128, 128]
    drv.close()


def test_close_sends_stop_and_is_final(rig, physics):
    emu, drv = rig()
    drv.set_duty(0.5, 0.5)
    drv.close()
    assert lp.parse_line(emu.received()[-1]).words == ("S",)
    assert physics.duty == [0.0, 0.0]
    drv.close()
    for call in (lambda: drv.set_duty(0.1, 0.1), drv.read_feedback, drv.open):
        with pytest.raises(DeviceClosed):
            call()


def test_non_finite_duty_is_rejected_and_nothing_is_sent(rig, physics):
    emu, drv = rig()
    sent = len(emu.received())
    with pytest.raises(DriverError):
        drv.set_duty(0.0, math.nan)
    assert len(emu.received()) == sent


# ------------------------------------------------------------------ firmware watchdog trips, as the driver counts them

def test_a_trip_seen_in_the_status_is_counted_and_logged_once(rig, physics, caplog):
    emu, drv = rig({"firmware_timeout_s": 0.2})
    drv.set_duty(0.5, 0.5)
    assert emu.wait_for(lambda: emu.stats["timeouts"] == 1, 10.0)
    with caplog.at_level("WARNING", logger="drivers.linemotor"):
        assert drv.read_feedback().status_text == ("TIMEOUT",)
        assert drv.read_feedback().status_text == ("TIMEOUT",)    # the same trip: counted once
        drv.set_duty(0.5, 0.5)                                   # and not again by the P that clears it
    assert drv.watchdog_trips == 1
    trips = [r.getMessage() for r in caplog.records if "firmware watchdog tripped" in r.getMessage()]
    assert len(trips) == 1 and "status TIMEOUT" in trips[0] and "watchdog 200 ms" in trips[0], trips
    assert drv.read_feedback().status == 0 and drv.watchdog_trips == 1


def test_a_p_after_more_than_the_interval_counts_the_trip_it_must_have_caused(rig, physics, caplog):
    emu, drv = rig({"firmware_timeout_s": 0.2})
    drv.set_duty(0.2, 0.2)
    acked = time.monotonic()                                        # after the OK: the host's gap starts no later
    # the next P goes out more than the interval after it (no ? read: only the gap tells)
    assert emu.wait_for(lambda: emu.stats["timeouts"] == 1 and time.monotonic() - acked > 0.2, 10.0)
    with caplog.at_level("WARNING", logger="drivers.linemotor"):
        drv.set_duty(0.2, 0.2)
    assert drv.watchdog_trips == 1
    assert any(re.search(r"tripped \(no P for \d+ ms; watchdog 200 ms\)", r.getMessage()) for r in caplog.records)


def test_a_fed_firmware_counts_no_trip_and_a_board_unfed_before_the_open_is_not_ours(physics):
    # a native-USB board running since before the open (no reset): its TIMEOUT is from before T
    with LineMotorEmulator(physics, boot_delay_s=0.0, reset_on_open=False) as emu:
        assert emu.wait_for(lambda: emu.flags == lp.FLAG_TIMEOUT, 10.0)
        with lp.LineMotor(config(emu.port, ready_timeout_s=0.2)) as drv:
            assert drv.read_feedback().status_text == ("TIMEOUT",)
            drv.set_duty(0.1, 0.1)
            assert drv.read_feedback().status == 0
            assert drv.watchdog_trips == 0
