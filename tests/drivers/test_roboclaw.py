"""RoboClaw packet serial: byte-exact vectors (hardware-reference §1.7), and the real
driver against the emulator on a real pty: duty, feedback, status, the controller's
own timeout, retries, faults, unplug/replug, lifecycle."""

from __future__ import annotations

import contextlib
import math
import time

import pytest
import serial
from hypothesis import given
from hypothesis import strategies as st

from agent.config.drivers import RoboclawConfig
from agent.errors import ChecksumError, DeviceClosed, DeviceTimeout, DriverConfigError, DriverError
from drivers import roboclaw as rc
from drivers.emulators.roboclaw import RoboclawEmulator
from tests.drivers.test_pty import new_physics, raw_fixture, rig_fixture

H = bytes.fromhex


def config(port: str, **kw) -> RoboclawConfig:
    # generous timeouts: a loaded test machine must not trip them unless a test means to
    return RoboclawConfig(**{"kind": "roboclaw", "port": port, "reply_timeout_s": 0.5, "serial_timeout_s": 5.0, **kw})


physics = pytest.fixture(new_physics)
rig = rig_fixture(RoboclawEmulator, lambda port, **kw: rc.Roboclaw(config(port, **kw)))

raw_emu = raw_fixture(RoboclawEmulator, 38400)


# ---------------------------------------------------------------------- wire format

def test_crc16_check_value():
    assert rc.crc16(b"123456789") == 0x31C3


@pytest.mark.parametrize("packet, wire", [
    (rc.write_packet(0x80, rc.CMD_M1_FORWARD, bytes([64])), "80 00 40 73 9E"),
    (rc.write_packet(0x80, rc.CMD_M1_FORWARD, bytes([0])), "80 00 00 3B 5A"),
    (rc.write_packet(0x80, rc.CMD_DUTY_M1M2, H("4000 C000")), "80 22 40 00 C0 00 E0 DF"),
    (rc.write_packet(0x80, rc.CMD_SPEED_M1M2, H("000003E8 FFFFFC18")), "80 25 00 00 03 E8 FF FF FC 18 82 90"),
    (rc.write_packet(0x80, rc.CMD_SET_TIMEOUT, bytes([rc.timeout_value(1.0)])), "80 0E 0A B9 1F"),
])
def test_write_packets_match_reference_vectors(packet, wire):
    assert packet == H(wire)


@pytest.mark.parametrize("request_, data, wire", [
    ("80 10", "00 00 30 39 00", "00 00 30 39 00 CB D5"),   # encoder M1 = 12345, CRC includes 80 10
    ("80 18", "00 7C", "00 7C 88 E1"),                     # main battery 12.4 V
])
def test_read_reply_crc_covers_the_request(request_, data, wire):
    assert rc.with_crc(H(request_) + H(data))[2:] == H(wire)


@given(st.binary(max_size=64))
def test_crc_of_message_with_its_crc_is_zero(data):
    assert rc.crc16(rc.with_crc(data)) == 0


@given(st.floats(-1.0, 1.0))
def test_duty_value_is_within_half_a_step(duty):
    assert abs(rc.duty_value(duty) / rc.DUTY_FULL_SCALE - duty) <= 0.5 / rc.DUTY_FULL_SCALE


def test_status_names_per_width():
    assert rc.status_names(0, 4) == ()
    assert rc.status_names(0x0001, 4) == ("E-Stop",)
    assert rc.status_names(0x0004, 2) == ("E-Stop",)
    assert rc.status_names(0x0001, 2) == ("M1 over-current warning",)
    assert rc.status_names(0x080008, 4) == ("Main voltage high error", "Main voltage low warning")
    assert rc.status_names(0x80000000, 4) == ("bit 31",)


# ---------------------------------------------------------------------- emulator on the wire

def test_emulator_answers_the_reference_vectors(raw_emu):
    emu, port = raw_emu
    emu.set_encoder_counts(m1=12345)
    port.write(H("80 10"))
    assert port.read(7) == H("00 00 30 39 00 CB D5")
    emu.battery_v = 12.4
    port.write(H("80 18"))
    assert port.read(4) == H("00 7C 88 E1")
    port.write(H("80 00 40 73 9E"))
    assert port.read(1) == b"\xff"
    assert emu.motor_duty[0] == pytest.approx(64 / 127)
    port.write(H("80 0E 0A B9 1F"))
    assert port.read(1) == b"\xff"
    assert emu.timeout_s == pytest.approx(1.0)


def test_emulator_is_silent_on_bad_crc_and_other_address(raw_emu):
    emu, port = raw_emu
    port.timeout = 0.2
    port.write(H("80 00 40 73 9F"))                      # CRC low byte off by one
    assert port.read(1) == b""
    port.write(rc.write_packet(0x81, rc.CMD_M1_FORWARD, bytes([64])))
    assert port.read(1) == b""
    assert emu.stats["bad_crc"] == 1 and emu.stats["other_address"] == 1
    assert emu.motor_duty == [0.0, 0.0]
    port.timeout = 0.5
    port.write(H("80 00 40 73 9E"))                      # still in step after both
    assert port.read(1) == b"\xff"


def test_emulator_drops_a_partial_packet_after_a_10ms_gap(raw_emu):
    emu, port = raw_emu
    packet = H("80 22 40 00 C0 00 E0 DF")
    port.write(packet[:3])
    assert emu.wait_for(lambda: emu.stats["partial"] == 1, 5.0)
    assert emu.received()[-1] == packet[:3]
    port.write(packet)
    assert port.read(1) == b"\xff"
    assert emu.motor_duty == pytest.approx([0.5, -0.5], abs=1e-4)


# ---------------------------------------------------------------------- driver through the emulator

def test_open_reads_version_and_sets_the_controller_timeout(rig):
    emu, drv = rig({"serial_timeout_s": 0.5})
    assert emu.received() == [H("80 15"), H("80 0E 05 48 F0")]
    assert drv.version == emu.version
    assert emu.timeout_s == pytest.approx(0.5)
    assert drv.read_version() == emu.version


def test_set_duty_sends_the_vector_and_moves_the_tracks(rig, physics):
    emu, drv = rig()
    drv.set_duty(0.5, -0.5)
    assert emu.received()[-1] == H("80 22 40 00 C0 00 E0 DF")
    assert physics.duty == pytest.approx([0.5, -0.5], abs=1e-4)
    drv.set_duty(3.0, -7.0)                               # clamped
    assert physics.duty == pytest.approx([1.0, -1.0])
    drv.stop()
    assert physics.duty == [0.0, 0.0]


def test_set_speed_sends_the_vector(rig, physics):
    emu, drv = rig()
    drv.set_speed_cps(1000, -1000)
    assert emu.received()[-1] == H("80 25 00 00 03 E8 FF FF FC 18 82 90")
    assert physics.duty == pytest.approx([1000 / emu.qpps, -1000 / emu.qpps])


def test_feedback_decodes_counts_speeds_battery_currents(rig, physics):
    emu, drv = rig()
    drv.set_duty(0.5, -0.25)
    physics.step(2.0)
    fb = drv.read_feedback()
    assert (fb.left_counts, fb.right_counts) == physics.encoder_counts()
    assert fb.left_counts > 0 > fb.right_counts            # negative totals decode as signed int32
    assert fb.left_cps == pytest.approx(physics.encoder_cps()[0], abs=1.0)
    assert fb.right_cps == pytest.approx(physics.encoder_cps()[1], abs=1.0)
    assert fb.battery_v == pytest.approx(physics.battery_voltage_v(), abs=0.05)
    assert (fb.left_a, fb.right_a) == pytest.approx(physics.motor_current_a(), abs=0.01)
    assert (fb.status, fb.status_text) == (0, ())


def test_feedback_reads_the_slow_fields_one_per_set_in_turn(rig):
    emu, drv = rig()
    reads = [bytes((0x80, cmd)) for cmd in (rc.CMD_READ_ENCODERS, rc.CMD_READ_ISPEEDS)]
    slow = [bytes((0x80, cmd)) for cmd in rc.SLOW_READS]
    drv.read_feedback()
    assert emu.received()[-5:] == reads + slow               # the first set after open() reads all
    for turn in range(4):
        drv.read_feedback()
        assert emu.received()[-3:] == reads + [slow[turn % 3]]
    emu.set_status(0x0001)                                 # E-Stop: seen within one turn of the slow reads
    assert any(drv.read_feedback().status_text == ("E-Stop",) for _ in rc.SLOW_READS)
    drv.open()                                             # a fresh link: the whole set again
    drv.read_feedback()
    assert emu.received()[-5:] == reads + slow


def test_encoder_counts_are_signed_int32(rig):
    emu, drv = rig()
    emu.set_encoder_counts(m1=-5, m2=2**31 - 1)
    fb = drv.read_feedback()
    assert (fb.left_counts, fb.right_counts) == (-5, 2**31 - 1)
    emu.set_encoder_counts(m2=2**31)                       # one past the top wraps, as on the device
    assert drv.read_feedback().right_counts == -2**31


def test_channel_mapping_and_inversion(rig, physics):
    emu, drv = rig({"left_channel": 2, "invert_left": True}, left_channel=2)
    drv.set_duty(0.25, 0.5)
    # left track on M2, inverted; right track on M1
    assert emu.received()[-1] == rc.write_packet(0x80, rc.CMD_DUTY_M1M2, H("4000 E000"))
    assert physics.duty == pytest.approx([-0.25, 0.5], abs=1e-4)
    physics.step(1.0)
    fb = drv.read_feedback()
    left, right = physics.encoder_counts()
    assert (fb.left_counts, fb.right_counts) == (-left, right)
    assert fb.left_cps > 0 and fb.right_cps > 0            # both tracks "forward" as the driver sees them


@pytest.mark.parametrize("width, word, names", [
    (4, 0x0001, ("E-Stop",)),
    (2, 0x0004, ("E-Stop",)),
    (4, 0x040000, ("Main voltage high warning",)),
    (2, 0x0003, ("M1 over-current warning", "M2 over-current warning")),
])
def test_status_word_decodes_per_width(rig, width, word, names):
    emu, drv = rig({"status_bytes": width}, status_bytes=width)
    emu.set_status(word)
    fb = drv.read_feedback()
    assert (fb.status, fb.status_text) == (word, names)


def test_estop_holds_the_motors(rig, physics):
    emu, drv = rig()
    drv.set_duty(0.5, 0.5)
    emu.set_status(0x0001)
    assert physics.duty == [0.0, 0.0]
    drv.set_duty(0.5, 0.5)                                 # acked, not obeyed
    assert physics.duty == [0.0, 0.0]
    emu.set_status(0)
    drv.set_duty(0.5, 0.5)
    assert physics.duty == pytest.approx([0.5, 0.5], abs=1e-4)


def test_controller_timeout_stops_the_motors_when_the_driver_goes_silent(rig, physics):
    emu, drv = rig({"serial_timeout_s": 0.2})
    t0 = time.monotonic()
    drv.set_duty(0.6, 0.6)
    assert emu.wait_for(lambda: emu.motor_duty == [0.0, 0.0], 10.0)
    assert time.monotonic() - t0 >= 0.2
    assert physics.duty == [0.0, 0.0]
    assert emu.stats["timeouts"] == 1


def test_streaming_commands_keeps_the_motors_running(rig, physics):
    emu, drv = rig({"serial_timeout_s": 1.0})
    end = time.monotonic() + 1.5
    while time.monotonic() < end:
        drv.set_duty(0.3, 0.3)
        time.sleep(0.05)
    assert emu.stats["timeouts"] == 0
    assert physics.duty == pytest.approx([0.3, 0.3], abs=1e-4)


# ---------------------------------------------------------------------- retries and faults

def test_one_bad_reply_crc_is_retried(rig):
    emu, drv = rig()
    emu.corrupt_next_reply(1)
    fb = drv.read_feedback()
    assert fb.status == 0
    assert emu.stats["corrupted_replies"] == 1
    assert emu.received().count(H("80 4E")) == 2          # the encoder read was sent again


def test_bad_reply_crc_three_times_raises_checksum_error(rig):
    emu, drv = rig({"reply_timeout_s": 0.1})
    emu.corrupt_next_reply(3)
    with pytest.raises(ChecksumError) as err:
        drv.read_feedback()
    assert err.value.device == "motor"
    assert emu.received().count(H("80 4E")) == 3
    assert drv.read_feedback().status == 0                 # usable again


def test_wrong_ack_byte_is_a_checksum_error(rig):
    emu, drv = rig({"reply_timeout_s": 0.1})
    emu.corrupt_next_reply(3)
    with pytest.raises(ChecksumError, match="0xFE"):
        drv.set_duty(0.1, 0.1)


def test_one_missing_ack_is_retried(rig, physics):
    emu, drv = rig()
    emu.drop_next_reply(1)
    drv.set_duty(0.5, -0.5)
    assert emu.received()[-2:] == [H("80 22 40 00 C0 00 E0 DF")] * 2
    assert physics.duty == pytest.approx([0.5, -0.5], abs=1e-4)


def test_missing_ack_three_times_raises_device_timeout(rig):
    emu, drv = rig({"reply_timeout_s": 0.1})
    emu.drop_next_reply(3)
    with pytest.raises(DeviceTimeout):
        drv.set_duty(0.5, -0.5)
    assert emu.received()[-3:] == [H("80 22 40 00 C0 00 E0 DF")] * 3
    drv.set_duty(0.0, 0.0)


def test_short_reply_raises_device_timeout(rig):
    emu, drv = rig({"reply_timeout_s": 0.1})
    emu.truncate_next_reply(3)
    with pytest.raises(DeviceTimeout):
        drv.read_feedback()


def test_noise_on_the_request_is_retried(rig, physics):
    emu, drv = rig()
    emu.corrupt_next_request(1)                            # bad CRC at the controller: it stays silent
    drv.set_duty(0.5, -0.5)
    assert emu.stats["bad_crc"] == 1
    assert physics.duty == pytest.approx([0.5, -0.5], abs=1e-4)
    emu.corrupt_next_request(1)                            # 80 4E arrives as 80 4F: reply CRC mismatch
    drv.read_feedback()
    assert emu.stats["corrupted_requests"] == 2


# ---------------------------------------------------------------------- late replies

DUTY_02 = rc.write_packet(0x80, rc.CMD_DUTY_M1M2, bytes.fromhex("1999 1999"))   # set_duty(0.2, 0.2)


def stale_reply(cmd: int = rc.CMD_READ_ENCODERS, values: tuple[int, int] = (0, 0)) -> bytes:
    """A reply to ``80 cmd`` (both encoders, or both speeds): what a late reply to an earlier feedback
    read looks like."""
    return rc.with_crc(bytes((0x80, cmd)) + b"".join(v.to_bytes(4, "big") for v in values))[2:]


def test_a_late_reply_before_an_ack_is_skipped_not_taken_for_a_wrong_ack(rig, physics):
    """The bytes of an earlier read's reply arrive after the write's input flush, in front of its ack
    (they were read as "acked command 34 with 0x00": a retry, and three of them a failed write)."""
    emu, drv = rig({"reply_timeout_s": 0.3})
    emu.prefix_next_reply(stale_reply())
    drv.set_duty(0.2, 0.2)
    assert emu.received().count(DUTY_02) == 1                          # acked at the first attempt
    assert physics.duty == pytest.approx([0.2, 0.2], abs=1e-4)


def test_a_late_reply_before_a_read_reply_is_skipped(rig, physics):
    emu, drv = rig({"reply_timeout_s": 0.3})
    drv.read_feedback()                                     # the first set reads everything
    physics.set_duty(0.5, 0.5)
    physics.step(0.5)
    assert emu.encoder_counts()[0] > 7
    emu.prefix_next_reply(stale_reply(rc.CMD_READ_ISPEEDS, (7, 7)))   # a speeds reply before the encoders'
    emu.clear_received()
    fb = drv.read_feedback()
    assert emu.received().count(H("80 4E")) == 1                        # no retry
    assert fb.left_counts == emu.encoder_counts()[0] > 7                # its own reply, not the stale one
    assert fb.left_cps == pytest.approx(physics.encoder_cps()[0], abs=1)


def test_replies_late_past_the_timeout_are_not_read_as_the_next_answers(rig, physics):
    """An emulator that answers late, behind the real driver: every reply to a feedback read comes
    after the read timed out (three times), so they land in front of the next write's ack."""
    emu, drv = rig({"reply_timeout_s": 0.3})
    emu.pace(115200, 0.001)
    drv.read_feedback()                                     # the first set reads everything
    emu.delay_next_reply(3, 1.0)                            # a stall: the 3 attempts' replies 1 s late
    with contextlib.suppress(DeviceTimeout):                # 3 x 0.3 s: given up before they came (a
        drv.read_feedback()                                 # loaded machine may get there later)
    drv.set_duty(0.2, 0.2)                                  # its ack comes behind the 3 late replies
    assert emu.received().count(DUTY_02) == 1
    assert physics.duty == pytest.approx([0.2, 0.2], abs=1e-4)
    fb = drv.read_feedback()
    assert fb.left_counts <= emu.encoder_counts()[0] and fb.left_cps is not None


def test_a_blocking_factory_port_still_times_out(physics):
    with RoboclawEmulator(physics) as emu:
        cfg = config(emu.port, reply_timeout_s=0.1)
        drv = rc.Roboclaw(cfg, serial_factory=lambda: serial.Serial(emu.port, 38400, timeout=None))
        drv.open()
        emu.drop_next_reply(3)
        with pytest.raises(DeviceTimeout):
            drv.set_duty(0.2, 0.2)
        drv.close()


# ---------------------------------------------------------------------- unplug / replug / lifecycle

def test_unplug_while_driving_raises_driver_error(rig, physics):
    emu, drv = rig({"serial_timeout_s": 0.2})
    drv.set_duty(0.5, 0.5)
    emu.unplug()
    for call in (lambda: drv.set_duty(0.5, 0.5), drv.read_feedback):
        with pytest.raises(DriverError) as err:
            call()
        assert not isinstance(err.value, serial.SerialException)
        assert err.value.__cause__ is not None
    # the controller is still powered: its own serial timeout stops the tracks
    assert emu.wait_for(lambda: physics.duty == [0.0, 0.0], 10.0)
    drv.close()                                            # never raises


def test_replug_gives_a_port_a_new_driver_opens(rig, physics):
    emu, old = rig()
    emu.unplug()
    with pytest.raises(DriverError):
        old.set_duty(0.1, 0.1)
    port = emu.replug()
    drv = rc.Roboclaw(config(port))
    drv.open()
    drv.set_duty(0.4, 0.4)
    assert physics.duty == pytest.approx([0.4, 0.4], abs=1e-4)
    drv.close()


def test_replug_keeps_a_linked_path(physics, tmp_path):
    link = str(tmp_path / "ttyROBOCLAW")
    with RoboclawEmulator(physics, link=link) as emu:
        assert emu.port == link
        with rc.Roboclaw(config(link)) as drv:
            drv.set_duty(0.1, 0.1)
            emu.unplug()
            with pytest.raises(DriverError) as err:
                rc.Roboclaw(config(link)).open()           # the by-id style name is gone
            assert err.value.errno == 2
            assert emu.replug() == link
        with rc.Roboclaw(config(link)) as drv:
            drv.set_duty(0.2, 0.2)
        assert physics.duty == [0.0, 0.0]                  # the context exit commanded zero


def test_close_commands_zero_first_and_is_final(rig, physics):
    emu, drv = rig()
    drv.set_duty(0.5, 0.5)
    drv.close()
    assert emu.received()[-1] == rc.write_packet(0x80, rc.CMD_DUTY_M1M2, bytes(4))
    assert physics.duty == [0.0, 0.0]
    drv.close()
    for call in (lambda: drv.set_duty(0.1, 0.1), drv.read_feedback, drv.stop, drv.open):
        with pytest.raises(DeviceClosed):
            call()


def test_non_finite_input_is_rejected_and_nothing_is_sent(rig, physics, caplog):
    emu, drv = rig()
    drv.set_duty(0.3, 0.3)
    sent = len(emu.received())
    for call in (lambda: drv.set_duty(math.nan, 0.0), lambda: drv.set_duty(0.0, math.inf),
                 lambda: drv.set_speed_cps(math.inf, 0), lambda: drv.set_duty("fast", 0.0)):
        with pytest.raises(DriverError):
            call()
    assert len(emu.received()) == sent
    assert physics.duty == pytest.approx([0.3, 0.3], abs=1e-4)
    assert "not a finite" in caplog.text


def test_open_failures_are_driver_errors(physics):
    with pytest.raises(DriverError) as err:
        rc.Roboclaw(config("/dev/does-not-exist-ttyACM9")).open()
    assert err.value.errno == 2
    with pytest.raises(DriverConfigError, match="no serial transport for 'sim://'"):
        rc.Roboclaw(config("sim://")).open()               # no opener registered for sim://
    with RoboclawEmulator(physics, address=0x81) as emu:   # answers another address: silence
        drv = rc.Roboclaw(config(emu.port, reply_timeout_s=0.05))
        with pytest.raises(DeviceTimeout):
            drv.open()
        assert not drv.is_open
        with pytest.raises(DriverError, match="not open"):
            drv.set_duty(0.1, 0.1)


def test_default_port_accepts_pyserial_urls():
    drv = rc.Roboclaw(config("loop://", reply_timeout_s=0.05))
    with pytest.raises(DeviceTimeout):                    # loop:// echoes the request back: no version reply
        drv.open()
