"""The GPIO e-stop switch driver (drivers/gpio.py) on its gpiod-API emulator (drivers/emulators/gpio.py)."""

from __future__ import annotations

import json
import threading

import pytest

from agent.config import ConfigError, loads
from drivers.config import GpioEstopConfig
from drivers.emulators.gpio import GpioChipEmulator
from drivers.errors import DeviceClosed, DriverConfigError, DriverError
from drivers.gpio import GpioSwitch, chip_path, load_gpiod
from drivers.transport import Openers


def _rig(**over) -> tuple[GpioChipEmulator, GpioSwitch, Openers]:
    cfg = GpioEstopConfig.model_validate({"kind": "gpio", "chip": "sim://", "line": "GPIO17", **over})
    emu = GpioChipEmulator.from_config(cfg)
    openers = Openers()
    openers.register("gpio", "sim", emu.open_chip)
    return emu, GpioSwitch(cfg, openers=openers), openers


def test_the_binding_is_libgpiod_v2():
    gpiod = load_gpiod()
    assert hasattr(gpiod, "LineSettings") and gpiod.api_version.startswith("2.")


@pytest.mark.parametrize("chip, path", [(0, "/dev/gpiochip0"), ("4", "/dev/gpiochip4"),
                                        ("gpiochip0", "/dev/gpiochip0"), ("/dev/gpiochip1", "/dev/gpiochip1"),
                                        ("sim://", "sim://")])
def test_chip_values_name_a_device(chip, path):
    assert chip_path(chip) == path


@pytest.mark.parametrize("over", [{}, {"line": 17}, {"closed_level": "high", "bias": "pull_down"},
                                  {"bias": "disabled"}, {"closed_level": "high", "bias": "as_is"},
                                  {"edge_events": False}])
def test_closed_reads_true_and_open_reads_false_for_every_wiring(over):
    emu, drv, _ = _rig(**over)
    with drv:
        assert drv.read() is True
        emu.open_switch()
        assert drv.read() is False
        emu.close_switch()
        assert drv.read() is True


def test_the_line_is_requested_as_configured():
    from gpiod.line import Bias, Direction, Edge
    emu, drv, _ = _rig()
    with drv:
        (req,) = emu._requests
        assert req.settings.direction == Direction.INPUT and req.settings.bias == Bias.PULL_UP
        assert req.settings.active_low is True and req.settings.edge_detection == Edge.BOTH
        assert req.consumer == "robot-agent" and req.offset == 17


def test_an_edge_wakes_a_waiting_reader_at_once():
    emu, drv, _ = _rig()
    with drv:
        assert drv.wait(0.0) is False
        woke: list[bool] = []
        t = threading.Thread(target=lambda: woke.append(drv.wait(30.0)))
        t.start()
        emu.open_switch()
        t.join(10.0)
        assert woke == [True] and drv.read() is False
        assert drv.wait(0.0) is False          # the events were drained


def test_a_flapping_contact_queues_its_edges_and_reads_where_it_ended():
    emu, drv, _ = _rig()
    with drv:
        emu.flap(7, end_closed=False)
        assert emu.edges == 7
        assert drv.wait(0.0) is True and drv.read() is False


def test_a_removed_chip_is_a_driver_error_and_reopens_once_back():
    emu, drv, openers = _rig()
    drv.open()
    emu.remove()
    with pytest.raises(DriverError) as info:
        drv.read()
    assert info.value.errno == 19 and info.value.device == "estop"     # ENODEV
    with pytest.raises(DriverError):
        drv.wait(0.01)
    drv.close()
    again = GpioSwitch(drv.cfg, openers=openers)
    with pytest.raises(DriverError) as info:
        again.open()
    assert info.value.errno == 2                                          # ENOENT: no chip
    emu.replug()
    again = GpioSwitch(drv.cfg, openers=openers)
    with again:
        assert again.read() is True


def test_removal_wakes_a_waiting_reader_with_an_error():
    emu, drv, _ = _rig()
    with drv:
        got: list[BaseException] = []

        def waiter() -> None:
            try:
                drv.wait(30.0)
            except DriverError as err:
                got.append(err)
        t = threading.Thread(target=waiter)
        t.start()
        emu.remove()
        t.join(10.0)
        assert len(got) == 1 and got[0].errno == 19


def test_a_busy_line_and_an_unknown_line_are_refused_with_the_reason():
    emu, drv, openers = _rig()
    with drv:
        other = GpioSwitch(drv.cfg, openers=openers)
        with pytest.raises(DriverError) as info:
            other.open()
        assert info.value.errno == 16 and "gpioinfo" in str(info.value)
    unknown = GpioSwitch(GpioEstopConfig(kind="gpio", chip="sim://", line="GPIO99"), openers=openers)
    with pytest.raises(DriverError, match="no line named 'GPIO99' on this chip") as info:
        unknown.open()
    assert info.value.errno == 2
    off_chip = GpioSwitch(GpioEstopConfig(kind="gpio", chip="sim://", line=60), openers=openers)
    with pytest.raises(DriverError, match="line 60: line offset of out range"):   # gpiod's own words
        off_chip.open()


def test_a_missing_chip_path_and_an_unknown_scheme_are_driver_errors():
    with pytest.raises(DriverError) as info:
        GpioSwitch(GpioEstopConfig(kind="gpio", chip="/dev/gpiochip-none", line=3)).open()
    assert info.value.errno == 2 and "/dev/gpiochip-none" in str(info.value)
    with pytest.raises(DriverConfigError, match="sim://"):
        GpioSwitch(GpioEstopConfig(kind="gpio", chip="sim://", line=3)).open()


def test_closed_driver_raises_device_closed_and_releases_the_line():
    emu, drv, openers = _rig()
    drv.open()
    drv.close()
    drv.close()
    assert emu._requests == []
    with pytest.raises(DeviceClosed):
        drv.read()
    with pytest.raises(DeviceClosed):
        drv.wait(0.0)
    with GpioSwitch(drv.cfg, openers=openers) as again:   # the line is free for the next driver
        assert again.read() is True


@pytest.mark.parametrize("estop, path, words", [
    ({"kind": "gpio", "chip": "sim://", "line": 17, "bias": "pull_down"}, "$.drivers.estop", "pull_up"),
    ({"kind": "gpio", "chip": "sim://", "line": 17, "closed_level": "high", "bias": "pull_up"},
     "$.drivers.estop", "pull_down"),
    ({"kind": "gpio", "chip": "sim://", "line": 2048}, "$.drivers.estop.line", "0..1023"),
    ({"kind": "gpio", "chip": "sim://", "line": ""}, "$.drivers.estop.line", "1..32"),
    ({"kind": "gpio", "chip": "sim://", "line": True}, "$.drivers.estop.line", "boolean"),
    ({"kind": "gpio", "chip": "", "line": 17}, "$.drivers.estop.chip", "empty"),
    ({"kind": "gpio", "chip": "sim://", "line": 17, "debounce_s": -0.1}, "$.drivers.estop.debounce_s", "greater"),
    ({"kind": "gpio", "chip": "sim://", "line": 17, "debounce_s": "0.2"}, "$.drivers.estop.debounce_s", "number"),
    ({"kind": "gpio", "chip": "sim://", "line": 17, "poll_hz": 0}, "$.drivers.estop.poll_hz", "greater"),
    ({"kind": "gpio", "chip": "sim://", "line": 17, "debounce_s": 0}, "$.drivers.estop.debounce_s", "0.05"),
    ({"kind": "gpio", "chip": "sim://", "line": 17, "edge_events": "false"}, "$.drivers.estop.edge_events",
     "boolean"),
    ({"kind": "gpio", "chip": "sim://", "line": 17, "edge_events": 0}, "$.drivers.estop.edge_events", "boolean"),
    ({"kind": "gpio", "chip": "sim://", "line": 17, "bias": "up"}, "$.drivers.estop.bias", "pull_up"),
    ({"kind": "gpio", "chip": "sim://"}, "$.drivers.estop.line", "required"),
    ({"kind": "gpio", "chip": "sim://", "line": 17, "pin": 4}, "$.drivers.estop.pin", "pin"),
])
def test_bad_estop_settings_are_refused_with_their_json_path(estop, path, words):
    with pytest.raises(ConfigError) as info:
        loads(json.dumps({"drivers": {"estop": estop}}))
    text = str(info.value)
    assert path in text and words.lower() in text.lower(), text


def test_a_good_estop_section_loads():
    cfg = loads(json.dumps({"drivers": {"estop": {"kind": "gpio", "chip": 0, "line": "GPIO17"}}}))
    e = cfg.drivers.estop
    assert (e.chip, e.line, e.bias, e.closed_level, e.edge_events) == (0, "GPIO17", "pull_up", "low", True)
    assert cfg.drivers.transport_urls() == [("estop", "0")]


@pytest.mark.parametrize("line", ["ESTOP_IN", "5", 5])
def test_the_emulated_chip_carries_the_configured_line(line):
    emu, drv, _ = _rig(line=line)
    with drv:
        emu.open_switch()
        assert drv.read() is False


@pytest.mark.parametrize("over", [{}, {"closed_level": "high", "bias": "pull_down"}])
def test_a_brief_opening_reads_open_once_though_the_line_is_closed_again(over):
    emu, drv, _ = _rig(**over)
    with drv:
        for trial in range(20):
            emu.flap(1)                              # open, closed again before anyone reads
            assert emu.closed
            if trial % 2:
                assert drv.wait(0.0) is True         # drained by the wait ...
            assert drv.read() is False, trial        # ... or by the read itself: either way it reads open
            assert drv.read() is True                # once: the line is closed now
        emu.close_switch()
        emu.open_switch()
        emu.close_switch()
        emu.open_switch()
        assert drv.read() is False and drv.read() is False   # open now: open, whatever was drained


def test_a_closing_pulse_is_not_an_opening():
    emu, drv, _ = _rig()
    with drv:
        emu.open_switch()
        assert drv.read() is False
        emu.flap(1, end_closed=False)                # closed for a moment, open again
        assert drv.read() is False
        emu.close_switch()
        assert drv.wait(0.0) is True and drv.read() is True
