"""ControlState's transitions (agent/control/state.py) on an injected clock: what a velocity command,
a latched joint command, a stop, a release and the e-stop do to ``stopped``, the commanded tracks,
the stop latch and the claims, and that the pure tick (agent/control/tick.py) then drives what
they left. No devices, no threads, no sleeps: time is a VirtualClock moved by hand.

Simulated tank config: priorities console 40 > robot_msg 30 > sim2bot 20 > artex 10, every
source's velocity timeout 0.5 s, two joints and a gripper, 50 Hz.
"""

from __future__ import annotations

import pytest

from agent.config import AgentConfig
from agent.control.arbitration import BASE, JOINTS
from agent.control.state import ControlState
from agent.control.tick import command
from agent.errors import CommandDeclined, CommandRejected
from agent.commands import BaseVelocity, Gripper, JointPosition, JointVelocity, Reset, TrackDuty
from agent.testing.clock import VirtualClock
from tests.conftest import sim_config

FWD = BaseVelocity(0.5, 0.0)
ZERO = BaseVelocity(0.0, 0.0)
WALL = 1_800_000_000.0


@pytest.fixture
def clock() -> VirtualClock:
    return VirtualClock(start=10.0)


@pytest.fixture
def state(clock) -> ControlState:
    return ControlState(AgentConfig.model_validate(sim_config()), clock=clock.time)


def drives(state: ControlState, clock: VirtualClock) -> str:
    """The source whose base command the tick executes now ("" for none)."""
    return command(state, clock.time()).base.driver


def test_a_velocity_command_claims_its_channel_and_a_repeat_changes_nothing(state, clock):
    offered = state.offer_velocity("artex", FWD)
    assert offered.changed and offered.engaged is None
    assert state.arbiter.claim("artex", BASE).command == FWD and state.arbiter.claim("artex", JOINTS) is None
    clock.advance(0.1)
    assert not state.offer_velocity("artex", FWD).changed                    # same value, claim fresh
    assert state.arbiter.claim("artex", BASE).receipt_s == pytest.approx(10.1)   # ... but its watchdog renewed
    assert state.offer_velocity("artex", BaseVelocity(0.4, 0.0)).changed     # a new value
    clock.advance(0.6)
    assert state.offer_velocity("artex", BaseVelocity(0.4, 0.0)).changed     # its claim had run out
    assert state.offer_velocity("artex", JointVelocity((0.1, 0.0))).changed
    assert state.arbiter.claim("artex", JOINTS).command == JointVelocity((0.1, 0.0))
    assert drives(state, clock) == "artex" and state.cmd[0] > 0.0


def test_stop_drops_every_claim_latches_out_the_other_streaming_source_and_sets_stopped(state, clock):
    state.offer_velocity("robot_msg", FWD)
    state.offer_velocity("artex", FWD)
    state.set_joints("sim2bot", JointPosition((0.2, 0.0)))
    command(state, clock.time())
    assert state.cmd != (0.0, 0.0) and state.joints.moving
    clock.advance(0.1)
    stopped = state.stop("artex")
    assert not stopped.repeated and stopped.held == ("robot_msg",)           # sim2bot sent no velocity
    assert {(c.source, c.channel) for c in stopped.dropped} == {("robot_msg", BASE), ("artex", BASE),
                                                                 ("sim2bot", JOINTS)}
    assert state.stopped and not state.joints.moving and state.watchdog.state == "idle"
    assert state.arbiter.latched_out("robot_msg").stopper == "artex"
    assert state.arbiter.latched_out("artex") is None
    held = state.arbiter.claim("robot_msg", BASE)                             # held at zero till its deadline
    assert held.command is None and held.deadline_s == pytest.approx(10.5)
    assert drives(state, clock) == "" and state.cmd == (0.0, 0.0)
    assert state.stop("artex").repeated                                       # nothing left to stop


def test_the_stopper_drives_with_its_next_command_and_ends_stopped(state, clock):
    state.offer_velocity("robot_msg", FWD)
    state.stop("robot_msg")
    clock.advance(0.02)
    assert state.offer_velocity("robot_msg", FWD).changed                     # same value, but after a stop
    assert not state.stopped and drives(state, clock) == "robot_msg"


def test_a_latched_out_source_is_refused_held_at_zero_and_re_engages_after_a_whole_pause(state, clock):
    state.offer_velocity("robot_msg", FWD)
    state.stop("artex")
    clock.advance(0.3)
    with pytest.raises(CommandDeclined, match="robot_msg was driving when artex sent stop") as refused:
        state.offer_velocity("robot_msg", FWD)
    assert refused.value.reason == "reengage"
    assert str(refused.value).endswith("send a zero velocity command, a stop, a reset, or nothing for 0.50 s")
    assert state.stopped                                                      # nothing accepted
    held = state.arbiter.claim("robot_msg", BASE)
    assert held.command is None and held.deadline_s == pytest.approx(10.8)    # renewed by the refusal
    state.offer_velocity("artex", FWD)                                        # the stopper, lower priority
    assert drives(state, clock) == ""                                         # kept off: the tank stays still
    clock.advance(0.49)
    with pytest.raises(CommandDeclined):                                      # 0.49 s since the last refusal
        state.offer_velocity("robot_msg", FWD)
    clock.advance(0.5)
    offered = state.offer_velocity("robot_msg", FWD)
    assert offered.engaged.how == "its commands paused for 0.50 s" and offered.engaged.latched.stopper == "artex"
    assert state.arbiter.latched_out("robot_msg") is None and drives(state, clock) == "robot_msg"


@pytest.mark.parametrize("zero", [ZERO, TrackDuty(0.0, 0.0), JointVelocity((0.0, 0.0))], ids=repr)
def test_an_explicit_zero_re_engages_at_once(state, clock, zero):
    state.offer_velocity("sim2bot", FWD)
    state.stop("artex")
    clock.advance(0.05)
    offered = state.offer_velocity("sim2bot", zero)
    assert offered.engaged.how == "it sent a zero velocity command" and not state.stopped
    clock.advance(0.02)
    state.offer_velocity("sim2bot", FWD)
    assert drives(state, clock) == "sim2bot"


def test_a_reset_drops_the_base_claim_re_engages_and_sends_the_joints_home(state, clock):
    state.set_joints("robot_msg", JointPosition((0.5, 0.3)))
    state.offer_velocity("robot_msg", FWD)
    state.stop("artex")
    clock.advance(0.05)
    state.set_joints("robot_msg", Reset())
    assert state.arbiter.latched_out("robot_msg") is None and state.arbiter.claim("robot_msg", BASE) is None
    assert not state.stopped and state.joints.owner == "robot_msg"
    for _ in range(200):
        clock.advance(0.02)
        command(state, clock.time())
    assert state.joints.state().q == pytest.approx((0.0, 0.0), abs=1e-6)       # home
    assert state.offer_velocity("robot_msg", FWD).engaged is None             # not latched out any more


def test_joints_held_by_a_higher_priority_source_refuse_a_latched_command_and_nothing_changes(state, clock):
    state.set_joints("console", JointPosition((0.2, 0.0)))
    gripper = state.joints.gripper
    with pytest.raises(CommandDeclined, match=r"joints are held by console \(priority 40 > 10\)"):
        state.set_joints("artex", Gripper(0.5))
    assert state.joints.owner == "console" and state.joints.gripper == gripper
    assert state.arbiter.claim("artex", JOINTS) is None and dict(state.arbiter.overridden())["artex"] == 1
    clock.advance(0.5)                                                         # console's claim ran out
    state.stop("artex")
    state.set_joints("artex", Gripper(0.5))
    assert not state.stopped and state.arbiter.claim("artex", JOINTS).command is None


def test_the_estop_refuses_motion_latches_out_the_streamer_and_its_release_moves_nothing(state, clock):
    state.offer_velocity("robot_msg", FWD)
    state.set_joints("robot_msg", JointPosition((0.3, 0.0)))
    new, halt = state.estop("console", "operator pressed STOP", WALL)
    assert new and halt.by == "console" and halt.since_unix_s == WALL
    assert state.arbiter.claim("robot_msg", BASE) is None and not state.joints.moving
    assert state.estop("cli", "again", WALL + 1) == (False, halt)              # first setter kept
    clock.advance(0.1)
    with pytest.raises(CommandDeclined, match="emergency stop set by console") as refused:
        state.offer_velocity("robot_msg", FWD)
    assert refused.value.reason == "halted"
    assert state.arbiter.latched_out("robot_msg").halt.startswith("the emergency stop set by console")
    with pytest.raises(CommandDeclined):
        state.set_joints("sim2bot", Gripper(0.2))
    with pytest.raises(CommandDeclined, match="BaseVelocity refused"):
        state.offer_velocity("artex", ZERO)                                    # refused too, but a zero ...
    assert state.arbiter.latched_out("artex") is None                          # ... latches nobody out
    assert drives(state, clock) == "" and state.cmd == (0.0, 0.0)
    assert state.release_estop("console") is True
    assert drives(state, clock) == ""                                          # nothing moves on the release
    with pytest.raises(CommandDeclined, match="emergency stop set by console was in force") as refused:
        state.offer_velocity("robot_msg", FWD)
    assert refused.value.reason == "reengage"
    assert state.offer_velocity("robot_msg", ZERO).engaged is not None
    state.offer_velocity("robot_msg", FWD)
    assert drives(state, clock) == "robot_msg"


def test_release_own_estop_releases_only_the_setters(state):
    with pytest.raises(CommandDeclined, match="no emergency stop is set"):
        state.release_estop("cli")
    with pytest.raises(CommandRejected):
        state.estop("artex", "not a setter", WALL)
    state.estop("cli", "maintenance", WALL)
    assert state.release_estop("input", own=True) is False and state.safety.state().estop is not None
    assert state.release_estop("cli", own=True) is True and state.safety.state().estop is None
    assert state.release_estop("cli", own=True) is False


def test_restore_estop_drops_every_claim(state):
    state.offer_velocity("artex", FWD)
    halt = state.estop("cli", "kept", WALL)[1]
    state.release_estop("cli")
    state.offer_velocity("sim2bot", FWD)
    assert state.restore_estop(halt) is True and state.arbiter.claim("sim2bot", BASE) is None
    assert state.restore_estop(halt) is False and state.safety.state().estop == halt


def test_release_says_what_the_source_was_driving_and_drops_its_claims(state, clock):
    state.offer_velocity("sim2bot", FWD)
    state.offer_velocity("artex", JointVelocity((0.1, 0.0)))
    assert state.release("sim2bot") == (("base",), 1)
    assert state.release("artex") == (("joints",), 1) and not state.joints.moving
    assert state.release("console") == ((), 0)
    state.offer_velocity("robot_msg", FWD)
    state.offer_velocity("artex", FWD)                                         # overridden by robot_msg
    assert state.release("artex") == ((), 1)
    assert drives(state, clock) == "robot_msg"


def test_limits_base_motion_zero_tracks_and_halt(state, clock):
    state.set_limits(0.25, None)
    assert (state.max_speed_mps, state.max_accel_mps2) == (0.25, 2.0)
    state.offer_velocity("artex", FWD)
    commanded, target = state.base_motion()
    assert commanded == (0.0, 0.0) and target == pytest.approx((0.25, 0.25))   # capped at the new limit
    for _ in range(20):
        clock.advance(0.02)
        command(state, clock.time())
    assert state.base_motion()[0] == pytest.approx((0.25, 0.25))
    state.zero_tracks()
    assert state.cmd == (0.0, 0.0) and state.arbiter.claim("artex", BASE) is not None
    state.set_joints("robot_msg", JointPosition((0.4, 0.0)))
    state.halt()
    assert state.cmd == (0.0, 0.0) and state.arbiter.claim("artex", BASE) is None and not state.joints.moving
    assert state.base_motion() == ((0.0, 0.0), (0.0, 0.0))


def test_a_refused_transition_leaves_the_lock_free(state):
    state.offer_velocity("robot_msg", FWD)
    state.stop("artex")
    with pytest.raises(CommandDeclined):
        state.offer_velocity("robot_msg", FWD)
    assert state.lock.acquire(blocking=False)
    state.lock.release()


def test_a_stall_longer_than_the_timeout_latches_out_the_source_streaming_before_it(state, clock, caplog):
    """The agent frozen (SIGSTOP, a starved process) while robot_msg streamed: what it sent before or
    queued during the stall, read only after it, must not drive; it re-engages as after a stop."""
    state.offer_velocity("robot_msg", FWD)
    clock.advance(0.02)
    assert drives(state, clock) == "robot_msg"
    clock.advance(1.5)                                                        # no tick for 1.5 s
    with caplog.at_level("WARNING", logger="agent.control.tick"):
        assert drives(state, clock) == ""                                     # watchdog: the claim is stale
    assert "no tick for 1.50 s (the agent stalled); robot_msg latched out" in caplog.text
    with pytest.raises(CommandDeclined, match=r"a stall of the agent \(1.50 s without a control tick\)"):
        state.offer_velocity("robot_msg", FWD)                                # a queued command, read now
    clock.advance(0.02)
    assert drives(state, clock) == "" and state.cmd == (0.0, 0.0)
    state.offer_velocity("robot_msg", ZERO)                                   # re-engaged by a zero
    state.offer_velocity("robot_msg", FWD)
    clock.advance(0.02)
    assert drives(state, clock) == "robot_msg"


def test_a_late_tick_within_the_timeout_latches_nothing_and_a_command_after_a_stall_is_not_its(state, clock):
    state.offer_velocity("robot_msg", FWD)
    clock.advance(0.02)
    drives(state, clock)
    clock.advance(0.4)                                                        # late, not past the 0.5 s timeout
    assert drives(state, clock) == "robot_msg" and state.arbiter.latched_out("robot_msg") is None
    clock.advance(2.0)                                                        # a stall ...
    state.offer_velocity("sim2bot", FWD)                                      # ... then sim2bot's first command
    assert drives(state, clock) == ""           # robot_msg (higher) latched out, its claim held at zero
    assert state.arbiter.latched_out("robot_msg") is not None
    assert state.arbiter.latched_out("sim2bot") is None                       # it was not streaming before it
    for _ in range(6):                          # sim2bot streams every 0.1 s, the loop ticks meanwhile
        clock.advance(0.1)
        state.offer_velocity("sim2bot", FWD)
        driver = drives(state, clock)
    assert driver == "sim2bot"                                                # once robot_msg's hold ran out


def test_a_command_queued_during_a_stall_and_read_before_the_first_tick_after_it_is_refused(state, clock):
    """After SIGCONT the event loop may read the commands queued during the stall before the control
    thread ticks: the stall is checked at the command too, while the pre-stall claim is still there."""
    state.offer_velocity("artex", FWD)
    clock.advance(0.02)
    assert drives(state, clock) == "artex"
    clock.advance(2.0)                                                        # frozen: no tick, no read
    with pytest.raises(CommandDeclined, match=r"a stall of the agent \(2.00 s without a control tick\)"):
        state.offer_velocity("artex", FWD)                                    # queued, read before the tick
    clock.advance(0.001)
    assert drives(state, clock) == "" and state.cmd == (0.0, 0.0)
