"""The control loop (agent/control/) on the simulated tank: real Hardware, real drivers, emulators.

Most tests drive time with an injected clock and call ``tick`` themselves; the
duty that reached the motor controller is read back from the tank physics the
RoboClaw emulator writes into. The thread tests at the end run the real loop
and only assert loose bounds.
"""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass
from itertools import pairwise

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.config import AgentConfig
from agent.control import ControlLoop, describe
from agent.errors import CommandDeclined, CommandError, CommandRejected
from agent.devices.hardware import Hardware
from agent.commands import (
    BaseVelocity, CalibrateImu, Gripper, JointPosition, JointTrajectory, JointTrajectoryStop, JointVelocity, Reset,
    Stop, TrackDuty, TrajectoryPoint,
)
from agent.devices.simtank import SimTank
from tests.conftest import deep_merge, sim_config

RATE = 50
DT = 1.0 / RATE
PAN, TILT = 0, 1


class Clock:
    """Injected monotonic clock, s."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


@dataclass
class Rig:
    loop: ControlLoop
    hw: Hardware
    sim: SimTank
    clock: Clock
    k: int = 0                      # tick index; tick k runs at t = k * DT

    def tick(self, n: int = 1):
        snap = None
        for _ in range(n):
            self.k += 1
            self.clock.t = self.k * DT
            snap = self.loop.tick()
        return snap

    @property
    def duty(self) -> tuple[float, float]:
        """Duty the motor controller applied (the emulator writes it into the physics)."""
        left, right = self.sim.physics.duty
        return left, right


def config(**overrides) -> AgentConfig:
    """Simulated tank: RoboClaw motor, MPU-6050, two joints and a gripper on a PCA9685."""
    base = sim_config()
    base["drivers"].pop("cameras")
    base["drivers"].pop("power")
    return AgentConfig.model_validate(deep_merge(base, overrides))


@pytest.fixture
def make_rig():
    made: list[Rig] = []

    def make(**overrides) -> Rig:
        cfg = config(**overrides)
        sim = SimTank(cfg)
        hw = Hardware.from_config(cfg, sim)
        hw.start()
        clock = Clock()
        rig = Rig(ControlLoop(cfg, hw, clock=clock), hw, sim, clock)
        made.append(rig)
        # the motor controller answers on real time: on a loaded machine its open may not be done yet
        deadline = time.monotonic() + 10.0
        while hw.motor is not None and hw.motor.state != "ok" and time.monotonic() < deadline:
            time.sleep(0.005)
        return rig

    yield make
    for rig in made:
        rig.loop.close(timeout_s=0.1)           # an unplugged motor never confirms: do not wait long
        rig.hw.close()
        rig.sim.close()


@pytest.fixture
def rig(make_rig) -> Rig:
    return make_rig()


# ---------------------------------------------------------------------------- description


def test_description_from_config():
    d = describe(config(drivers={"cameras": [{"id": "front", "source": "sim://pattern"}, {"id": "rear", "source": 0}]}))
    assert d.name == "tank-01" and d.kind == "Robot"
    assert d.joint_names == ("turret_pan", "camera_tilt") and d.dof == 2
    assert d.joint_limits == ((-1.5708, 1.5708), (-0.5, 0.8))
    assert d.home == (0.0, 0.0) and d.has_gripper
    assert (d.track_width_m, d.max_speed_mps) == (0.30, 1.0)
    assert d.max_omega_radps == pytest.approx(2.0 / 0.30)
    assert d.cameras == ("front", "rear")


# ---------------------------------------------------------------------------- watchdog


def test_watchdog_zero_at_timeout_plus_one_tick_and_not_before(rig, caplog):
    rig.clock.t = 0.001
    rig.loop.submit("artex", BaseVelocity(0.5, 0.0))       # deadline 0.501 s
    for _ in range(25):                                    # ticks at 0.02 .. 0.50
        snap = rig.tick()
        assert snap.watchdog == "ok" and rig.duty[0] > 0.0, f"zero before the deadline at t={snap.t_mono_s}"
    assert rig.duty == pytest.approx((0.5, 0.5), abs=1e-3)  # ramped up at 2 m/s^2: 0.5 m/s after 0.25 s
    with caplog.at_level(logging.INFO):
        snap = rig.tick()                                   # t = 0.52: first tick after the deadline
        assert snap.watchdog == "expired" and rig.duty == (0.0, 0.0)
        assert snap.tracks.cmd_left_mps == 0.0 and snap.tracks.duty_left == 0.0
        rig.tick(10)
        assert rig.duty == (0.0, 0.0) and rig.loop.snapshot().watchdog == "expired"
        assert sum("older than" in r.getMessage() for r in caplog.records) == 1
        rig.loop.submit("artex", BaseVelocity(0.2, 0.0))
        assert rig.tick().watchdog == "ok" and rig.duty[0] > 0.0
        assert sum("resumes" in r.getMessage() for r in caplog.records) == 1


def test_per_source_timeout(make_rig):
    rig = make_rig(control={"sources": {"robot_msg": {"priority": 30, "timeout_s": 0.1}}})
    rig.loop.submit("robot_msg", BaseVelocity(0.3, 0.0))
    rig.tick(5)                                   # t = 0.10: deadline reached
    assert rig.loop.snapshot().watchdog == "expired" and rig.duty == (0.0, 0.0)


def test_idle_before_any_command(rig):
    snap = rig.tick(3)
    assert snap.watchdog == "idle" and snap.active_source == "" and rig.duty == (0.0, 0.0)
    assert snap.seq == 3 and snap.t_mono_s == pytest.approx(3 * DT)


# ---------------------------------------------------------------------------- kinematics through the loop


def test_base_velocity_skid_steer_ramped_and_scaled(rig):
    rig.loop.submit("sim2bot", BaseVelocity(1.0, 2.0))      # (0.7, 1.3) -> scaled to (0.538, 1.0)
    snap = rig.tick()
    assert (snap.tracks.cmd_left_mps, snap.tracks.cmd_right_mps) == pytest.approx((0.04 * 0.7 / 1.3, 0.04))
    rig.loop.submit("sim2bot", BaseVelocity(1.0, 2.0))
    snap = rig.tick(24)                                      # 25 ticks * 0.04 = 1.0 m/s reached
    assert (snap.tracks.duty_left, snap.tracks.duty_right) == pytest.approx((0.7 / 1.3, 1.0))
    assert rig.duty == pytest.approx((0.7 / 1.3, 1.0), abs=1e-3)


@pytest.mark.parametrize("command", [
    BaseVelocity(1.7e308, 1.7e308), BaseVelocity(1e300, 0.0), BaseVelocity(10.01, 0.0),   # max 1 m/s
    BaseVelocity(0.0, -66.7),                                # max omega 2 * 1 / 0.3 = 6.67 rad/s
    JointVelocity((0.0, 1e300)),
])
def test_a_velocity_over_ten_times_the_maximum_is_refused_not_full_speed(rig, command):
    with pytest.raises(CommandError, match="more than 10x"):
        rig.loop.submit("sim2bot", command)
    snap = rig.tick(30)
    assert rig.duty == (0.0, 0.0) and snap.active_source == "" and snap.joints.qd == (0.0, 0.0)


@pytest.mark.parametrize("command", [
    JointPosition((1e300, -1e300)), JointPosition((0.0, -1e300)),
    JointTrajectory((TrajectoryPoint(0.5, (0.1, 0.1)), TrajectoryPoint(1.0, (-1e300, 0.0)))),
])
def test_a_joint_target_far_outside_the_limits_is_refused_not_clamped(rig, command):
    with pytest.raises(CommandRejected, match="outside the joint's limits"):
        rig.loop.submit("sim2bot", command)
    home = rig.tick().joints.q
    assert rig.tick(30).joints.q == home


def test_a_velocity_under_ten_times_the_maximum_is_scaled_to_full_duty(rig):
    rig.loop.submit("sim2bot", BaseVelocity(9.9, 0.0))
    rig.tick(20)
    rig.loop.submit("sim2bot", BaseVelocity(9.9, 0.0))
    snap = rig.tick(6)                                       # 25 ticks * 0.04 = 1.0 m/s reached
    assert (snap.tracks.duty_left, snap.tracks.duty_right) == pytest.approx((1.0, 1.0))
    assert rig.duty == pytest.approx((1.0, 1.0), abs=1e-3)


def test_track_duty_bypasses_kinematics_but_is_ramped(rig):
    rig.loop.submit("artex", TrackDuty(0.5, -0.25))
    snap = rig.tick()
    assert (snap.tracks.duty_left, snap.tracks.duty_right) == pytest.approx((0.04, -0.02))
    snap = rig.tick(12)
    assert (snap.tracks.duty_left, snap.tracks.duty_right) == pytest.approx((0.5, -0.25))
    assert rig.duty == pytest.approx((0.5, -0.25), abs=1e-3)


def test_set_limits_applies_next_tick_and_rejects_bad_values(rig):
    rig.loop.set_limits(max_speed_mps=0.5, max_accel_mps2=50.0)
    rig.loop.submit("artex", BaseVelocity(1.0, 0.0))
    snap = rig.tick()
    assert snap.tracks.cmd_left_mps == pytest.approx(0.5)   # 50 m/s^2 * 0.02 s = 1.0 step, capped at 0.5
    for bad in ({"max_speed_mps": 2.0}, {"max_speed_mps": 0.0}, {"max_accel_mps2": float("nan")},
                {"max_accel_mps2": -1.0}, {"max_speed_mps": True}):
        with pytest.raises(CommandError):
            rig.loop.set_limits(**bad)
    assert rig.loop.limits() == (0.5, 50.0)


def test_odometry_from_commanded_speeds_without_encoders(make_rig):
    rig = make_rig(base={"counts_per_m": 0})
    rig.loop.submit("artex", BaseVelocity(0.2, 0.0))
    snap = rig.tick(10)
    # commands 0.04, 0.08 ... 0.2 m/s; each integrated over the following interval of 20 ms
    assert snap.odom.x_m == pytest.approx(DT * (0.04 + 0.08 + 0.12 + 0.16 + 0.2 * 5))
    assert snap.odom.vx_mps == pytest.approx(0.2) and snap.odom.yaw_rad == 0.0
    assert snap.tracks.left_mps == pytest.approx(0.2)       # no encoders: the commanded speed


def test_odometry_and_speed_from_encoders(rig):
    t0 = time.monotonic()

    def follow_real_time() -> None:
        """The physics runs on real time: the tick clock keeps up with it (a loaded machine may
        pause this thread for many tick periods; encoder counts then cover that time)."""
        rig.k = max(rig.k, round((time.monotonic() - t0) / DT))
        rig.clock.t = rig.k * DT

    rig.loop.submit("artex", BaseVelocity(0.3, 0.0))
    rig.tick()
    deadline = time.monotonic() + 10.0
    while rig.sim.physics.track_mps[0] < 0.25 and time.monotonic() < deadline:
        follow_real_time()
        rig.loop.submit("artex", BaseVelocity(0.3, 0.0))
        rig.tick()
        time.sleep(0.01)
    # the speed from encoder counts matches the true track speed: at the first tick, or within a
    # few more (a loaded machine can pause this thread between a feedback read and the tick; the
    # next feedback period catches up)
    deadline = time.monotonic() + 5.0
    while True:
        follow_real_time()
        rig.loop.submit("artex", BaseVelocity(0.3, 0.0))
        snap = rig.tick()
        true_mps = rig.sim.physics.track_mps[0]
        if abs(snap.tracks.left_mps - true_mps) <= 0.05 or time.monotonic() > deadline:
            break
        time.sleep(0.01)
    assert snap.tracks.left_counts > 0 and snap.tracks.right_counts > 0
    assert snap.tracks.left_mps == pytest.approx(true_mps, abs=0.05)
    # the distance once at rest (the watchdog stops it): while moving, the pose read after the tick
    # runs ahead of the tick's counts by however long this thread was paused in between
    deadline = time.monotonic() + 10.0
    while max(map(abs, rig.sim.physics.track_mps)) > 0.005 and time.monotonic() < deadline:
        follow_real_time()
        rig.tick()
        time.sleep(0.01)
    follow_real_time()
    snap = rig.tick(2)
    true_x = rig.sim.physics.pose()[0]
    assert snap.odom.x_m == pytest.approx(true_x, abs=0.01 + 0.1 * true_x)
    assert abs(snap.odom.y_m) < 0.002                      # straight: only count rounding


# ---------------------------------------------------------------------------- arbitration


def test_priority_override_and_counts(rig):
    rig.loop.submit("artex", BaseVelocity(0.3, 0.0))
    rig.tick()
    assert rig.loop.snapshot().active_source == "artex"
    rig.loop.submit("robot_msg", BaseVelocity(-0.3, 0.0))
    for _ in range(5):
        rig.loop.submit("artex", BaseVelocity(0.3, 0.0))      # overridden every time
        snap = rig.tick()
    assert snap.active_source == "robot_msg"
    assert snap.tracks.cmd_left_mps < 0.0
    assert dict(snap.overridden) == {"artex": 5, "sim2bot": 0, "robot_msg": 0, "console": 0}
    # robot_msg stops sending: once it is stale, artex's fresh command drives again
    rig.tick(25)
    assert rig.loop.snapshot().active_source == ""            # artex stale too by now
    rig.loop.submit("artex", BaseVelocity(0.3, 0.0))
    assert rig.tick().active_source == "artex"


def test_stop_from_lower_source_wins_over_higher(rig, caplog):
    rig.loop.submit("robot_msg", BaseVelocity(0.5, 0.0))
    rig.loop.submit("robot_msg", JointVelocity((0.5,)))
    rig.tick(5)
    assert rig.duty[0] > 0.0
    with caplog.at_level(logging.INFO):
        rig.loop.submit("artex", Stop())
    q_at_stop = rig.loop.snapshot().joints.q
    snap = rig.tick()
    assert rig.duty == (0.0, 0.0) and snap.stopped and snap.watchdog == "idle"
    assert snap.joints.q == pytest.approx(q_at_stop, abs=0.011)     # at most the tick in flight
    assert "stop from artex" in caplog.text
    snap = rig.tick(3)
    assert rig.duty == (0.0, 0.0) and snap.stopped and snap.joints.qd == (0.0, 0.0)
    # robot_msg was streaming when the stop came: it does not simply drive on (stop wins) ...
    for _ in range(30):                                                # 0.6 s of a 20 ms stream
        with pytest.raises(CommandError, match="robot_msg was driving when artex sent stop"):
            rig.loop.submit("robot_msg", BaseVelocity(0.2, 0.0))
        snap = rig.tick()
        assert rig.duty == (0.0, 0.0) and snap.stopped
    # ... until its stream has paused for its timeout (0.5 s)
    rig.tick(26)
    rig.loop.submit("robot_msg", BaseVelocity(0.2, 0.0))
    snap = rig.tick()
    assert not snap.stopped and rig.duty[0] > 0.0


def test_stop_latch_leaves_the_stopper_free_and_reset_rearms(rig):
    rig.loop.submit("robot_msg", BaseVelocity(0.5, 0.0))
    rig.tick(5)
    rig.loop.submit("sim2bot", Stop())
    rig.tick()
    assert rig.duty == (0.0, 0.0)
    rig.loop.submit("sim2bot", BaseVelocity(0.3, 0.0))                 # the stopping source is not latched out ...
    rig.tick(3)
    # ... but robot_msg (30) had a fresh claim: held at zero until its deadline, it keeps sim2bot (20) off
    assert rig.duty == (0.0, 0.0) and rig.loop.snapshot().active_source == ""
    with pytest.raises(CommandError):
        rig.loop.submit("robot_msg", BaseVelocity(0.5, 0.0))
    rig.loop.submit("robot_msg", Reset())                              # an explicit reset re-engages it
    rig.loop.submit("robot_msg", BaseVelocity(0.5, 0.0))
    rig.tick()
    assert rig.loop.snapshot().active_source == "robot_msg"
    # a source that was not streaming when the stop came is not latched out
    rig.loop.submit("artex", Stop())
    rig.tick(30)
    rig.loop.submit("artex", BaseVelocity(0.2, 0.0))
    rig.tick()
    assert rig.loop.snapshot().active_source == "artex"


def test_the_stopper_drives_again_with_its_next_command(rig):
    """A source streams, stops, streams again 0.2 s later: its transport is ordered, so its next
    command was sent after its stop and drives at once. Two Sim2Bot controllers reach the agent as
    one source, so either one's next command counts as the stopper's (docs/safety.md)."""
    for _ in range(5):
        rig.loop.submit("sim2bot", BaseVelocity(0.5, 0.0))
        rig.tick()
    rig.loop.submit("sim2bot", Stop())
    assert rig.tick().stopped and rig.duty == (0.0, 0.0)
    rig.tick(10)
    rig.loop.submit("sim2bot", BaseVelocity(0.5, 0.0))
    snap = rig.tick(3)
    assert rig.duty[0] > 0.0 and snap.active_source == "sim2bot" and not snap.stopped


@pytest.mark.parametrize("source, hint", [
    ("sim2bot", "send a zero velocity command, a stop, a reset, or nothing for 0.50 s"),
    ("robot_msg", "send a zero velocity command, a stop, a reset, or nothing for 0.50 s"),
    ("artex", "send a zero velocity command, a stop, or nothing for 0.50 s"),
    ("console", "let go and press again (a new press sends a zero first), or send nothing for 0.50 s")])
def test_the_stop_latch_refusal_names_reset_only_where_the_protocol_has_one(rig, source, hint):
    stopper = "artex" if source != "artex" else "sim2bot"
    for _ in range(3):
        rig.loop.submit(source, BaseVelocity(0.5, 0.0))
        rig.tick()
    rig.loop.submit(stopper, Stop())
    with pytest.raises(CommandError) as err:
        rig.loop.submit(source, BaseVelocity(0.5, 0.0))
    assert str(err.value).startswith(f"{source} was driving when {stopper} sent stop")
    assert str(err.value).endswith("until it re-engages: " + hint)


MOTION = st.one_of(
    st.builds(BaseVelocity, st.floats(-2, 2), st.floats(-5, 5)),
    st.builds(TrackDuty, st.floats(-1, 1), st.floats(-1, 1)),
    st.builds(JointVelocity, st.tuples(st.floats(-3, 3), st.floats(-3, 3))),
)
SOURCE = st.sampled_from(["artex", "sim2bot", "robot_msg"])


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(st.tuples(SOURCE, MOTION, st.integers(0, 3)), min_size=1, max_size=8), stopper=SOURCE)
def test_stop_from_any_source_always_wins(rig, steps, stopper):
    for source, command, ticks in steps:
        with contextlib.suppress(CommandError):  # a source latched out by an earlier example's stop
            rig.loop.submit(source, command)
        rig.tick(ticks)
    rig.loop.submit(stopper, Stop())
    snap = rig.tick()
    assert rig.duty == (0.0, 0.0) and snap.stopped and snap.active_source == ""
    assert rig.tick(3).joints.q == snap.joints.q


# ---------------------------------------------------------------------------- the stop latch (docs/safety.md)

PRIORITY = {"artex": 10, "sim2bot": 20, "robot_msg": 30, "console": 40}
FWD = BaseVelocity(0.3, 0.0)


def stream(rig, ticks: int, *sources: str, command=FWD) -> tuple[int, set[str]]:
    """Every ``source`` sends ``command`` once per 20 ms tick for ``ticks`` ticks; returns
    (refused commands, sources that drove at some tick)."""
    refused, drove = 0, set()
    for _ in range(ticks):
        for source in sources:
            try:
                rig.loop.submit(source, command)
            except CommandError:
                refused += 1
        drove.add(rig.tick().active_source)
    return refused, drove - {""}


def test_a_latched_out_source_holds_the_tank_still_and_keeps_lower_sources_off(rig):
    stream(rig, 5, "robot_msg")
    rig.loop.submit("sim2bot", Stop())
    refused, drove = stream(rig, 50, "robot_msg", "sim2bot", "artex")  # 1 s: the stopper and a lower source too
    assert refused == 50 and drove == set()                            # robot_msg refused every time
    assert rig.duty == (0.0, 0.0)
    assert dict(rig.loop.snapshot().overridden)["sim2bot"] >= 49       # kept off by robot_msg's claim at zero
    rig.loop.submit("robot_msg", BaseVelocity(0.0, 0.0))               # re-engages with an explicit zero ...
    refused, drove = stream(rig, 3, "robot_msg", "sim2bot")
    assert refused == 0 and drove == {"robot_msg"} and rig.duty[0] > 0.0   # ... and drives at once


def test_a_latched_out_source_that_goes_quiet_lets_the_stopper_drive_after_its_timeout(rig):
    stream(rig, 5, "robot_msg")
    rig.loop.submit("sim2bot", Stop())
    _, drove = stream(rig, 10, "sim2bot")                              # 0.2 s: robot_msg's claim held at zero
    assert drove == set()
    _, drove = stream(rig, 30, "sim2bot")                              # its claim (0.5 s) ran out
    assert drove == {"sim2bot"} and rig.duty[0] > 0.0


@pytest.mark.parametrize("engage", [BaseVelocity(0.0, 0.0), TrackDuty(0.0, 0.0), JointVelocity((0.0, 0.0)),
                                    Stop(), Reset()], ids=repr)
def test_each_way_to_re_engage(rig, engage, caplog):
    stream(rig, 5, "robot_msg")
    rig.loop.submit("artex", Stop())
    with pytest.raises(CommandError, match="robot_msg was driving when artex sent stop"):
        rig.loop.submit("robot_msg", FWD)
    with caplog.at_level(logging.INFO, logger="agent.control.front"):
        rig.loop.submit("robot_msg", engage)
    refused, drove = stream(rig, 3, "robot_msg")
    assert refused == 0 and drove == {"robot_msg"} and rig.duty[0] > 0.0
    if not isinstance(engage, (Stop, Reset)):
        assert "robot_msg re-engaged after the stop from artex: it sent a zero velocity command" in caplog.text


def test_a_pause_re_engages_only_after_the_whole_timeout_since_the_last_refusal(rig):
    stream(rig, 5, "sim2bot")
    rig.loop.submit("artex", Stop())
    assert stream(rig, 10, "sim2bot")[0] == 10
    rig.tick(23)                                                       # 0.48 s since the last refusal
    assert stream(rig, 1, "sim2bot")[0] == 1                           # not yet: and the pause starts again
    rig.tick(24)                                                       # 0.5 s since then
    refused, drove = stream(rig, 3, "sim2bot")
    assert refused == 0 and drove == {"sim2bot"}


def test_the_console_re_engaged_overrides_the_hubs_stream_at_once(rig):
    """The issue's case: the operator holds a key, the hub streams and sends its periodic stop."""
    stream(rig, 10, "console", "artex", command=BaseVelocity(-0.3, 0.0))
    rig.loop.submit("artex", Stop())
    for _ in range(20):                                                # the key still held; the hub streams on
        with pytest.raises(CommandError, match="let go and press again"):
            rig.loop.submit("console", BaseVelocity(-0.3, 0.0))
        rig.loop.submit("artex", FWD)
        assert rig.tick().active_source == "" and rig.duty == (0.0, 0.0)   # the hub does not take the tank
    rig.loop.submit("console", BaseVelocity(0.0, 0.0))                 # a new key-down: zero, then drive
    rig.loop.submit("console", BaseVelocity(-0.3, 0.0))
    rig.loop.submit("artex", FWD)
    snap = rig.tick()
    assert snap.active_source == "console" and snap.tracks.cmd_left_mps < 0.0


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(streamers=st.sets(st.sampled_from(sorted(PRIORITY)), min_size=1), stopper=st.sampled_from(sorted(PRIORITY)))
def test_after_a_stop_the_stopper_drives_only_above_every_latched_out_source(rig, streamers, stopper):
    rig.tick(60)                                                       # 1.2 s quiet: earlier examples' latches end
    stream(rig, 5, *streamers)
    rig.loop.submit(stopper, Stop())
    others = streamers - {stopper}
    refused, drove = stream(rig, 30, *streamers | {stopper})
    assert refused == 30 * len(others)
    assert drove == ({stopper} if all(PRIORITY[stopper] > PRIORITY[s] for s in others) else set())
    for source in others:                                              # everyone re-engages: priorities as usual
        rig.loop.submit(source, BaseVelocity(0.0, 0.0))
    refused, drove = stream(rig, 3, *streamers | {stopper})
    assert refused == 0 and drove == {max(streamers | {stopper}, key=PRIORITY.get)}


def test_release_of_the_driving_source_stops_at_once(rig, caplog):
    rig.loop.submit("sim2bot", BaseVelocity(0.5, 0.0))
    rig.tick(5)
    with caplog.at_level(logging.INFO):
        rig.loop.release("sim2bot", "websocket closed")
    snap = rig.tick()                                   # 0.12 s, long before the 0.5 s timeout
    assert rig.duty == (0.0, 0.0) and snap.active_source == ""
    assert "sim2bot released (websocket closed) while driving base" in caplog.text


def test_release_hands_over_to_a_fresh_lower_source(rig):
    rig.loop.submit("artex", BaseVelocity(-0.2, 0.0))
    rig.loop.submit("robot_msg", BaseVelocity(0.4, 0.0))
    rig.tick(3)
    rig.loop.release("robot_msg", "zmq peer gone")
    snap = rig.tick()
    assert snap.active_source == "artex" and snap.tracks.cmd_left_mps < 0.12


def test_release_of_idle_source_only_drops_its_commands(rig, caplog):
    rig.loop.submit("robot_msg", BaseVelocity(0.4, 0.0))         # t = 0: fresh until 0.50 s
    rig.tick()
    rig.loop.submit("artex", BaseVelocity(-0.2, 0.0))            # t = 0.02: overridden, fresh until 0.52 s
    with caplog.at_level(logging.INFO):
        rig.loop.release("artex", "hub disconnected")
    assert "while driving" not in caplog.text and "1 pending claim(s) dropped" in caplog.text
    assert rig.tick(23).active_source == "robot_msg"             # t = 0.48
    snap = rig.tick()                                            # t = 0.50: artex would drive now, had it stayed
    assert snap.active_source == "" and rig.duty == (0.0, 0.0)
    rig.loop.release("nobody", "x")                               # unknown source: logged, ignored
    assert "unknown command source 'nobody'" in caplog.text


def test_reset_sends_joints_home_and_drops_base(rig):
    rig.loop.submit("sim2bot", JointPosition((0.5, 0.3)))
    rig.loop.submit("sim2bot", Gripper(0.0))
    rig.tick(20)
    snap = rig.loop.snapshot()
    assert snap.joints.q == pytest.approx((0.5, 0.3)) and snap.gripper == 0.0
    rig.loop.submit("sim2bot", BaseVelocity(0.3, 0.0))
    rig.tick(2)
    rig.loop.submit("sim2bot", Reset())
    snap = rig.tick()
    assert rig.duty == (0.0, 0.0) and snap.joints.target == (0.0, 0.0) and snap.gripper == 1.0
    snap = rig.tick(20)
    assert snap.joints.q == pytest.approx((0.0, 0.0))


def test_latched_command_refused_below_fresh_higher_source(rig):
    rig.loop.submit("robot_msg", JointVelocity((0.2, 0.0)))
    rig.tick(2)
    before = rig.loop.snapshot().joints.target
    for cmd in (JointPosition((1.0,)), Gripper(0.2), JointTrajectory((TrajectoryPoint(0.1, (0.3,)),)), Reset()):
        with pytest.raises(CommandError, match="held by robot_msg"):
            rig.loop.submit("artex", cmd)
    snap = rig.tick()
    assert dict(snap.overridden)["artex"] == 4
    assert snap.joints.target[0] > before[0] and snap.gripper == 1.0   # still robot_msg's velocity
    rig.tick(30)                                                      # robot_msg stale
    rig.loop.submit("artex", JointPosition((1.0,)))
    assert rig.tick().joints.target[0] == 1.0


# ---------------------------------------------------------------------------- joints


def test_trajectory_interpolation_and_hold(rig):
    traj = JointTrajectory((TrajectoryPoint(0.2, (0.2, 0.1)), TrajectoryPoint(0.6, (0.6, 0.1))))
    rig.loop.submit("robot_msg", traj)                     # t = 0: from home (0, 0)
    snap = rig.tick(5)                                     # t = 0.1: half-way to the first point
    assert snap.joints.target == pytest.approx((0.1, 0.05))
    snap = rig.tick(15)                                    # t = 0.4: between the points
    assert snap.joints.target == pytest.approx((0.4, 0.1)) and snap.joints.q == pytest.approx((0.4, 0.1))
    snap = rig.tick(30)                                    # t = 1.0: held at the last point
    assert snap.joints.q == pytest.approx((0.6, 0.1)) and snap.joints.qd == (0.0, 0.0)


@pytest.mark.parametrize("halt", [Stop(), JointTrajectoryStop()])
def test_stop_and_trajectory_stop_hold_the_current_pose(rig, halt):
    rig.loop.submit("robot_msg", JointTrajectory((TrajectoryPoint(1.0, (1.0, 0.0)),)))
    rig.tick(10)                                           # t = 0.2: pan at 0.2 rad
    rig.loop.submit("artex", halt)                         # from the lowest-priority source
    q = rig.tick().joints.q
    assert q[0] == pytest.approx(0.2, abs=0.03) and rig.tick(20).joints.q == q


def test_joint_velocity_integrates_then_holds_when_stale(rig):
    rig.loop.submit("sim2bot", JointVelocity((0.5, -0.25)))
    snap = rig.tick(10)
    assert snap.joints.q == pytest.approx((0.1, -0.05)) and snap.joints.qd == pytest.approx((0.5, -0.25))
    snap = rig.tick(15)                                   # t = 0.5: stale -> hold
    assert snap.watchdog == "expired"
    q = snap.joints.q
    assert q == pytest.approx((0.24, -0.12))
    assert rig.tick(10).joints.q == q


def test_joint_limits_clamp(rig, caplog):
    rig.loop.submit("artex", JointPosition((5.0, -3.0)))
    snap = rig.tick(100)
    assert snap.joints.q == pytest.approx((1.5708, -0.5))
    assert "clamped to joint limits" in caplog.text


def test_servo_pulses_reach_the_chip_only_when_changed(rig):
    sent: list[dict] = []
    forward = rig.hw.set_servo_pulses
    rig.hw.set_servo_pulses = lambda pulses: (sent.append(dict(pulses)), forward(pulses))   # record, pass on
    rig.tick()
    assert sent == [{PAN: 1500.0, TILT: 1384.62, 2: 2000.0}]   # home; gripper home_fraction 1.0 = open
    rig.tick(5)
    assert len(sent) == 1                                      # nothing moved: nothing sent
    rig.loop.submit("artex", JointPosition((0.7854,)))
    rig.loop.submit("artex", Gripper(0.25))
    rig.tick(30)
    assert len(sent) == 1 + 14                                 # 0.7854 rad at 3 rad/s: 14 ticks of motion
    assert sent[-1] == {PAN: 2000.0, TILT: 1384.62, 2: 1250.0}
    # the PCA9685 emulator sees the same widths (its counts are 4.88 us at 50 Hz)
    assert _wait(lambda: rig.sim.physics.servo_pulse_us.get(PAN) == pytest.approx(2000.0, abs=5))
    assert _wait(lambda: rig.sim.physics.servo_pulse_us.get(2) == pytest.approx(1250.0, abs=5))
    assert rig.sim.physics.servo_pulse_us.get(TILT) == pytest.approx(1384.6, abs=5)



def test_joints_commanded_after_a_long_still_period_move_and_reach_the_chip(rig):
    """Settled joints skip their step and reuse their state and pulses (agent/control/joints.py):
    every kind of joint command after a long still spell still moves them and reaches the chip."""
    def chip(channel: int, us: float) -> bool:
        return _wait(lambda: rig.sim.physics.servo_pulse_us.get(channel) == pytest.approx(us, abs=5))

    snap = rig.tick(1000)                                       # 20 s settled at home
    assert snap.joints.q == (0.0, 0.0) and snap.joints.qd == (0.0, 0.0)
    assert rig.tick().joints is rig.tick().joints               # reused while nothing moves
    rig.loop.submit("artex", JointPosition((0.5,)))
    snap = rig.tick(20)                                         # 3 rad/s: 9 ticks
    assert snap.joints.q == pytest.approx((0.5, 0.0)) and snap.joints.target == pytest.approx((0.5, 0.0))
    assert chip(PAN, 1818.3)                                    # 0.5 rad of -1.5708..1.5708 on 500..2500 us
    rig.tick(1000)
    for _ in range(10):                                         # a velocity stream: -1 rad/s for 0.2 s
        rig.loop.submit("artex", JointVelocity((-1.0,)))
        snap = rig.tick()
    assert snap.joints.q[0] == pytest.approx(0.3, abs=0.025) and snap.joints.qd[0] == pytest.approx(-1.0)
    snap = rig.tick(40)                     # it drives on until the watchdog (0.5 s), then holds where it is
    held = snap.joints.q[0]
    assert snap.joints.qd == (0.0, 0.0) and held == pytest.approx(0.3 - 0.5, abs=0.05)
    assert chip(PAN, 1500.0 + held / 1.5708 * 1000.0)
    snap = rig.tick(1000)
    assert snap.joints.q[0] == held and snap.joints.target[0] == held
    rig.loop.submit("artex", JointTrajectory((TrajectoryPoint(0.2, (0.0, 0.4)),)))
    snap = rig.tick(30)
    assert snap.joints.q == pytest.approx((0.0, 0.4))
    assert chip(PAN, 1500.0) and chip(TILT, 1692.3)            # tilt 0.4 rad of -0.5..0.8 on 1000..2000 us
    rig.tick(1000)
    rig.loop.submit("artex", Gripper(0.25))
    rig.tick()
    assert chip(2, 1250.0)
    rig.tick(1000)
    rig.loop.submit("artex", Reset())                           # home: joints and gripper
    snap = rig.tick(30)
    assert snap.joints.q == pytest.approx((0.0, 0.0)) and snap.gripper == 1.0
    assert chip(TILT, 1384.6) and chip(2, 2000.0)


def test_a_motor_status_or_loss_after_a_long_still_period_shows_in_the_next_snapshots(rig):
    """Health reports are reused without their lock while unchanged (agent/devices/health.py) and the
    faults made from them too (agent/devices/hardware.py): a change after a long still spell shows."""
    snap = rig.tick(1000)
    assert snap.faults == () and dict((d.name, d.state) for d in snap.devices)["motor"] == "ok"
    emu = rig.sim.motor_emulator
    emu.set_status(0x0001)                                      # the controller's E-Stop: health stays ok
    assert _wait(lambda: rig.tick().faults == ("motor: E-Stop",))
    emu.set_status(0)
    assert _wait(lambda: rig.tick().faults == ())
    rig.tick(1000)
    emu.unplug()                                                # the pty vanishes under the driver
    assert _wait(lambda: dict((d.name, d.state) for d in rig.hw.health())["motor"] == "lost")
    snap = rig.tick()
    assert dict((d.name, d.state) for d in snap.devices)["motor"] == "lost"
    assert any(f.startswith("motor: lost") for f in snap.faults), snap.faults
    rig.tick(1000)
    emu.replug()
    assert _wait(lambda: dict((d.name, d.state) for d in rig.hw.health())["motor"] == "ok", 10)
    snap = rig.tick()
    assert dict((d.name, d.state) for d in snap.devices)["motor"] == "ok" and snap.faults == ()


# ---------------------------------------------------------------------------- bad commands


@pytest.mark.parametrize("source, command, reason", [
    ("artex", JointPosition((0.1, 0.2, 0.3)), "3 values for 2 joints"),
    ("artex", JointVelocity(()), "no values"),
    ("artex", JointTrajectory((TrajectoryPoint(0.0, (0.0, 0.0, 0.0)),)), "3 values for 2 joints"),
    ("ros", BaseVelocity(0.1, 0.0), "unknown command source 'ros'"),
    ("artex", "forward", "unknown command str"),
])
def test_bad_commands_rejected_with_no_change(rig, caplog, source, command, reason):
    rig.tick()
    before = rig.loop.snapshot()
    with pytest.raises(CommandError, match=reason) as err:
        rig.loop.submit(source, command)
    assert err.value.source == source
    assert reason in caplog.text
    snap = rig.tick()
    assert snap.joints.target == before.joints.target and snap.watchdog == "idle"
    assert snap.tracks.cmd_left_mps == 0.0 and snap.overridden == before.overridden


def test_gripper_and_joints_rejected_without_servo(make_rig):
    rig = make_rig(drivers={"servo": None})
    with pytest.raises(CommandError, match="no gripper"):
        rig.loop.submit("artex", Gripper(0.5))
    with pytest.raises(CommandError, match="no servo joints"):
        rig.loop.submit("artex", JointVelocity((0.1,)))
    rig.loop.submit("artex", Reset())                     # fine: only drops the base
    assert rig.tick().joints.q == ()


def test_repeated_rejections_are_rate_limited_in_the_log(rig, caplog):
    for _ in range(20):
        with pytest.raises(CommandError):
            rig.loop.submit("artex", JointPosition((0.0,) * 3))
    assert sum("rejected JointPosition from artex" in r.getMessage() for r in caplog.records) == 1


# ---------------------------------------------------------------------------- IMU calibration


def test_calibrate_imu_refused_while_moving_then_runs_when_still(rig, caplog):
    rig.loop.submit("artex", BaseVelocity(0.3, 0.0))
    rig.tick()
    with pytest.raises(CommandError, match="needs the base still"):
        rig.loop.submit("artex", CalibrateImu())
    rig.loop.submit("artex", Stop())
    rig.tick()
    _wait(lambda: rig.sim.physics.track_mps[0] < 0.005 and rig.loop.tick().tracks.left_mps < 0.005)
    with caplog.at_level(logging.INFO):
        rig.loop.submit("artex", CalibrateImu())
        with pytest.raises(CommandError, match="already running"):
            rig.loop.submit("artex", CalibrateImu())
        assert _wait(lambda: "IMU gyro calibration done: bias" in caplog.text, timeout_s=30.0)


# ---------------------------------------------------------------------------- faults and shutdown


def test_motor_fault_keeps_ticking_and_holds_zero_until_a_new_command(rig, caplog):
    rig.loop.submit("artex", BaseVelocity(0.5, 0.0))
    rig.tick(3)
    rig.sim.motor_emulator.unplug()
    with caplog.at_level(logging.INFO):
        snap = rig.tick()                                # the write fails: reported in the same tick
        assert any(f.startswith("motor: ") for f in snap.faults)
        snap = rig.tick()                                # from then on the loop commands zero
        assert snap.tracks.duty_left == 0.0 and snap.active_source == ""
        # a command sent during the outage must not drive once the motor is back: it is refused
        rig.clock.t += 0.001
        with pytest.raises(CommandDeclined, match="a motor controller failure was in force"):
            rig.loop.submit("artex", BaseVelocity(0.5, 0.0))
        rig.sim.motor_emulator.replug()
        deadline = time.monotonic() + 15.0
        while rig.hw.motor.state != "ok" and time.monotonic() < deadline:
            rig.clock.t += 0.001
            snap = rig.loop.tick(rig.clock.t)
            time.sleep(0.02)
        assert rig.hw.motor.state == "ok"
        rig.clock.t += 0.001
        snap = rig.loop.tick(rig.clock.t)
        rig.clock.t += 0.001
        snap = rig.loop.tick(rig.clock.t)
        assert rig.duty == (0.0, 0.0) and snap.tracks.duty_left == 0.0
        assert "duty write failed" in caplog.text and "confirmed again" in caplog.text
    # the source streaming when the motor failed is latched out: it re-engages as after a stop
    rig.clock.t += 0.001
    with pytest.raises(CommandDeclined, match="a motor controller failure was in force"):
        rig.loop.submit("artex", BaseVelocity(0.5, 0.0))
    rig.loop.submit("artex", BaseVelocity(0.0, 0.0))     # a zero: re-engaged
    rig.loop.submit("artex", BaseVelocity(0.5, 0.0))
    rig.clock.t += DT
    rig.loop.tick(rig.clock.t)
    assert rig.duty[0] > 0.0


def test_close_writes_zero_and_confirms(rig):
    rig.loop.submit("artex", TrackDuty(0.6, 0.6))
    rig.tick(20)
    assert rig.duty[0] > 0.3
    assert rig.loop.close() is True
    assert rig.duty == (0.0, 0.0)
    with pytest.raises(CommandError, match="closed"):
        rig.loop.submit("artex", BaseVelocity(0.1, 0.0))
    assert rig.loop.close() is True                      # idempotent


def test_close_reports_unconfirmed_zero(rig):
    rig.sim.motor_emulator.unplug()
    assert rig.loop.close(timeout_s=0.2) is False


# ---------------------------------------------------------------------------- snapshots and stats


def test_samples_since_ring(make_rig):
    rig = make_rig(drivers={"motor": None})     # 600 ticks: no paced serial round trip per tick
    rig.tick(600)
    latest = rig.loop.snapshot()
    assert latest.seq == 600
    got = rig.loop.samples_since(590)
    assert [s.seq for s in got] == list(range(591, 601))
    assert len(rig.loop.samples_since(0, limit=1000)) == 512          # ring bound
    assert rig.loop.samples_since(0, limit=3)[0].seq == 89            # oldest kept first
    assert rig.loop.samples_since(600) == []
    with pytest.raises(ValueError):
        rig.loop.samples_since(0, limit=0)


def test_snapshot_carries_devices_imu_and_faults(rig):
    assert _wait(lambda: rig.hw.latest_imu() is not None)
    snap = rig.tick()
    assert {d.name for d in snap.devices} == {"motor", "imu", "servo", "estop"}
    assert snap.imu is not None and snap.faults == ()


def test_tick_stats_with_injected_clock(rig):
    assert rig.loop.tick_stats().ticks == 0 and not rig.loop.keeps_rate()
    rig.tick(100)
    stats = rig.loop.tick_stats()
    assert stats.ticks == 100 and stats.late_ticks == 0 and stats.max_tick_s > 0.0
    assert stats.achieved_hz == pytest.approx(RATE, rel=0.05)
    rig.clock.t += 2.0                                   # no tick for 2 s: rate collapses
    assert rig.loop.tick_stats().achieved_hz == 0.0


# ---------------------------------------------------------------------------- the real thread


def test_thread_keeps_rate_and_watchdog_stops_after_timeout():
    cfg = config(control={"sources": {"robot_msg": {"priority": 30, "timeout_s": 5.0}}})
    sim = SimTank(cfg)
    hw = Hardware.from_config(cfg, sim)
    hw.start()
    loop = ControlLoop(cfg, hw)
    try:
        loop.start()
        with pytest.raises(RuntimeError):
            loop.tick()
        assert _wait(loop.keeps_rate, timeout_s=10.0)
        sent = time.monotonic()
        loop.submit("sim2bot", BaseVelocity(0.5, 0.0))
        assert _wait(lambda: sim.physics.duty[0] > 0.0, timeout_s=5.0)
        assert _wait(lambda: sim.physics.duty[0] == 0.0, timeout_s=5.0)
        elapsed = time.monotonic() - sent
        assert elapsed >= 0.5                            # never before the timeout
        assert elapsed < 2.0                             # loose: 0.5 s + one tick, plus load
        for end in (lambda: loop.release("robot_msg", "peer gone"), lambda: loop.submit("artex", Stop())):
            loop.submit("robot_msg", BaseVelocity(0.5, 0.0))   # a 5 s timeout: only the stop can zero it
            assert _wait(lambda: sim.physics.duty[0] > 0.0, timeout_s=5.0)
            sent = time.monotonic()
            end()
            assert _wait(lambda: sim.physics.duty[0] == 0.0, timeout_s=4.0), \
                f"not stopped {time.monotonic() - sent:.1f} s after"
        stats = loop.tick_stats()
        assert stats.ticks > 10 and stats.achieved_hz > 0
    finally:
        assert loop.close() is True
        hw.close()
        sim.close()
    assert not loop.keeps_rate()


def test_late_tick_is_counted_and_not_caught_up_in_a_burst():
    cfg = config()
    sim = SimTank(cfg)
    hw = Hardware.from_config(cfg, sim)
    hw.start()
    stall = {"s": 0.0}
    forward = hw.set_duty

    def slow_set_duty(left: float, right: float, *, force: bool = False) -> bool:   # the real write, after a one-off stall
        delay, stall["s"] = stall["s"], 0.0
        time.sleep(delay)
        return forward(left, right, force=force)

    hw.set_duty = slow_set_duty
    loop = ControlLoop(cfg, hw)
    try:
        loop.start()
        assert _wait(lambda: loop.tick_stats().ticks > 5)
        stall["s"] = 0.25                                  # about 12 slots missed
        assert _wait(lambda: stall["s"] == 0.0)
        seq = loop.snapshot().seq
        assert _wait(lambda: loop.snapshot().seq >= seq + 8, timeout_s=5.0)
        after = [s.t_mono_s for s in loop.samples_since(seq)][:8]
        gaps = sorted(b - a for a, b in pairwise(after))
        assert gaps[len(gaps) // 2] > DT / 2               # a burst would run them back to back
        assert loop.tick_stats().late_ticks >= 1 and loop.tick_stats().max_tick_s >= 0.2
    finally:
        loop.close()
        hw.close()
        sim.close()


def _wait(predicate, timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if predicate():
                return True
        except (AssertionError, TypeError):
            pass
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.01)



def test_a_tick_that_keeps_failing_zeroes_the_motor_logs_once_and_the_thread_survives(caplog):
    cfg = config()
    sim = SimTank(cfg)
    hw = Hardware.from_config(cfg, sim)
    hw.start()
    loop = ControlLoop(cfg, hw)
    latest_imu = hw.latest_imu
    try:
        loop.start()
        assert _wait(lambda: loop.tick_stats().ticks > 5)
        caplog.set_level(logging.ERROR, logger="agent.control")
        calls = [0]

        def failing_imu():                                 # fault injection: every tick now raises
            calls[0] += 1
            return 1 / 0
        hw.latest_imu = failing_imu
        loop.submit("sim2bot", BaseVelocity(0.5, 0.0))
        ticks = loop.tick_stats().ticks
        assert _wait(lambda: calls[0] >= 25)               # ~25 failing ticks (0.5 s at 50 Hz)
        failed = [r for r in caplog.records if r.getMessage().startswith("control tick failed")]
        assert len(failed) == 1 and failed[0].exc_info is not None   # once per interval, with the traceback
        assert loop.tick_stats().ticks == ticks            # no tick completed
        assert max(abs(d) for d in sim.physics.duty) < 0.1  # each failure wrote zero after the ramp's first step
        hw.latest_imu = latest_imu                         # the bug goes away: the same thread ticks again
        assert _wait(lambda: loop.tick_stats().ticks > ticks + 5)
    finally:
        hw.latest_imu = latest_imu
        loop.close()
        hw.close()
        sim.close()
