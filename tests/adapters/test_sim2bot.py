"""Sim2Bot adapter end to end: the real ``sim2bot bridge`` subprocess, the real ``sim2bot.Robot``
client, the agent on its simulated tank (real RoboClaw and PCA9685 drivers on their emulators)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import socket
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sim2bot import Robot
from websockets.sync.client import connect as ws_connect

from agent.adapters.sim2bot import Sim2botAdapter
from agent.adapters.sim2bot_room import video_url, with_query
from agent.support.ratelimit import backoff_s
from agent.testing.running_agent import deep_merge, running_agent, sim_config, wait_for
from agent.testing.sim2bot_bridge import Bridge, agent_params, controller

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "sim2bot" / "v1"
LOG = "agent.adapters.sim2bot"
# sim2bot.Robot (the peer under test, not ours) calls a websockets API that warns.
pytestmark = pytest.mark.filterwarnings("ignore:connect\\(\\) must be used as a context manager")


@pytest.fixture(scope="module")
def bridge():
    with Bridge() as b:
        yield b


async def drive(robot: Robot, seconds: float, **twist) -> float:
    """Stream base_velocity every 0.1 s (inside the 0.5 s watchdog) for ``seconds``; returns the
    monotonic time of the last send."""
    end = time.monotonic() + seconds
    last = time.monotonic()
    while time.monotonic() < end:
        robot.base_velocity(**twist)
        last = time.monotonic()
        await asyncio.sleep(0.1)
    return last


def pulse_us(q: float, lo=-1.5708, hi=1.5708, min_us=500.0, max_us=2500.0) -> float:
    return min_us + (q - lo) / (hi - lo) * (max_us - min_us)


def odometry(robot: Robot) -> dict:
    state = robot.state()
    return next(s for s in state.sensors if s["name"] == "odometry") if state else {}


# ---------------------------------------------------------------- pure helpers


def test_urls_and_backoff():
    url = with_query("ws://10.0.0.5:8765/ws", room="lab", token=None)
    assert url == "ws://10.0.0.5:8765/ws?room=lab"
    assert video_url(url) == "ws://10.0.0.5:8765/video?room=lab"
    delays = [backoff_s(n, 0.5, 10.0) for n in range(12)]
    assert 0.25 <= delays[0] <= 0.5 and all(d <= 10.0 for d in delays) and delays[-1] >= 5.0


def test_config_section_checks_url_and_delays():
    from agent.config import ConfigError, loads
    with pytest.raises(ConfigError, match=r"\$\.sim2bot\.url"):
        loads(json.dumps({"sim2bot": {"url": "http://bridge:8765/ws"}}))
    with pytest.raises(ConfigError, match="reconnect_delay_max_s"):
        loads(json.dumps({"sim2bot": {"reconnect_delay_s": 5, "reconnect_delay_max_s": 1}}))
    with pytest.raises(ConfigError, match=r"\$\.sim2bot\.telemetry_hz"):
        loads(json.dumps({"sim2bot": {"telemetry_hz": 120}}))
    assert loads(json.dumps({"sim2bot": {"url": "wss://b.example/ws", "room": "lab-1"}})).sim2bot.room == "lab-1"


@pytest.mark.parametrize("section, error", [
    ({"room": "a", "rooms": ["b"]}, "set either room or rooms, not both"),
    ({"rooms": ["a", "b", "a"]}, "rooms lists a more than once"),
    ({"rooms": ["bad room"]}, r"\$\.sim2bot\.rooms\[0\]"),
    ({"rooms": [f"r{i}" for i in range(9)]}, r"\$\.sim2bot\.rooms: List should have at most 8"),
])
def test_config_rooms_are_checked(section, error):
    from agent.config import ConfigError, loads
    with pytest.raises(ConfigError, match=error):
        loads(json.dumps({"sim2bot": section}))


def test_config_served_rooms_default_to_the_single_room():
    from agent.config import loads
    served = [loads(json.dumps({"sim2bot": section})).sim2bot.served_rooms
              for section in ({}, {"room": "lab"}, {"rooms": ["a", "default"]}, {"rooms": []})]
    assert served == [(None,), ("lab",), ("a", "default"), (None,)]


def lan_address() -> str | None:
    """This machine's non-loopback IPv4 address, if it has one."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("10.255.255.255", 9))
            address = s.getsockname()[0]
        except OSError:
            return None
    return None if address.startswith("127.") else address


async def test_a_non_loopback_bridge_needs_the_token(caplog):
    address = lan_address()
    if address is None:
        pytest.skip("no non-loopback address to reach the bridge from")
    own = Bridge(host=address, token="s3cret-token")
    await asyncio.to_thread(own.start)
    try:
        with caplog.at_level(logging.WARNING, logger=LOG):
            async with running_agent(agent_params(own, refused_delay_s=30.0)) as agent:
                adapter = agent.adapters["sim2bot"]
                assert await wait_for(lambda: "403" in adapter.status()["last_error"], 5)
                await asyncio.sleep(0.7)  # real time held on purpose: the 0.5 s backoff would have retried by now
                assert not adapter.status()["connected"] and adapter.rooms[0].link.total_failures == 1
        refusals = [r.getMessage() for r in caplog.records if "refused the robot" in r.getMessage()]
        assert len(refusals) == 1 and "not a network fault" in refusals[0]
        async with running_agent(agent_params(own, token="s3cret-token")) as agent:
            assert await wait_for(lambda: agent.adapters["sim2bot"].status()["connected"], 5)
            robot = Robot(url=own.url, api_key="s3cret-token")
            await asyncio.to_thread(robot.connect)
            try:
                assert [r.id for r in await asyncio.to_thread(robot.wait_for_sim, 5.0, 0.1)] == ["tank"]
            finally:
                await asyncio.to_thread(robot.close)
    finally:
        await asyncio.to_thread(own.stop)


# ---------------------------------------------------------------- session and commands


async def test_describe_shows_the_tank_and_telemetry_flows(bridge):
    async with running_agent(agent_params(bridge, telemetry_hz=20)) as agent, controller(bridge) as robot:
        info = (await asyncio.to_thread(robot.describe))[0]
        assert (info.index, info.id, info.name, info.dof) == (0, "tank", agent.cfg.name, 2)
        assert info.joint_names == ["turret_pan", "camera_tilt"] and info.locomotion == "mobile"
        assert [c["id"] for c in robot.cameras()] == ["model:0"]
        assert await wait_for(lambda: robot.state() is not None, 5)
        seen = []
        robot.on_telemetry(seen.append)
        # flows (the 20 Hz pacing is checked on a virtual clock in test_sim2bot_telemetry.py)
        assert await wait_for(lambda: len(seen) >= 3, 5)
        assert seen[-1].t > seen[0].t and seen[-1].capture_ts > time.time() - 5
        status = agent.adapters["sim2bot"].status()
        assert status["connected"] and status["video_connected"] and status["sent"] >= len(seen)


async def test_base_velocity_moves_the_tank_and_the_watchdog_stops_it(bridge):
    async with running_agent(agent_params(bridge)) as agent, controller(bridge) as robot:
        emu = agent.sim.motor_emulator
        await drive(robot, 0.5, vx=0.4, omega=0.2)
        x_before = odometry(robot)["x_m"]
        last = await drive(robot, 0.5, vx=0.4, omega=0.2)
        seq = agent.control.snapshot().seq
        assert emu.motor_duty[0] > 0 and emu.motor_duty[1] > 0
        assert await wait_for(lambda: odometry(robot)["x_m"] > max(0.1, x_before + 0.05), 3)
        state = robot.state()
        tracks = next(s for s in state.sensors if s["name"] == "tracks")
        assert state.tcp[0] > 0.1 and tracks["cmd_left_mps"] > 0 and tracks["left_counts"] > 0
        stopped = await asyncio.to_thread(emu.wait_for, lambda: emu.motor_duty == [0.0, 0.0], 3.0)

        def zeroed_at() -> float | None:      # the tick that wrote the zero (published just after the write)
            return next((s.t_mono_s for s in agent.control.samples_since(seq)
                         if s.tracks.duty_left == 0.0 and s.tracks.duty_right == 0.0), None)

        assert stopped and await wait_for(lambda: zeroed_at() is not None, 2)
        # from the last command sent to the zero, not from the checks above
        assert 0.3 <= zeroed_at() - last <= 2.0   # 0.5 s watchdog + a tick, loose under load
        control = await asyncio.to_thread(
            lambda: wait_for_sync(lambda: robot.state().sensors[-1]["watchdog"] == "expired", 2))
        assert control


def wait_for_sync(predicate, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


async def test_the_last_controller_leaving_stops_the_tank_at_once(bridge, caplog):
    caplog.set_level(logging.INFO, logger="agent.control")
    async with running_agent(agent_params(bridge)) as agent:
        emu = agent.sim.motor_emulator
        async with controller(bridge) as robot:
            await drive(robot, 0.4, vx=0.5)
            robot.base_velocity(vx=0.5)
        # the client closed right after a fresh command: stopped by release, not the watchdog
        assert await asyncio.to_thread(emu.wait_for, lambda: emu.motor_duty == [0.0, 0.0], 1.0)
        assert "sim2bot released (the last controller left the bridge) while driving base" in caplog.text


async def test_joint_commands_move_the_servos_through_the_pca9685(bridge):
    async with running_agent(agent_params(bridge)) as agent, controller(bridge) as robot:
        pulses = agent.physics.servo_pulse_us
        robot.move_to([0.5, 0.2])
        assert await wait_for(lambda: abs(pulses.get(0, 0) - pulse_us(0.5)) < 6, 3)
        assert abs(pulses[1] - pulse_us(0.2, -0.5, 0.8, 1000, 2000)) < 6
        assert await wait_for(lambda: robot.state().q == pytest.approx([0.5, 0.2], abs=1e-3), 2)

        end = time.monotonic() + 0.6
        while time.monotonic() < end:                # joint_velocity, re-sent inside the watchdog
            robot.set_velocity([-0.5, 0.0])
            await asyncio.sleep(0.1)
        q_moving = robot.state().q[0]
        assert q_moving < 0.35
        # not re-sent: the joints hold once the watchdog ran out, and the controller sees where
        assert await wait_for(lambda: agent.control.snapshot().joints.qd[0] == 0.0, 3)
        assert await wait_for(lambda: robot.state().q[0] == pytest.approx(agent.control.snapshot().joints.q[0],
                                                                          abs=1e-6), 2)
        held = robot.state().q[0]
        await asyncio.sleep(0.3)  # real time held on purpose: a joint still moving would move ~0.15 rad
        assert robot.state().q[0] == pytest.approx(held, abs=1e-6)

        robot.move_trajectory([(0.0, [held, 0.2]), (0.5, [-0.3, 0.1])])
        assert await wait_for(lambda: abs(pulses[0] - pulse_us(-0.3)) < 6, 3)
        assert await wait_for(lambda: robot.state().target[0] == pytest.approx(-0.3, abs=1e-3), 2)


async def test_gripper_sets_its_servo_pulse(bridge):
    async with running_agent(agent_params(bridge)) as agent, controller(bridge) as robot:
        robot.gripper(0.25)
        assert await wait_for(lambda: abs(agent.physics.servo_pulse_us.get(2, 0) - 1250.0) < 6, 3)
        assert await wait_for(lambda: robot.state().gripper == pytest.approx(0.25), 2)


async def test_stop_freezes_everything_and_reset_returns_home(bridge):
    # sim2bot may drive 5 s after its last command: only the stop zeroes the tracks within 2 s
    params = deep_merge(agent_params(bridge), {"control": {"sources": {"sim2bot": {"timeout_s": 5.0}}}})
    async with running_agent(params) as agent, controller(bridge) as robot:
        emu, pulses = agent.sim.motor_emulator, agent.physics.servo_pulse_us
        robot.move_to([1.5, 0.0])                     # 0.5 s of slewing at 3 rad/s
        await drive(robot, 0.3, vx=0.5)
        robot.stop()
        assert await asyncio.to_thread(emu.wait_for, lambda: emu.motor_duty == [0.0, 0.0], 2.0)
        assert await wait_for(lambda: agent.control.snapshot().stopped, 1)
        # the servo writes go out on the I2C bus thread, after the snapshot: wait for the held position's
        held = agent.control.snapshot().joints.q[0]
        assert await wait_for(lambda: abs(pulses[0] - pulse_us(held)) < 5, 2), (pulses[0], pulse_us(held))
        frozen = pulses[0]
        await asyncio.sleep(0.3)  # real time held on purpose: a slewing servo (3 rad/s) would move ~0.9 rad
        assert pulses[0] == frozen and frozen < pulse_us(1.4)   # stopped short of the target
        robot.reset()
        assert await wait_for(lambda: abs(pulses[0] - pulse_us(0.0)) < 6, 3)
        assert robot.state().target == pytest.approx([0.0, 0.0], abs=1e-6)


async def test_rooms_isolate_two_agents(bridge):
    params_a = agent_params(bridge, room="room-a", robot_id="tank-a")
    params_b = agent_params(bridge, room="room-b", robot_id="tank-b")
    async with running_agent(params_a) as a, running_agent(params_b) as b, \
            controller(bridge, "room-a") as ra, controller(bridge, "room-b") as rb:
        assert [r.id for r in ra.describe()] == ["tank-a"]
        assert [r.id for r in rb.describe()] == ["tank-b"]
        await drive(ra, 0.6, vx=0.5)
        assert a.sim.motor_emulator.motor_duty[0] > 0
        assert b.sim.motor_emulator.motor_duty == [0.0, 0.0]
        assert (ra.state().id, rb.state().id) == ("tank-a", "tank-b")


async def test_bridge_restart_releases_at_once_then_re_announces(caplog):
    caplog.set_level(logging.INFO, logger="agent.control")
    own = Bridge()
    await asyncio.to_thread(own.start)
    try:
        async with running_agent(agent_params(own)) as agent:
            adapter, emu = agent.adapters["sim2bot"], agent.sim.motor_emulator
            async with controller(own) as robot:
                async def keep_driving():
                    with contextlib.suppress(Exception):   # the bridge goes away underneath
                        await drive(robot, 10.0, vx=0.5)
                driving = asyncio.create_task(keep_driving())
                assert await asyncio.to_thread(emu.wait_for, lambda: emu.motor_duty[0] > 0, 3.0)
                await asyncio.to_thread(own.stop)
                assert await wait_for(lambda: not adapter.status()["connected"], 3)
                assert await asyncio.to_thread(emu.wait_for, lambda: emu.motor_duty == [0.0, 0.0], 1.0)
                driving.cancel()
            assert "sim2bot released (bridge connection" in caplog.text
            assert "while driving base: stopped at once" in caplog.text
            await asyncio.to_thread(own.start)
            assert await wait_for(lambda: adapter.status()["connected"], 10)
            async with controller(own) as robot:
                assert [r.id for r in robot.describe()] == ["tank"]
            assert adapter.status()["connects"] == 2
    finally:
        await asyncio.to_thread(own.stop)


# ---------------------------------------------------------------- fixtures: each executed or declined

#: What each published fixture does on the 2-joint simulated tank. A fixture file without an
#: entry here fails the test: every message type needs a decided handling.
FIXTURE_OUTCOMES = {
    "base_velocity": "executed",
    "camera_subscribe": "camera",
    "camera_unsubscribe": "camera",
    "gripper": "executed",
    "hello_room": "session",            # consumed by the bridge: joins the room
    "joint_position": "rejected",       # 7 values for a 2-joint robot
    "joint_trajectory": "rejected",
    "joint_trajectory_stop": "executed",
    "joint_velocity": "rejected",
    "marker": "declined",
    "marker_clear": "declined",
    "marker_delete": "declined",
    "marker_points": "declined",
    "reset": "executed",
    "room_opening": "declined",
    "stop": "executed",
    "tcp_pose": "declined",
    "tcp_pose_oriented": "rejected",    # robot index 1
    "telemetry": "session",             # what the simulator sends: checked in test_sim2bot_telemetry
}


def _outcomes(status: dict) -> dict:
    return {k: status[k] for k in ("executed", "camera", "declined", "rejected")}


async def test_every_fixture_is_executed_or_declined_with_its_reason(bridge, caplog):
    caplog.set_level(logging.DEBUG, logger=LOG)
    names = sorted(p.stem for p in FIXTURES.glob("*.json"))
    assert names == sorted(FIXTURE_OUTCOMES), "a fixture type has no decided handling"
    hello = json.loads((FIXTURES / "hello_room.json").read_text())
    async with running_agent(agent_params(bridge, room=hello["room"])) as agent:
        adapter = agent.adapters["sim2bot"]
        assert await wait_for(lambda: adapter.status()["connected"], 5)
        with ws_connect(bridge.url) as ws:          # a raw controller socket
            ws.send(json.dumps(hello))
            for name in names:
                if FIXTURE_OUTCOMES[name] == "session":
                    continue
                message = json.loads((FIXTURES / f"{name}.json").read_text())
                before = _outcomes(adapter.status())
                ws.send(json.dumps(message))
                await wait_for(lambda b=before: _outcomes(adapter.status()) != b, 3)
                after = _outcomes(adapter.status())
                changed = [k for k in after if after[k] != before[k]]
                assert changed == [FIXTURE_OUTCOMES[name]], (name, before, after)
                if changed[0] in ("declined", "rejected"):
                    assert any(message["type"] in r.getMessage() for r in caplog.records
                               if r.name == LOG), f"{name}: no logged reason"
    reasons = "\n".join(r.getMessage() for r in caplog.records if r.name == LOG)
    assert "q has 7 values; the robot has dof 2" in reasons
    assert "unknown robot index 1" in reasons and "tcp_pose accepted but ignored" in reasons


# ---------------------------------------------------------------- fuzzing: rejected means no motion

BAD_NUMBERS = st.sampled_from([math.nan, math.inf, -math.inf, "0.5", True, [0.5], {"v": 1}])
# (robot 1 or 7 on base_velocity / stop is the primary base, as the browser simulator drives it: accepted)
BAD_ADDRESS = st.one_of(
    st.fixed_dictionaries({"robot": st.sampled_from([-1, -7, "0", 0.5, True, [0]])}),
    st.fixed_dictionaries({"room": st.sampled_from(["room-x", "bad room", "x" * 81, 5, ["default"]])}),
)


def _corrupt_vector(name):
    return st.one_of(
        st.lists(st.just(0.4), min_size=3, max_size=40),                     # longer than dof 2
        st.tuples(st.just(0.4), BAD_NUMBERS).map(list),
        st.sampled_from([None, "0.4", 0.4, {"0": 0.4}]),
    ).map(lambda v: {name: v})


BAD_MESSAGES = st.one_of(
    st.tuples(st.just({"type": "base_velocity", "vx": 0.5, "omega": 0.3}),
              st.one_of(st.sampled_from(["vx", "omega", "vy", "vz"]).flatmap(
                  lambda k: BAD_NUMBERS.map(lambda v: {k: v})), BAD_ADDRESS)),
    st.tuples(st.just({"type": "joint_position"}), _corrupt_vector("q")),
    st.tuples(st.just({"type": "joint_velocity"}), _corrupt_vector("qd")),
    st.tuples(st.just({"type": "gripper", "fraction": 0.1}),
              st.one_of(st.sampled_from([1.5, -0.1, None]).map(lambda v: {"fraction": v}),
                        BAD_NUMBERS.map(lambda v: {"fraction": v}), BAD_ADDRESS)),
    st.tuples(st.just({"type": "joint_trajectory", "points": [{"t": 0, "q": [0.4, 0.4]}]}),
              st.one_of(
                  st.sampled_from([[], [{"t": 1, "q": [0.4]}, {"t": 0, "q": [0.4]}], [[0, [0.4]]],
                                   [{"t": -1, "q": [0.4]}], [{"t": 0, "q": [0.4] * 3}], "pts", None])
                  .map(lambda v: {"points": v}),
                  st.sampled_from(["yes", 1, [True]]).map(lambda v: {"loop": v}), BAD_ADDRESS)),
    st.tuples(st.sampled_from([{"type": "stop"}, {"type": "reset"}]), BAD_ADDRESS),
).map(lambda pair: {**pair[0], **pair[1]})


async def test_fuzzed_bad_messages_are_rejected_and_nothing_moves(bridge):
    async with running_agent(agent_params(bridge)) as agent:
        adapter: Sim2botAdapter = agent.adapters["sim2bot"]
        assert await wait_for(lambda: agent.physics.servo_pulse_us.get(0, 0) > 0, 3)
        await asyncio.sleep(0.1)
        home_pulses = dict(agent.physics.servo_pulse_us)
        home = agent.control.snapshot()
        outcomes = []

        @settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
        @given(st.lists(BAD_MESSAGES, min_size=1, max_size=4))
        def feed(batch):
            for message in batch:
                outcomes.append((adapter.handle_message(json.dumps(message)), message))

        feed()
        wrong = [m for outcome, m in outcomes if outcome != "rejected"]
        assert not wrong, f"accepted: {wrong[:3]}"
        await asyncio.sleep(0.2)                      # ten control ticks
        snap = agent.control.snapshot()
        assert agent.sim.motor_emulator.motor_duty == [0.0, 0.0]
        assert agent.physics.servo_pulse_us == home_pulses
        assert (snap.active_source, snap.joints.target, snap.gripper, snap.stopped) == \
            ("", home.joints.target, home.gripper, False)
        assert adapter.status()["rejected"] == len(outcomes)


def test_the_adapter_is_up_only_when_every_room_is_and_names_the_failing_room():
    from agent.adapters.sim2bot import merged_state
    from agent.ports import LinkState, LinkStatus

    def room(name, state, since, error=""):
        return LinkStatus(name="sim2bot", state=state, connected=state is LinkState.UP, since=since,
                          last_error=error, detail={"room": name})

    up_a, up_b = room("a", LinkState.UP, 5.0), room("b", LinkState.UP, 7.0)
    assert merged_state([up_a, up_b]) == (LinkState.UP, True, 7.0, "")
    down_b = room("b", LinkState.DOWN, 9.0, "OSError: refused")
    assert merged_state([room("a", LinkState.UP, 5.0, "TimeoutError: old"), down_b]) == \
        (LinkState.DOWN, False, 9.0, "room b: OSError: refused")
    assert merged_state([down_b]) == (LinkState.DOWN, False, 9.0, "OSError: refused")
    assert merged_state([up_a, room("b", LinkState.CONNECTING, 8.0)])[:3] == (LinkState.CONNECTING, False, 8.0)
