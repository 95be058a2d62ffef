"""The e-stop input (agent/devices/estopinput.py) on the simulated tank: the real GPIO driver on its gpiod-API
emulator, the real control loop, the duty read back from the tank physics the RoboClaw emulator
writes into.

The rule's timing runs on an injected clock (the watch's ``poll_once`` called by the test, the loop's
``tick``); the threaded watch is tested by waiting for conditions, never by sleeping.
"""

from __future__ import annotations

import logging
import threading
import time

import pytest

from agent.control import ControlLoop
from agent.errors import CommandDeclined
from agent.devices.estopinput import RELEASE, SET, EstopDebounce, EstopWatch, LoopEstop
from agent.devices.hardware import Hardware
from agent.commands import BaseVelocity
from agent.devices.simtank import SimTank
from agent.devices.supervisor import Supervised
from drivers.gpio import GpioSwitch
from tests.agent.test_control import DT, Clock, Rig, config
from tests.conftest import running_agent, sim_config, wait_for

DEBOUNCE_S = 0.3


# ------------------------------------------------------------------ the rule alone
def test_open_sets_at_once_and_only_a_steady_close_releases():
    d = EstopDebounce(0.3)
    assert d.update(True, 0.0) is None and not d.active           # closed from the start: nothing to do
    assert d.update(False, 1.0) == SET and d.active                 # first open reading sets
    assert d.update(False, 1.01) is None                            # set once
    assert d.update(True, 1.1) is None and d.due_in(1.1) == pytest.approx(0.3)
    assert d.update(None, 1.2) is None                              # unreadable breaks the close
    assert d.update(True, 1.3) is None
    assert d.update(True, 1.59) is None
    assert d.update(True, 1.6) == RELEASE and not d.active
    assert d.update(None, 2.0) == SET                               # the line going away sets it too


def test_a_flapping_line_sets_once_and_never_releases_while_it_flaps():
    d = EstopDebounce(0.3)
    verdicts = [d.update(k % 2 == 1, k * 0.05) for k in range(200)]   # 10 s of a 10 Hz flap
    assert verdicts.count(SET) == 1 and RELEASE not in verdicts


# ------------------------------------------------------------------ the watch on the control loop
class WatchRig:
    """A control loop on the simulated tank, and the e-stop input's watch driven by hand."""

    def __init__(self, rig: Rig, watch: EstopWatch, emu) -> None:
        self.rig, self.watch, self.emu, self.loop = rig, watch, emu, rig.loop

    def poll(self, dt: float = DT) -> None:
        """Advance time by ``dt``, read the input once, then run one control tick."""
        self.rig.clock.t += dt
        self.watch.poll_once()


@pytest.fixture
def wrig():
    cfg = config(drivers={"estop": {"debounce_s": DEBOUNCE_S}})
    sim = SimTank(cfg)
    # the loop's hardware without the input: the test drives the input's watch itself
    hw = Hardware.from_config(config(drivers={"estop": None}), sim)
    hw.start()
    clock = Clock()
    rig = Rig(ControlLoop(cfg, hw, clock=clock), hw, sim, clock)
    openers = sim.openers()
    dev = Supervised("estop", lambda: GpioSwitch(cfg.drivers.estop, openers=openers), lost_after=1)
    assert dev.try_open()
    watch = EstopWatch(dev, debounce_s=DEBOUNCE_S, poll_hz=100.0, clock=clock)
    watch.connect(LoopEstop(rig.loop))
    yield WatchRig(rig, watch, sim.gpio())
    dev.close()
    rig.loop.close(timeout_s=0.1)
    hw.close()
    sim.close()


def drive(rig: Rig, source: str = "sim2bot", ticks: int = 15):
    snap = None
    for _ in range(ticks):
        rig.loop.submit(source, BaseVelocity(0.5, 0.0))
        snap = rig.tick()
    return snap


def test_opening_the_switch_zeroes_the_tracks_at_the_next_tick_and_shows_by_input(wrig, caplog):
    drive(wrig.rig)
    assert wrig.rig.duty[0] > 0.2
    wrig.emu.open_switch()
    with caplog.at_level(logging.WARNING):
        wrig.watch.poll_once()
    snap = wrig.rig.tick()
    assert wrig.rig.duty == (0.0, 0.0)
    halt = snap.safety.estop
    assert (halt.kind, halt.by) == ("estop", "input") and "circuit open" in halt.reason
    with pytest.raises(CommandDeclined, match="set by input"):
        wrig.loop.submit("console", BaseVelocity(0.3, 0.0))
    assert sum("EMERGENCY STOP set by input" in r.getMessage() for r in caplog.records) == 1


def test_a_brief_opening_sets_the_estop_though_the_line_reads_closed_again(wrig):
    drive(wrig.rig)
    assert wrig.rig.duty[0] > 0.2
    wrig.emu.flap(1)                                     # a loose wire breaks the circuit for a moment
    assert wrig.emu.closed
    wrig.watch.device.call(lambda d: d.wait(0.0))        # the watch's thread: the edge wakes it
    wrig.poll()
    snap = wrig.rig.tick()
    assert wrig.rig.duty == (0.0, 0.0)
    assert snap.safety.estop is not None and snap.safety.estop.by == "input"
    assert "circuit open" in snap.safety.estop.reason


def test_closing_releases_after_a_steady_debounce_and_nothing_moves_until_a_fresh_command(wrig):
    wrig.emu.open_switch()
    wrig.watch.poll_once()
    wrig.emu.close_switch()
    t_closed = wrig.rig.clock.t
    while wrig.rig.clock.t - t_closed < DEBOUNCE_S - 1e-9 - DT:
        wrig.poll()
        assert wrig.rig.tick().safety.estop is not None            # held for the whole debounce
    wrig.poll()
    wrig.poll()
    snap = wrig.rig.tick(10)
    assert snap.safety.estop is None and wrig.rig.duty == (0.0, 0.0)  # released, nothing moves
    drive(wrig.rig, "console", ticks=5)                                # a fresh command drives
    assert wrig.rig.duty[0] > 0.0


def test_a_flapping_line_holds_the_estop_until_it_is_steady(wrig, caplog):
    with caplog.at_level(logging.WARNING):
        for k in range(60):                                   # 1.2 s flapping, one change per poll
            (wrig.emu.close_switch if k % 2 else wrig.emu.open_switch)()
            wrig.poll()
            assert wrig.rig.tick().safety.estop is not None
        wrig.emu.close_switch()
        polls = 0
        while wrig.loop.snapshot().safety.estop is not None:
            wrig.poll()
            wrig.rig.tick()
            polls += 1
    assert polls * DT >= DEBOUNCE_S - 1e-9
    assert sum("EMERGENCY STOP set by input" in r.getMessage() for r in caplog.records) == 1
    assert sum("emergency stop released by input" in r.getMessage() for r in caplog.records) == 1


def test_a_removed_chip_sets_the_estop_and_the_device_is_lost_until_it_is_back(wrig):
    drive(wrig.rig)
    wrig.emu.remove()
    wrig.watch.poll_once()
    snap = wrig.rig.tick()
    assert wrig.rig.duty == (0.0, 0.0)
    assert snap.safety.estop.by == "input" and "unreadable" in snap.safety.estop.reason
    assert "No such device" in snap.safety.estop.reason
    health = wrig.watch.device.health()
    assert health.state == "lost" and "No such device" in health.last_error
    assert not wrig.watch.device.try_open()               # a reopen try (the input's own thread's): no chip yet
    wrig.emu.replug()
    assert wrig.watch.device.try_open()
    for _ in range(int(DEBOUNCE_S / DT) + 2):
        wrig.poll()
    assert wrig.rig.tick().safety.estop is None and wrig.watch.device.health().state == "ok"


def test_the_input_never_releases_a_console_estop(wrig):
    wrig.loop.estop("console", "operator")
    wrig.emu.open_switch()
    wrig.watch.poll_once()                                    # already set: the console stays the setter
    wrig.emu.close_switch()
    for _ in range(int(DEBOUNCE_S / DT) + 5):
        wrig.poll()
    halt = wrig.rig.tick().safety.estop
    assert halt is not None and halt.by == "console"
    wrig.loop.release_estop("console")
    assert wrig.rig.tick().safety.estop is None


@pytest.mark.parametrize("setter", ["input", "console"])
def test_no_release_while_the_switch_is_open_whoever_set_the_estop(wrig, setter):
    if setter == "console":
        wrig.loop.estop("console", "operator")
    wrig.emu.open_switch()
    wrig.watch.poll_once()
    for by in ("console", "cli"):
        with pytest.raises(CommandDeclined, match="the e-stop input still holds it: its circuit is open") as err:
            wrig.loop.release_estop(by)
        assert err.value.reason == "held"
    assert wrig.rig.tick().safety.estop.by == setter            # nothing changed
    wrig.emu.close_switch()
    wrig.poll()
    with pytest.raises(CommandDeclined, match="not yet read closed for 0.30 s"):
        wrig.loop.release_estop("console")                    # closed, but not steadily yet
    for _ in range(int(DEBOUNCE_S / DT) + 2):
        wrig.poll()
    if setter == "console":                                   # the console's own e-stop: its own release
        assert wrig.rig.tick().safety.estop.by == "console"
        wrig.loop.release_estop("console")
    assert wrig.rig.tick().safety.estop is None


def test_an_estop_found_released_while_the_input_holds_is_set_again(wrig):
    wrig.emu.open_switch()
    wrig.watch.poll_once()
    with wrig.loop.locked():                                  # a release that went around the hold
        wrig.loop.safety._holds.clear()
        wrig.loop.safety.release_estop("cli")
    wrig.watch.poll_once()
    halt = wrig.rig.tick().safety.estop
    assert halt is not None and halt.by == "input" and "set again" in halt.reason


# ------------------------------------------------------------------ the whole agent, its own threads
async def test_the_running_agent_stops_on_the_input_and_shows_the_device_in_health():
    async with running_agent(sim_config(drivers={"cameras": [], "estop": {"debounce_s": 0.2}})) as agent:
        emu = agent.sim.gpio()
        assert {h.name: h.state for h in agent.hardware.health()}["estop"] == "ok"
        agent.control.submit("console", BaseVelocity(0.5, 0.0))
        assert await wait_for(lambda: agent.physics.duty[0] > 0.05)
        t0 = time.monotonic()
        emu.open_switch()
        assert await wait_for(lambda: tuple(agent.physics.duty) == (0.0, 0.0))
        assert time.monotonic() - t0 < 2.0                    # loose: the benchmark gives the figure
        assert agent.control.snapshot().safety.estop.by == "input"
        emu.flap(9, end_closed=True)                           # bouncing back, ending closed
        assert await wait_for(lambda: agent.control.snapshot().safety.estop is None)
        emu.remove()                                           # the chip goes away
        assert await wait_for(lambda: agent.control.snapshot().safety.estop is not None)
        assert await wait_for(lambda: {h.name: h.state for h in agent.hardware.health()}["estop"] == "lost")
        emu.replug()                                           # the input's own thread reopens it
        assert await wait_for(lambda: agent.control.snapshot().safety.estop is None, timeout_s=10.0)
        assert {h.name: h.state for h in agent.hardware.health()}["estop"] == "ok"
        assert tuple(agent.physics.duty) == (0.0, 0.0)          # nothing moved without a fresh command


def test_selftest_passes_a_closed_input_and_fails_an_open_one_with_the_reason():
    from agent.config import AgentConfig
    from agent.devices.selftest import FAIL, PASS, run_checks
    cfg = AgentConfig.model_validate(sim_config(drivers={"cameras": []}))
    tank = SimTank(cfg)
    try:
        (closed,) = [c for c in run_checks(cfg, motion=False, sim=tank) if c.device == "estop"]
        tank.gpio().open_switch()
        (opened,) = [c for c in run_checks(cfg, motion=False, sim=tank) if c.device == "estop"]
    finally:
        tank.close()
    assert closed.result == PASS and "circuit closed on sim:// line 'GPIO17'" in closed.detail
    assert opened.result == FAIL and "circuit OPEN" in opened.detail


def test_an_input_estop_kept_across_a_restart_is_released_by_a_steady_close(wrig):
    from agent.model import Halt
    wrig.loop.restore_estop(Halt("estop", "e-stop input: circuit open", "input", 1_764_612_000.0))
    assert wrig.watch.adopt_kept() is True
    for _ in range(int(DEBOUNCE_S / DT) - 2):
        wrig.poll()
        assert wrig.rig.tick().safety.estop is not None               # held until the debounce is over
    for _ in range(4):
        wrig.poll()
    assert wrig.rig.tick().safety.estop is None


def test_a_kept_console_estop_is_not_adopted(wrig):
    from agent.model import Halt
    wrig.loop.restore_estop(Halt("estop", "operator", "console", 1_764_612_000.0))
    assert wrig.watch.adopt_kept() is False
    for _ in range(int(DEBOUNCE_S / DT) + 5):
        wrig.poll()
    assert wrig.rig.tick().safety.estop.by == "console"


def test_the_inputs_release_reaches_the_estop_listeners(wrig):
    """The kept e-stop file (agent.ops.estopstore.EstopStore.save) listens here: the input's own release
    must reach it, or a released input e-stop comes back at every restart."""
    seen: list[object] = []
    wrig.loop.on_estop_change(seen.append)
    wrig.emu.open_switch()
    wrig.watch.poll_once()
    wrig.emu.close_switch()
    t_closed = wrig.rig.clock.t
    while wrig.rig.clock.t - t_closed < DEBOUNCE_S + 2 * DT:
        wrig.poll()
    assert wrig.rig.tick().safety.estop is None
    assert [getattr(h, "by", h) for h in seen] == ["input", None]
