"""robot_msg adapter end to end: real ZeroMQ sockets on loopback, the real codecs, the simulated tank.

The test plays the controller: it publishes RobotAction / ControllerCommand
envelopes from an XPUB socket (an XPUB sees the agent's subscription arrive,
which is how the tests wait out the PUB/SUB slow joiner) and subscribes to the
RobotState stream. The robot is the real agent (control loop, RoboClaw and
PCA9685 drivers on their emulators), observed through the tank physics.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import math
import socket
import struct
import time
from pathlib import Path

import pytest
import robot_msg as rm
import zmq
import zmq.asyncio
import zmq.auth
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from robot_msg import ControllerCommand, RobotAction, RobotActionRealTimeAction, RobotActionTrajectoryAction
from robot_msg.types import MessageMetadata, Timestamp

from agent.control.joints import angle_to_pulse_us
from agent.testing.running_agent import deep_merge, running_agent, sim_config, wait_for

pytestmark = pytest.mark.timeout(60)

DOF = 2  # the shipped simulated tank: turret_pan, camera_tilt


def rm_config(robot_msg: dict | None = None, **top) -> dict:
    """The simulated tank with the robot_msg adapter bound to free loopback ports (no cameras: faster)."""
    section = {
        "enabled": True, "state_hz": 50, "reconnect_delay_s": 0.05, "reconnect_delay_max_s": 0.5,
        "state": {"address": "tcp://127.0.0.1:*"},
        "command": {"address": "tcp://127.0.0.1:*"},
        "action": {"address": "tcp://127.0.0.1:*"},
    }
    return sim_config(**deep_merge({"robot_msg": deep_merge(section, robot_msg or {}),
                                    "drivers": {"cameras": []}}, top))


def slow_watchdog(robot_msg: dict | None = None) -> dict:
    """A 5 s robot_msg watchdog: within a test only the behaviour under test can stop the tank."""
    return rm_config(robot_msg, control={"sources": {"robot_msg": {"priority": 30, "timeout_s": 5.0}}})


def u_rt(vx: float, omega: float = 0.0) -> RobotAction:
    return RobotAction(frame_id="base_link", real_time_action=RobotActionRealTimeAction(u_rt=[vx, omega]))


def envelope(msg: object, encoding: str = "binary") -> bytes:
    return rm.encode(msg) if encoding == "binary" else rm.encode_json(msg).encode()


class Controller:
    """The test's robot_msg peer."""

    def __init__(self, agent, ctx: zmq.asyncio.Context | None = None) -> None:
        self.agent = agent
        self.cfg = agent.cfg.robot_msg
        self.ctx = ctx or zmq.asyncio.Context()
        self.adapter = agent.adapters["robot_msg"]

    def status(self) -> dict:
        return self.adapter.status()

    def endpoint(self, which: str) -> str:
        """Where the agent's ``which`` socket is bound or connecting (ports may be chosen at bind)."""
        return self.status()["endpoints"][which]

    async def publisher(self, which: str, curve: tuple[bytes, bytes, bytes] | None = None) -> zmq.asyncio.Socket:
        """An XPUB connected to the agent's ``which`` socket, returned once the agent's subscription is live."""
        scfg = getattr(self.cfg, which)
        sock = self.ctx.socket(zmq.XPUB)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.XPUB_VERBOSE, 1)
        if curve is not None:
            sock.curve_publickey, sock.curve_secretkey, sock.curve_serverkey = curve
        sock.connect(self.endpoint(which))
        assert await asyncio.wait_for(sock.recv(), 5) == b"\x01" + (scfg.topic or "").encode()
        return sock

    async def subscriber(self, curve: tuple[bytes, bytes, bytes] | None = None) -> zmq.asyncio.Socket:
        sock = self.ctx.socket(zmq.SUB)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.SUBSCRIBE, b"")
        if curve is not None:
            sock.curve_publickey, sock.curve_secretkey, sock.curve_serverkey = curve
        sock.connect(self.endpoint("state"))
        return sock

    async def send(self, sock: zmq.asyncio.Socket, msg: object, encoding: str = "binary",
                   topic: bytes | None = None) -> None:
        data = envelope(msg, encoding)
        await sock.send_multipart([topic, data] if topic is not None else [data])

    async def send_raw(self, sock: zmq.asyncio.Socket, frames: list[bytes]) -> dict:
        """Send one message and return the status once the adapter has accounted for it."""
        before = self.status()
        await sock.send_multipart(frames)
        assert await wait_for(lambda: self._settled(before), 5.0)
        return self.status()

    def _settled(self, before: dict) -> bool:
        def outcomes(st: dict) -> int:
            return st["rejected"] + st["applied"] + sum(st["declined"].values()) + sum(st["events"].values())

        now = self.status()
        return now["received"] > before["received"] and outcomes(now) > outcomes(before)

    def close(self) -> None:
        self.ctx.destroy(linger=0)


@contextlib.asynccontextmanager
async def controlled(cfg: dict, *, wait_connected: bool = True):
    """A running agent and the test's peer, once the adapter's sockets are open."""
    async with running_agent(cfg) as agent:
        peer = Controller(agent)
        try:
            assert not wait_connected or await wait_for(lambda: peer.status()["connected"], 5.0)
            yield agent, peer
        finally:
            peer.close()


def moving(agent) -> bool:
    return agent.physics.duty != [0.0, 0.0]


async def drive(peer: Controller, sock, vx: float, seconds: float, encoding: str = "binary",
                topic: bytes | None = None) -> float:
    """Stream u_rt at 20 Hz for ``seconds``; returns the monotonic time of the last send."""
    end = time.monotonic() + seconds
    last = time.monotonic()
    while time.monotonic() < end:
        await peer.send(sock, u_rt(vx), encoding, topic)
        last = time.monotonic()
        await asyncio.sleep(0.05)
    return last


# --------------------------------------------------------------------------- RobotState


async def test_state_stream_decodes_with_increasing_sequence_and_documented_aux():
    async with controlled(rm_config()) as (agent, peer):
        sub = await peer.subscriber()
        states = []
        deadline = time.monotonic() + 10.0
        while len(states) < 15 and time.monotonic() < deadline:
            state = rm.decode(await asyncio.wait_for(sub.recv(), 5))
            states.append(state)
            if len(states) == 15 and "imu_gyro" not in {a.name for a in state.metadata.aux}:
                states.pop(0)  # the IMU has not reported yet: keep reading
        assert len(states) == 15, "no RobotState with IMU arrays within 10 s"
        seqs = [s.sequence for s in states]
        assert all(b > a for a, b in zip(seqs, seqs[1:], strict=False))
        last = states[-1]
        assert isinstance(last, rm.RobotState) and last.frame_id == "base_link"
        assert len(last.q) == DOF and len(last.dq) == DOF and last.tau_ext == [0.0] * DOF
        sample = last.metadata.sample_time
        assert sample.clock_kind == "monotonic" and sample.clock_id.startswith(("linux-boot:", "process-"))
        assert abs(sample.seconds - time.monotonic()) < 5.0
        assert last.metadata.send_time.clock_kind == "unix" and abs(last.metadata.send_time.seconds - time.time()) < 5
        aux = {a.name: a for a in last.metadata.aux}
        for name, unit in [("odom_position", "m"), ("odom_yaw", "rad"), ("odom_vx", "m/s"), ("odom_omega", "rad/s"),
                           ("imu_accel", "m/s^2"), ("imu_gyro", "rad/s"), ("imu_orientation", "1"),
                           ("battery_voltage", "V"), ("battery_current", "A"), ("track_speed", "m/s")]:
            assert aux[name].unit == unit, name
        assert aux["imu_accel"].frame_id == "base_link" and aux["odom_position"].frame_id == "odom"
        assert 9.0 < aux["imu_accel"].data[2] < 10.5
        assert 9.0 < aux["battery_voltage"].data[0] < 13.0
        assert peer.status()["sent"] >= 15 and peer.status()["peers"]["state"] == 1


async def slot_state(sub, period: float) -> rm.RobotState:
    """The next state received just past a slot boundary (a slot's state: the loop's clock is time.monotonic)."""
    while True:
        state = rm.decode(await asyncio.wait_for(sub.recv(), 2 * period + 3))
        if time.monotonic() % period < 0.4 * period:
            return state


async def test_ctrl_update_publishes_a_state_at_once():
    """A ctrl_update in a slot without one gets its state at once; a second in that slot is merged into
    the next slot's state (counted in events/ctrl_update_merged), never sent apart (slots of 2 s)."""
    period = 2.0
    async with controlled(rm_config({"state_hz": 1 / period})) as (agent, peer):
        sub = await peer.subscriber()
        cmd = await peer.publisher("command")
        first = await slot_state(sub, period)
        t0 = time.monotonic()
        await peer.send(cmd, ControllerCommand(ctrl_update=True))
        second = rm.decode(await asyncio.wait_for(sub.recv(), 4))
        assert time.monotonic() - t0 < 1.0  # the next scheduled state is over 1.5 s away
        assert second.sequence > first.sequence
        assert peer.status()["events"]["ctrl_update"] == 1
        slot = math.floor(t0 / period)
        await peer.send(cmd, ControllerCommand(ctrl_update=False))      # the same slot: merged
        assert await wait_for(lambda: peer.status()["events"]["ctrl_update"] == 2, 1.0)
        assert math.floor(time.monotonic() / period) == slot, "the machine is too slow for this test"
        assert peer.status()["events"]["ctrl_update_merged"] == 1
        third = rm.decode(await asyncio.wait_for(sub.recv(), period + 3))
        assert math.floor(time.monotonic() / period) > slot      # the next slot's state, none before it
        assert third.sequence == second.sequence + 1


async def test_a_ctrl_update_storm_costs_at_most_twice_state_hz():
    """ControllerCommands asking for a state at ~1 kHz: at most one ctrl_update state per slot goes out
    besides the slot's own, the rest are counted as merged."""
    hz = 20
    async with controlled(rm_config({"state_hz": hz})) as (agent, peer):
        cmd = await peer.publisher("command")
        updates = lambda: peer.status()["events"].get("ctrl_update", 0)    # noqa: E731
        before, sent0, t0 = updates(), peer.status()["sent"], time.monotonic()
        while updates() - before < 300:
            assert time.monotonic() - t0 < 20.0, f"only {updates() - before} ctrl_updates taken in 20 s"
            await peer.send(cmd, ControllerCommand(ctrl_update=True))
            await asyncio.sleep(0.001)                       # pacing the storm at ~1 kHz
        elapsed, sent = time.monotonic() - t0, peer.status()["sent"] - sent0
        assert sent <= 2 * hz * elapsed + 4, f"{sent} states in {elapsed:.2f} s for {updates() - before} ctrl_updates"
        assert peer.status()["events"]["ctrl_update_merged"] >= updates() - before - (hz * elapsed + 2)


# --------------------------------------------------------------------------- RobotAction


async def test_u_rt_drives_the_tank_and_the_watchdog_stops_it():
    async with controlled(rm_config()) as (agent, peer):
        act = await peer.publisher("action")
        x0 = agent.physics.pose()[0]
        last = await drive(peer, act, 0.4, 1.0)
        assert moving(agent) and agent.physics.pose()[0] - x0 > 0.1
        assert agent.control.snapshot().active_source == "robot_msg"
        assert await wait_for(lambda: not moving(agent), 3.0)
        stopped_after = time.monotonic() - last
        assert 0.4 < stopped_after < 2.0, stopped_after  # the 0.5 s watchdog, not a disconnect or a stop
        # the emulator sees the zero duty during the tick that publishes "expired": wait for the snapshot
        assert await wait_for(lambda: agent.control.snapshot().watchdog == "expired", 1.0)
        assert peer.status()["applied"] >= 10 and peer.status()["rejected"] == 0


@pytest.mark.parametrize("encoding", ["json", "binary"])
async def test_envelope_encodings_both_ways(encoding):
    async with controlled(rm_config({"encoding": encoding})) as (agent, peer):
        sub = await peer.subscriber()
        raw = await asyncio.wait_for(sub.recv(), 5)
        assert raw[:1] == (b"{" if encoding == "json" else b"R")
        state = rm.decode_json(raw) if encoding == "json" else rm.decode(raw)
        assert isinstance(state, rm.RobotState)
        act = await peer.publisher("action")
        other = "binary" if encoding == "json" else "json"
        await drive(peer, act, 0.3, 0.3, encoding=other)  # received envelopes may be either
        assert moving(agent)
        # reversing ramps through zero (0.3 s at 2 m/s^2 when idle): drive until it is reversed
        reverse = asyncio.create_task(drive(peer, act, -0.3, 5.0, encoding=encoding))
        await wait_for(lambda: agent.physics.duty[0] < 0, 5)
        reverse.cancel()
        assert agent.physics.duty[0] < 0


async def test_topic_frames_when_configured():
    cfg = rm_config({"state": {"topic": "robot_state"}, "action": {"topic": "robot_action"}})
    async with controlled(cfg) as (agent, peer):
        sub = await peer.subscriber()
        topic, raw = await asyncio.wait_for(sub.recv_multipart(), 5)
        assert topic == b"robot_state" and isinstance(rm.decode(raw), rm.RobotState)
        act = await peer.publisher("action")
        data = envelope(u_rt(0.3))
        status = await peer.send_raw(act, [b"robot_action", data])
        assert status["applied"] == 1 and await wait_for(lambda: moving(agent), 2.0)
        status = await peer.send_raw(act, [b"robot_action_v2", data])  # prefix-matches the subscription
        assert status["rejected_reasons"] == {"topic": 1}
        status = await peer.send_raw(act, [b"robot_action", data, b"extra"])
        assert status["rejected_reasons"] == {"topic": 1, "framing": 1}


async def test_without_topic_one_frame_or_any_topic_pair():
    async with controlled(rm_config()) as (agent, peer):
        sub = await peer.subscriber()
        assert len(await asyncio.wait_for(sub.recv_multipart(), 5)) == 1
        act = await peer.publisher("action")
        assert (await peer.send_raw(act, [envelope(u_rt(0.2))]))["applied"] == 1
        assert (await peer.send_raw(act, [b"whatever", envelope(u_rt(0.2))]))["applied"] == 2


async def test_q_rt_and_q_traj_move_the_servos_through_the_pca9685():
    async with controlled(rm_config()) as (agent, peer):
        joints = agent.cfg.drivers.servo.joints
        pulses = agent.physics.servo_pulse_us

        def at(q: tuple[float, float], tol_us: float = 3.0) -> bool:
            return all(abs(pulses.get(j.channel, 0.0) - angle_to_pulse_us(a, j)) < tol_us
                       for j, a in zip(joints, q, strict=True))

        assert await wait_for(lambda: at((0.0, 0.0)), 5.0)  # home
        act = await peer.publisher("action")
        await peer.send(act, RobotAction(frame_id="base_link",
                                         real_time_action=RobotActionRealTimeAction(q_rt=[0.6, 0.4])))
        assert await wait_for(lambda: at((0.6, 0.4)), 5.0)
        await peer.send(act, RobotAction(frame_id="base_link", trajectory_action=RobotActionTrajectoryAction(
            q_traj=[[-0.6, 0.0], [0.3, -0.3]], traj_duration=1.2)))
        seen = []
        end = time.monotonic() + 4.0
        while time.monotonic() < end and not (seen and at((0.3, -0.3))):
            seen.append(pulses[joints[0].channel])
            await asyncio.sleep(0.01)
        assert at((0.3, -0.3))
        assert min(seen) < angle_to_pulse_us(-0.4, joints[0])  # it went through the first waypoint
        assert not moving(agent) and peer.status()["applied"] == 2


async def test_end_effector_targets_are_declined_and_counted():
    async with controlled(rm_config()) as (agent, peer):
        act = await peer.publisher("action")
        pose = rm.Pose(position=rm.Vec3(0.2, 0.0, 0.3))
        status = await peer.send_raw(act, [envelope(RobotAction(
            frame_id="base_link", real_time_action=RobotActionRealTimeAction(ee_pose_rt=[pose])))])
        assert status["declined"] == {"ee_pose_rt": 1} and status["applied"] == 0
        status = await peer.send_raw(act, [envelope(RobotAction(
            frame_id="base_link", real_time_action=RobotActionRealTimeAction(ee_pose_rt=[pose], u_rt=[0.2, 0.0])))])
        assert status["declined"] == {"ee_pose_rt": 2} and status["applied"] == 1
        assert await wait_for(lambda: moving(agent), 2.0)


# --------------------------------------------------------------------------- ControllerCommand


async def test_stop_mode_stops_the_tracks_and_holds_the_joints():
    async with controlled(slow_watchdog()) as (agent, peer):
        act = await peer.publisher("action")
        cmd = await peer.publisher("command")
        await peer.send(act, RobotAction(frame_id="base_link", trajectory_action=RobotActionTrajectoryAction(
            q_traj=[[1.2, 0.7]], traj_duration=4.0)))
        await drive(peer, act, 0.5, 0.5)
        assert moving(agent)
        await peer.send(cmd, ControllerCommand(ctrl_mode=0))
        assert await wait_for(lambda: not moving(agent), 2.0)  # long before the 5 s watchdog
        snap = agent.control.snapshot()
        assert snap.stopped
        held = snap.joints.q
        assert 0.0 < held[0] < 1.1  # stopped part way along the 4 s trajectory
        await asyncio.sleep(0.1)  # real time held on purpose: ~5 ticks, in which the trajectory would move ~0.03 rad
        assert agent.control.snapshot().joints.q == held and not moving(agent)


async def test_hold_and_home_modes_and_joint_pos():
    async with controlled(rm_config()) as (agent, peer):
        cmd = await peer.publisher("command")
        await peer.send(cmd, ControllerCommand(joint_pos=[0.5, 0.5]))
        assert await wait_for(lambda: agent.control.snapshot().joints.q == (0.5, 0.5), 5.0)
        await peer.send(cmd, ControllerCommand(ctrl_mode=2))  # home
        assert await wait_for(lambda: agent.control.snapshot().joints.q == (0.0, 0.0), 5.0)
        status = await peer.send_raw(cmd, [envelope(ControllerCommand(ctrl_mode=9))])
        assert status["rejected_reasons"] == {"unsupported_mode": 1}


async def test_calibrate_sensor_removes_the_gyro_bias():
    async with controlled(rm_config()) as (agent, peer):
        agent.sim.chip("mpu6050").motion.gyro_bias_radps = (0.0, 0.0, 0.05)

        def gyro_z() -> float:
            imu = agent.control.snapshot().imu
            return imu.gyro_radps[2] if imu is not None else math.nan

        assert await wait_for(lambda: abs(gyro_z() - 0.05) < 0.01, 5.0)
        cmd = await peer.publisher("command")
        await peer.send(cmd, ControllerCommand(calibrate_sensor=True))
        assert await wait_for(lambda: abs(gyro_z()) < 0.01, 15.0)
        assert peer.status()["events"]["calibrate_sensor"] == 1
        act = await peer.publisher("action")
        await drive(peer, act, 0.5, 0.4)
        status = await peer.send_raw(cmd, [envelope(ControllerCommand(calibrate_sensor=True))])
        assert status["rejected_reasons"] == {"refused": 1}  # not while the base moves


# --------------------------------------------------------------------------- bad input


def _nan_u_rt(value: float) -> bytes:
    data = bytearray(rm.encode(u_rt(0.125)))
    i = data.find(struct.pack("<d", 0.125))
    data[i:i + 8] = struct.pack("<d", value)
    return bytes(data)


VALID = rm.encode(u_rt(0.3))
VALID_JSON = rm.encode_json(u_rt(0.3)).encode()


def bad_messages(max_frame_bytes: int):
    """(frames, expected reason or None for 'any') pairs, none of which may move the robot."""
    numbers = st.floats(-2.0, 2.0)
    encodings = st.sampled_from(["binary", "json"])
    return st.one_of(
        st.binary(max_size=400).filter(lambda b: b[:2] != b"R2").map(lambda b: ([b], None)),
        st.integers(0, len(VALID) - 1).map(lambda n: ([VALID[:n]], "truncated")),
        st.binary(max_size=64).map(lambda b: ([b"RM\x01\x00" + b], "protocol_1")),
        st.just(([VALID[:2] + b"\x01\x00" + VALID[4:]], "protocol_1")),
        st.just(([VALID_JSON.replace(b'"version":2', b'"version":1')], "protocol_1")),
        st.integers(max_frame_bytes + 1, 2 * max_frame_bytes).map(lambda n: ([VALID + b"\x00" * (n - len(VALID))],
                                                                            "oversize")),
        st.sampled_from([math.nan, math.inf, -math.inf]).map(lambda v: ([_nan_u_rt(v)], "non_finite")),
        st.sampled_from([b"NaN", b"Infinity", b"1e999"]).map(
            lambda v: ([VALID_JSON.replace(b"0.3", v)], "non_finite")),
        st.tuples(st.lists(numbers, min_size=1, max_size=6).filter(lambda u: len(u) != 2), encodings).map(
            lambda a: ([envelope(RobotAction(frame_id="b", real_time_action=RobotActionRealTimeAction(u_rt=a[0])),
                                 a[1])], "dimension")),
        st.tuples(st.lists(numbers, min_size=1, max_size=6).filter(lambda q: len(q) != DOF), encodings).map(
            lambda a: ([envelope(RobotAction(frame_id="b", real_time_action=RobotActionRealTimeAction(q_rt=a[0])),
                                 a[1])], "dimension")),
        st.just(([envelope(ControllerCommand(ctrl_mode=0))], "unexpected_type")),
        st.just(([envelope(rm.RobotState(rm.Wrench(rm.Vec3(0, 0, 0), rm.Vec3(0, 0, 0)), [], [], "b", [], [], 0, []))],
                 "unexpected_type")),
        st.just(([b"a", b"b", VALID], "framing")),
    )


async def test_bad_frames_are_rejected_counted_and_nothing_moves():
    async with controlled(rm_config({"max_frame_bytes": 4096})) as (agent, peer):
        ad = peer.adapter
        targets = agent.control.snapshot().joints.target
        address = peer.endpoint("action")

        def run_examples() -> int:
            ctx = zmq.Context()
            pub = ctx.socket(zmq.XPUB)
            pub.setsockopt(zmq.LINGER, 0)
            pub.connect(address)
            assert pub.poll(5000) and pub.recv() == b"\x01"
            examples = [0]

            @settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
            @given(bad=bad_messages(4096))
            @example(bad=([b"\xff" * 10], None))
            @example(bad=([VALID[:20]], "truncated"))
            @example(bad=([b"RM\x01\x00\x00"], "protocol_1"))
            @example(bad=([VALID + b"\x00" * 4096], "oversize"))
            @example(bad=([_nan_u_rt(math.nan)], "non_finite"))
            @example(bad=([envelope(RobotAction(frame_id="b", real_time_action=RobotActionRealTimeAction(
                u_rt=[0.1, 0.2, 0.3])))], "dimension"))
            def check(bad):
                frames, reason = bad
                before = ad.status()
                pub.send_multipart(frames)
                deadline = time.monotonic() + 5.0
                while ad.status()["rejected"] == before["rejected"] and time.monotonic() < deadline:
                    time.sleep(0.002)
                after = ad.status()
                assert after["rejected"] == before["rejected"] + 1, (frames, after)
                assert after["received"] == before["received"] + 1
                if reason is not None:
                    got = {k: v - before["rejected_reasons"].get(k, 0) for k, v in after["rejected_reasons"].items()}
                    assert got.get(reason) == 1, (reason, got)
                assert after["applied"] == 0 and not moving(agent)
                assert agent.control.snapshot().joints.target == targets
                examples[0] += 1

            try:
                check()
            finally:
                ctx.destroy(linger=0)
            return examples[0]

        assert await asyncio.to_thread(run_examples) >= 20
        status = peer.status()
        assert set(status["rejected_reasons"]) >= {"truncated", "protocol_1", "oversize", "non_finite", "dimension"}
        act = await peer.publisher("action")  # the socket keeps working
        await drive(peer, act, 0.3, 0.3)
        assert moving(agent) and peer.status()["applied"] >= 1


async def test_frames_beyond_the_transport_limit_drop_only_that_connection():
    async with controlled(slow_watchdog({"max_frame_bytes": 2048})) as (agent, peer):
        act = await peer.publisher("action")
        await drive(peer, act, 0.3, 0.3)
        assert moving(agent)
        await act.send(b"\x00" * 5000)  # over 2 x max_frame_bytes: libzmq drops the connection
        assert await wait_for(lambda: peer.status()["disconnects"].get("action") == 1, 5.0)
        assert await wait_for(lambda: not moving(agent), 2.0)  # dropped peer = released source
        assert await asyncio.wait_for(act.recv(), 5) == b"\x01"  # our side reconnects by itself
        await drive(peer, act, 0.3, 0.3)
        assert moving(agent)
        assert peer.status()["rejected"] == 0


async def test_a_flood_never_builds_a_backlog():
    async with controlled(rm_config({"rcvhwm": 16})) as (agent, peer):
        act = await peer.publisher("action")
        slow = envelope(u_rt(0.1))
        for _ in range(5000):
            await act.send(slow)
        t_switch = time.monotonic()
        fast = envelope(u_rt(0.6))
        for _ in range(10):
            await act.send(fast)
            await asyncio.sleep(0.02)

        def cmd() -> float:
            return agent.control.snapshot().tracks.cmd_left_mps

        # the newest command drives within seconds: no backlog of the 5000 old ones is worked off first
        assert await wait_for(lambda: cmd() > 0.5, 3.0), f"{time.monotonic() - t_switch:.1f} s after the switch"
        status = peer.status()
        assert status["received"] <= 5010 and status["rejected"] == 0
        assert status["superseded"] + status["applied"] == status["received"]


async def test_a_stop_inside_a_flood_of_commands_is_never_dropped():
    async with controlled(slow_watchdog()) as (agent, peer):
        act = await peer.publisher("action")
        cmd = await peer.publisher("command")
        await drive(peer, act, 0.4, 0.4)
        assert moving(agent)
        hold, stop = envelope(ControllerCommand(ctrl_mode=1)), envelope(ControllerCommand(ctrl_mode=0))
        for i in range(400):  # same kind as the stop: plain latest-wins would keep only the last hold
            await cmd.send(stop if i == 200 else hold)
        assert await wait_for(lambda: not moving(agent), 2.0)  # not the 5 s watchdog
        assert agent.control.snapshot().stopped
        status = peer.status()
        assert status["rejected"] == 0 and status["superseded"] > 0


# --------------------------------------------------------------------------- connections


async def test_a_disconnecting_controller_stops_the_robot_at_once(caplog):
    caplog.set_level(logging.INFO, logger="agent")
    async with controlled(slow_watchdog()) as (agent, peer):
        act = await peer.publisher("action")
        await drive(peer, act, 0.4, 0.4)
        assert moving(agent)
        act.close(linger=0)
        t0 = time.monotonic()
        assert await wait_for(lambda: not moving(agent), 2.0)
        assert time.monotonic() - t0 < 2.0  # not the 5 s watchdog
        assert await wait_for(lambda: peer.status()["peers"]["action"] == 0, 2.0)
    text = caplog.text
    assert text.count("action (bind") >= 2
    assert "peer connected" in text and "peer disconnected" in text and "robot_msg released" in text


async def test_connect_mode_sockets_reach_a_listening_controller():
    ctx = zmq.asyncio.Context()
    try:
        sub = ctx.socket(zmq.SUB)
        sub.setsockopt(zmq.SUBSCRIBE, b"")
        state_addr = f"tcp://127.0.0.1:{sub.bind_to_random_port('tcp://127.0.0.1')}"
        pub = ctx.socket(zmq.XPUB)
        action_addr = f"tcp://127.0.0.1:{pub.bind_to_random_port('tcp://127.0.0.1')}"
        cfg = rm_config({"state": {"address": state_addr, "mode": "connect"},
                         "action": {"address": action_addr, "mode": "connect"}})
        async with controlled(cfg) as (agent, peer):
            assert isinstance(rm.decode(await asyncio.wait_for(sub.recv(), 5)), rm.RobotState)
            assert await asyncio.wait_for(pub.recv(), 5) == b"\x01"
            await drive(peer, pub, 0.3, 0.3)
            assert moving(agent)
    finally:
        ctx.destroy(linger=0)


async def test_a_busy_port_is_retried_until_it_frees(caplog):
    blocker = socket.socket()
    blocker.bind(("127.0.0.1", 0))
    blocker.listen()
    cfg = rm_config({"action": {"address": f"tcp://127.0.0.1:{blocker.getsockname()[1]}"}})
    async with controlled(cfg, wait_connected=False) as (agent, peer):
        assert await wait_for(lambda: any("sockets failed" in r.getMessage() for r in caplog.records), 5.0)
        assert not peer.status()["connected"]
        blocker.close()
        assert await wait_for(lambda: peer.status()["connected"], 5.0)
        act = await peer.publisher("action")
        await drive(peer, act, 0.3, 0.3)
        assert moving(agent)
    errors = [r for r in caplog.records if r.name == "agent.adapters.robotmsg" and r.levelno >= logging.WARNING]
    assert len(errors) == 1 and "sockets failed" in errors[0].getMessage()


async def test_curve_admits_only_authorized_controllers(tmp_path):
    keys = tmp_path / "keys"
    authorized = tmp_path / "authorized"
    keys.mkdir()
    authorized.mkdir()
    _, agent_secret = zmq.auth.create_certificates(keys, "agent")
    ctl_public, ctl_secret = zmq.auth.create_certificates(keys, "controller")
    _, stranger_secret = zmq.auth.create_certificates(keys, "stranger")
    (authorized / "controller.key").write_bytes(Path(ctl_public).read_bytes())
    agent_public, _ = zmq.auth.load_certificate(agent_secret)
    cfg = rm_config({"curve": {"secret_key_file": "keys/agent.key_secret", "authorized_keys_dir": "authorized"}})
    params = tmp_path / "params.json"
    params.write_text("{}")
    from agent.app import Agent
    from agent.config import AgentConfig
    async with Agent(AgentConfig.model_validate(cfg), config_path=str(params)) as agent:
        peer = Controller(agent)
        try:
            assert await wait_for(lambda: peer.status()["connected"], 5.0)
            ctl = (*zmq.auth.load_certificate(ctl_secret), agent_public)
            stranger = (*zmq.auth.load_certificate(stranger_secret), agent_public)
            sub = await peer.subscriber(curve=ctl)
            assert isinstance(rm.decode(await asyncio.wait_for(sub.recv(), 5)), rm.RobotState)
            bad = peer.ctx.socket(zmq.XPUB)
            bad.setsockopt(zmq.LINGER, 0)
            bad.curve_publickey, bad.curve_secretkey, bad.curve_serverkey = stranger
            bad.connect(peer.endpoint("action"))
            assert await wait_for(lambda: peer.status()["handshake_failures"] >= 1, 5.0)
            for _ in range(5):
                await bad.send(envelope(u_rt(0.5)))
                await asyncio.sleep(0.05)
            assert peer.status()["received"] == 0 and not moving(agent)
            act = await peer.publisher("action", curve=ctl)
            await drive(peer, act, 0.3, 0.3)
            assert moving(agent) and peer.status()["curve"]
        finally:
            peer.close()


async def test_an_adapter_bug_releases_the_robot_and_the_sockets_reopen(caplog):
    async with controlled(slow_watchdog()) as (agent, peer):
        adapter = peer.adapter
        act = await peer.publisher("action")
        endpoints = peer.status()["endpoints"]
        await drive(peer, act, 0.4, 0.3)
        assert moving(agent)
        translate = adapter._translate

        def buggy(message):                      # fault injection: a bug translating the next message
            adapter._translate = translate
            raise RuntimeError("injected translation bug")

        adapter._translate = buggy
        await peer.send(act, u_rt(0.4))
        assert await wait_for(lambda: not moving(agent), 2.0)   # released at once, not the 5 s watchdog
        assert "sockets failed unexpectedly" in caplog.text and "injected translation bug" in caplog.text
        assert await wait_for(lambda: peer.status()["connected"], 5.0)
        # the sockets were reopened on the ports they had (bound to "tcp://127.0.0.1:*"): the old
        # publisher reconnects by itself and drives again
        assert peer.status()["endpoints"] == endpoints
        await drive(peer, act, 0.3, 1.0)
        assert moving(agent)


def stamped(msg, seconds: float):
    """``msg`` with ``metadata.send_time`` = ``seconds`` on the Unix clock."""
    msg.metadata = MessageMetadata(send_time=Timestamp(seconds, "unix", "test"))
    return msg


async def test_a_u_rt_sent_before_a_stop_but_received_after_it_is_refused():
    """Stop (command socket) and u_rt (action socket) are not ordered against each other: a u_rt
    stamped before the stop is refused, one stamped after it drives (the unstamped window:
    tests/adapters/test_robotmsg_inbound.py)."""
    async with controlled(slow_watchdog()) as (agent, peer):
        act = await peer.publisher("action")
        cmd = await peer.publisher("command")
        await drive(peer, act, 0.5, 0.3)
        assert moving(agent)
        t_stop = time.time()
        before = peer.status()["rejected_reasons"].get("before_stop", 0)
        await peer.send(cmd, stamped(ControllerCommand(ctrl_mode=0), t_stop))
        assert await wait_for(lambda: agent.control.snapshot().stopped and not moving(agent), 2.0)
        st = await peer.send_raw(act, [envelope(stamped(u_rt(0.5), t_stop - 0.01))])   # sent before the stop
        assert st["rejected_reasons"]["before_stop"] == before + 1
        assert not moving(agent) and agent.control.snapshot().stopped
        await peer.send(act, stamped(u_rt(0.5), t_stop + 0.01))                         # sent after: drives
        assert await wait_for(lambda: moving(agent), 2.0)


async def test_a_non_finite_aux_value_drops_only_that_value(monkeypatch, caplog):
    """A NaN IMU temperature and an inf battery voltage (a sensor's bad reading) reach a real subscriber
    as a RobotState without those two arrays; everything else is there (issue 20 item 4)."""
    async with controlled(rm_config()) as (agent, peer):
        real = agent.control.snapshot

        def bad_sensors():
            snap = real()
            imu = snap.imu and dataclasses.replace(snap.imu, temperature_c=math.nan)
            power = snap.power and dataclasses.replace(snap.power, voltage_v=math.inf)
            return dataclasses.replace(snap, imu=imu, power=power)

        assert await wait_for(lambda: real().imu is not None and real().power is not None, 10)
        monkeypatch.setattr(agent.control, "snapshot", bad_sensors)
        sub = await peer.subscriber()
        errors = peer.status()["state_errors"]
        for _ in range(3):
            state = rm.decode(await asyncio.wait_for(sub.recv(), 5))
        aux = {a.name: a for a in state.metadata.aux}
        assert "imu_temperature" not in aux and "battery_voltage" not in aux
        assert aux["nonfinite_dropped"].data == [2.0]
        assert "imu_accel" in aux and "battery_current" in aux and "odom_position" in aux
        assert len(state.q) == DOF and peer.status()["state_errors"] == errors
        assert "aux imu_temperature is [nan]" in caplog.text


async def test_after_the_sockets_reopen_each_ctrl_update_publishes_a_state_at_once():
    """The session's sockets fail and reopen (an adapter bug, as above): the new session's publisher
    serves a ctrl_update at once (in a slot of its own: one ctrl_update state per slot)."""
    period = 1.0
    async with controlled(rm_config({"state_hz": 1 / period})) as (agent, peer):
        adapter = peer.adapter
        sub = await peer.subscriber()
        cmd = await peer.publisher("command")
        translate = adapter._translate

        def buggy(message):                      # fault injection: a bug translating the next message
            adapter._translate = translate
            raise RuntimeError("injected translation bug")

        adapter._translate = buggy
        await peer.send(cmd, ControllerCommand(ctrl_update=True))
        assert await wait_for(lambda: adapter._translate is translate, 5.0)
        assert await wait_for(lambda: peer.status()["connected"], 5.0)

        seqs = []
        for _ in range(3):     # each in a slot of its own, just past the slot's state (which proves the
            last = await slot_state(sub, period)    # subscriber joined the reopened socket): only the
            t0 = time.monotonic()                   # ctrl_update explains a state within 0.5 s
            before = peer.status()["events"].get("ctrl_update", 0)
            while peer.status()["events"].get("ctrl_update", 0) == before:   # the command publisher
                await peer.send(cmd, ControllerCommand(ctrl_update=True))   # reconnects by itself
                await wait_for(lambda: peer.status()["events"].get("ctrl_update", 0) > before, 0.1)
            state = rm.decode(await asyncio.wait_for(sub.recv(), 2.0))
            assert time.monotonic() - t0 < 0.5, "a ctrl_update after the sockets reopened published nothing at once"
            assert state.sequence == last.sequence + 1
            seqs.append(state.sequence)
        assert seqs == sorted(set(seqs))
