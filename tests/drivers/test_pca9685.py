"""PCA9685 driver against the register-map emulator; frequency and counts tables of reference §6.4/§6.6."""

from __future__ import annotations

import math

import pytest

from agent.config.drivers import Pca9685Config
from agent.errors import DeviceClosed, DriverError
from drivers.errors import DeviceReset
from drivers.emulators.i2c import FakeSMBus, ManualClock, Transaction
from drivers.emulators.pca9685 import Pca9685Chip
from drivers.emulators.tank import TankPhysics
from drivers.pca9685 import Pca9685, actual_frequency_hz, prescale_for, pulse_counts

ADDR = 0x40


def make(**cfg_kw):
    clock = ManualClock()
    physics = TankPhysics(clock=clock)
    chip = Pca9685Chip(physics, clock=clock)
    bus = FakeSMBus({ADDR: chip})
    servo = Pca9685(Pca9685Config(kind="pca9685", **cfg_kw), bus, sleep=clock.sleep)
    return servo, chip, bus, physics, clock


@pytest.mark.parametrize("freq, prescale", [(50, 121), (60, 101), (200, 30), (1000, 5), (1526, 3)])
def test_prescale_table(freq, prescale):
    assert prescale_for(freq) == prescale


def test_actual_frequency_at_50_hz():
    assert actual_frequency_hz(121) == pytest.approx(50.03, abs=0.005)


@pytest.mark.parametrize("pulse_us, counts", [(500, 102), (1000, 205), (1500, 307), (2000, 410), (2500, 512)])
def test_counts_table_at_prescale_121(pulse_us, counts):
    assert pulse_counts(pulse_us, actual_frequency_hz(121)) == counts


def test_open_sequence_sleep_prescale_wake_restart():
    servo, chip, bus, _, clock = make()
    servo.open()
    writes = [w for w in bus.writes(ADDR) if len(w) == 2]
    assert writes == [
        bytes([0x00, 0x11]),            # MODE1: SLEEP (was already asleep at power-on), RESTART written 0
        bytes([0xFE, 121]),             # PRE_SCALE while asleep
        bytes([0x01, 0x04]),            # MODE2 totem-pole
        bytes([0x00, 0x21]),            # wake, AI on
        bytes([0x00, 0xA1]),            # RESTART after the oscillator start-up
    ]
    assert clock() >= 500e-6
    assert chip.prescale == 121
    assert chip.regs[0x00] & 0x20 and not chip.regs[0x00] & 0x90     # AI on, SLEEP and RESTART clear


@pytest.mark.parametrize("channel, pulse_us, counts", [(0, 1500, 307), (15, 500, 102), (7, 2500, 512)])
def test_set_pulse_writes_the_four_channel_registers_in_one_block(channel, pulse_us, counts):
    servo, chip, bus, physics, _ = make()
    servo.open()
    bus.log.clear()
    servo.set_pulse_us(channel, pulse_us)
    assert list(bus.log) == [Transaction(ADDR, "write", bytes([0x06 + 4 * channel, 0, 0, counts & 0xFF, counts >> 8]))]
    expected_us = counts * 1e6 / (actual_frequency_hz(121) * 4096)
    assert chip.pulse_us(channel) == pytest.approx(expected_us)
    assert physics.servo_pulse_us[channel] == pytest.approx(expected_us)
    assert abs(expected_us - pulse_us) < 0.5e6 / (50 * 4096)          # within half a count


def test_release_and_zero_pulse_turn_the_channel_full_off():
    servo, chip, bus, physics, _ = make()
    servo.open()
    servo.set_pulse_us(3, 1500)
    servo.release(3)
    assert chip.regs[0x06 + 12 + 3] == 0x10
    assert chip.pulse_us(3) == 0.0 and physics.servo_pulse_us[3] == 0.0
    servo.set_pulse_us(4, 1500)
    servo.set_pulse_us(4, 0)
    assert chip.pulse_us(4) == 0.0


def test_close_releases_every_channel():
    servo, chip, _, physics, _ = make()
    servo.open()
    for ch in range(16):
        servo.set_pulse_us(ch, 1000 + 50 * ch)
    servo.close()
    servo.close()
    assert all(chip.pulse_us(ch) == 0.0 for ch in range(16))
    assert all(us == 0.0 for us in physics.servo_pulse_us.values())
    with pytest.raises(DeviceClosed):
        servo.set_pulse_us(0, 1500)


@pytest.mark.parametrize("channel, pulse_us", [(16, 1500), (-1, 1500), (True, 1500), (1.0, 1500),
                                               (0, -1.0), (0, math.nan), (0, 20_000), (0, "1500")])
def test_bad_input_is_refused_and_nothing_is_written(channel, pulse_us, caplog):
    servo, _, bus, _, _ = make()
    servo.open()
    before = bus.transactions[ADDR]
    with pytest.raises(DriverError):
        servo.set_pulse_us(channel, pulse_us)
    assert bus.transactions[ADDR] == before
    assert "nothing written" in caplog.text


def test_open_keeps_running_channels():
    servo, chip, bus, _, clock = make()
    servo.open()
    servo.set_pulse_us(2, 1500)
    again = Pca9685(Pca9685Config(kind="pca9685"), bus, sleep=clock.sleep)
    again.open()
    assert chip.pulse_us(2) == pytest.approx(1498.2, abs=0.1)


@pytest.mark.parametrize("code", [121, 110, 5])
def test_error_bursts_keep_errno_then_recover(code):
    servo, chip, bus, _, _ = make()
    servo.open()
    bus.inject(ADDR, code, 2)
    for _ in range(2):
        with pytest.raises(DriverError) as exc:
            servo.set_pulse_us(1, 1500)
        assert exc.value.errno == code
    servo.set_pulse_us(1, 1500)
    assert chip.pulse_us(1) > 0


def test_other_oscillator_and_frequency():
    servo, chip, *_ = make(frequency_hz=60.0, oscillator_hz=27e6)
    servo.open()
    assert chip.prescale == round(27e6 / (4096 * 60)) - 1 == 109


# ------------------------------------------------------------------ emulator behaviour (§6.7)

def test_emulator_power_on_values():
    chip = Pca9685Chip()
    assert (chip.regs[0x00], chip.regs[0x01], chip.regs[0xFE]) == (0x11, 0x04, 0x1E)
    assert all(chip.regs[0x09 + 4 * n] == 0x10 for n in range(16))


def test_emulator_ignores_prescale_writes_while_awake_and_clamps_to_3():
    bus = FakeSMBus({ADDR: Pca9685Chip()})
    bus.write_byte_data(ADDR, 0xFE, 1)               # asleep at power-on: accepted, clamped
    assert bus.read_byte_data(ADDR, 0xFE) == 3
    bus.write_byte_data(ADDR, 0x00, 0x01)            # wake
    bus.write_byte_data(ADDR, 0xFE, 121)
    assert bus.read_byte_data(ADDR, 0xFE) == 3


def test_emulator_auto_increment_only_with_ai_and_wraps_after_0x45():
    bus = FakeSMBus({ADDR: Pca9685Chip()})
    chip = bus.chip(ADDR)
    bus.write_i2c_block_data(ADDR, 0x06, [1, 2])     # AI off: both bytes land in 0x06
    assert (chip.regs[0x06], chip.regs[0x07]) == (2, 0)
    bus.write_byte_data(ADDR, 0x00, 0x31)            # AI on (still asleep)
    bus.write_i2c_block_data(ADDR, 0x44, [0x11, 0x00, 0x31, 0x05])
    assert (chip.regs[0x44], chip.regs[0x45], chip.regs[0x00], chip.regs[0x01]) == (0x11, 0x00, 0x31, 0x05)
    assert bus.read_i2c_block_data(ADDR, 0xFE, 2) == [0x1E, 0x31]    # PRE_SCALE, then rolls over to MODE1


def test_emulator_all_led_registers_load_every_channel_and_read_zero():
    bus = FakeSMBus({ADDR: Pca9685Chip()})
    chip = bus.chip(ADDR)
    bus.write_byte_data(ADDR, 0xFD, 0x00)
    bus.write_byte_data(ADDR, 0xFC, 0x33)
    assert all(chip.regs[0x08 + 4 * n] == 0x33 and chip.regs[0x09 + 4 * n] == 0 for n in range(16))
    assert bus.read_byte_data(ADDR, 0xFC) == 0


def test_emulator_sleep_stops_outputs_and_restart_resumes_after_500us():
    servo, chip, bus, physics, clock = make()
    servo.open()
    servo.set_pulse_us(0, 1500)
    bus.write_byte_data(ADDR, 0x00, 0x31)            # SLEEP with a channel running
    assert chip.regs[0x00] & 0x80 and chip.pulse_us(0) == 0.0 and physics.servo_pulse_us[0] == 0.0
    bus.write_byte_data(ADDR, 0x00, 0x21)            # wake
    bus.write_byte_data(ADDR, 0x00, 0xA1)            # RESTART too early: ignored
    assert chip.regs[0x00] & 0x80 and chip.pulse_us(0) == 0.0
    clock.sleep(500e-6)
    bus.write_byte_data(ADDR, 0x00, 0xA1)
    assert not chip.regs[0x00] & 0x80
    assert chip.pulse_us(0) == pytest.approx(1498.2, abs=0.1) == physics.servo_pulse_us[0]


def test_a_power_cycled_chip_is_found_and_set_up_again_with_its_last_outputs():
    servo, chip, bus, physics, _ = make()
    servo.open()
    servo.set_pulse_us(0, 1500)
    servo.set_pulse_us(3, 1000)
    servo.set_pulse_us(5, 2000)
    servo.release(5)
    sent = [w for w in bus.writes(ADDR) if len(w) > 1]
    servo.check_setup()                                  # kept its setup: one MODE1 read, nothing written
    assert [w for w in bus.writes(ADDR) if len(w) > 1] == sent and bus.log[-1].op == "read"
    bus.power_cycle(ADDR)                                # a brown-out: no bus error, registers at power-on
    assert chip.regs[0x00] == 0x11 and chip.prescale == 0x1E and chip.pulse_us(0) == 0.0
    servo.set_pulse_us(1, 2000)                          # lands with AI off and the oscillator asleep
    assert chip.pulse_us(1) == 0.0
    with pytest.raises(DeviceReset, match=r"MODE1 read 0x11 \(SLEEP set, AI clear.*4 channels written again"):
        servo.check_setup()
    assert servo.resets == 1
    assert chip.prescale == 121 and chip.regs[0x00] & 0x20 and not chip.regs[0x00] & 0x90
    assert chip.pulse_us(0) == pytest.approx(1500, abs=5) and chip.pulse_us(3) == pytest.approx(1000, abs=5)
    assert chip.pulse_us(1) == pytest.approx(2000, abs=5) and chip.pulse_us(5) == 0.0
    assert physics.servo_pulse_us[0] == pytest.approx(1500, abs=5)
    servo.check_setup()                                  # set up: nothing more to do
    assert servo.resets == 1


def test_a_chip_reset_to_power_on_by_a_general_call_is_set_up_again_too():
    servo, chip, bus, _, _ = make()
    servo.open()
    servo.set_pulse_us(2, 1200)
    bus.write_byte(0x00, 0x06)                           # general-call software reset (datasheet 7.6)
    with pytest.raises(DeviceReset):
        servo.check_setup()
    assert chip.pulse_us(2) == pytest.approx(1200, abs=5)
