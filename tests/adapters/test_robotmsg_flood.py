"""robot_msg multipart floods: many-part messages whose every part is under the per-frame limit
(ZMQ_MAXMSGSIZE) and whose totals are far over ``max_frame_bytes``, on the action and the command
sockets, from a real ZeroMQ peer on loopback.

The agent runs in this process, so its resident memory is this process's ``VmRSS``; the flood is
sent without copies (one shared part, ``copy=False``) from a publisher that blocks instead of
queueing (``XPUB_NODROP``, ``SNDHWM`` 2), so what grows is the agent's side.
"""

from __future__ import annotations

import asyncio
import logging

import pytest
import zmq
from robot_msg import ControllerCommand, Pose, RobotAction, RobotActionRealTimeAction, Vec3

from agent.testing.running_agent import wait_for
from tests.adapters.test_robotmsg import controlled, envelope, moving, rm_config

pytestmark = pytest.mark.timeout(90)

MAX_FRAME = 1 << 20           # max_frame_bytes (the default); ZMQ_MAXMSGSIZE (per frame) is twice this
PART = 1 << 20                # every part under the per-frame limit (and zero-copy in pyzmq)
PARTS = 40                    # 40 MiB a message, 40x the message limit
MESSAGES = 8                  # per socket: 320 MiB offered to each socket
MIB = 1 << 20


def rss_bytes() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))


def flood(address: str, messages: int) -> int:
    """Send ``messages`` messages of PARTS parts of PART bytes; returns how many went out whole
    (a message started while the agent had dropped the connection goes nowhere)."""
    ctx = zmq.Context()
    pub = ctx.socket(zmq.XPUB)
    pub.setsockopt(zmq.LINGER, 0)
    pub.setsockopt(zmq.XPUB_NODROP, 1)
    pub.setsockopt(zmq.SNDTIMEO, 5000)
    pub.connect(address)
    part = memoryview(bytes(PART))
    sent = 0
    try:
        assert pub.poll(5000) and pub.recv() == b"\x01"
        for _ in range(messages):
            try:
                for _ in range(PARTS - 1):
                    pub.send(part, zmq.SNDMORE, copy=False)
                pub.send(part, copy=False)
                sent += 1
            except zmq.Again:  # the agent dropped us mid-message: ZeroMQ reconnects, go on
                continue
    finally:
        pub.close(linger=5000)  # what is queued still goes out (bounded)
        ctx.term()
    return sent


async def test_a_multipart_flood_is_dropped_as_read_and_memory_returns(caplog):
    caplog.set_level(logging.WARNING, logger="agent.adapters.robotmsg")
    async with controlled(rm_config({"max_frame_bytes": MAX_FRAME})) as (agent, peer):
        act = await peer.publisher("action")
        cmd = await peer.publisher("command")
        pulses = dict(agent.physics.servo_pulse_us)
        targets = agent.control.snapshot().joints.target

        async def sentinel(sock, message, counted) -> bool:
            """Send a harmless valid message until the adapter has handled one: everything sent
            before it on that socket has been read (or was lost with a dropped connection)."""
            for _ in range(100):
                before = counted()
                await sock.send(envelope(message))
                if await wait_for(lambda: counted() > before, 0.5):
                    return True
            return False

        ee = RobotAction(frame_id="base_link", real_time_action=RobotActionRealTimeAction(
            ee_pose_rt=[Pose(position=Vec3(0.1, 0.0, 0.2))]))                   # declined: moves nothing
        declined = lambda: peer.status()["declined"].get("ee_pose_rt", 0)        # noqa: E731
        updates = lambda: peer.status()["events"].get("ctrl_update", 0)          # noqa: E731
        assert await sentinel(act, ee, declined) and await sentinel(cmd, ControllerCommand(ctrl_update=True), updates)
        before = rss_bytes()

        sent = await asyncio.gather(asyncio.to_thread(flood, peer.endpoint("action"), MESSAGES),
                                    asyncio.to_thread(flood, peer.endpoint("command"), MESSAGES))
        assert await sentinel(act, ee, declined) and await sentinel(cmd, ControllerCommand(ctrl_update=True), updates)

        status = peer.status()
        seq = agent.control.snapshot().seq
        assert status["connected"] and await wait_for(lambda: agent.control.snapshot().seq >= seq + 10, 5.0)
        assert not moving(agent) and agent.physics.servo_pulse_us == pulses
        assert agent.control.snapshot().joints.target == targets and status["applied"] == 0
        dropped = status["rejected_reasons"].get("oversize", 0)
        assert 2 <= dropped <= sum(sent) and status["rejected"] == dropped, (sent, status)
        assert status["evictions"].get("action", 0) >= 1 and status["evictions"].get("command", 0) >= 1
        assert "rejected (oversize): message of 40 part(s), 41943040 bytes; the limit is 1048576" in caplog.text
        # the heap the dropped messages took is given back (TRIM_DELAY_S after the last drop)
        assert await wait_for(lambda: rss_bytes() - before < 30 * MIB, 5.0), \
            f"RSS {before / MIB:.0f} -> {rss_bytes() / MIB:.0f} MiB"

        await peer.send(act, RobotAction(frame_id="base_link",           # and the sockets still work
                                         real_time_action=RobotActionRealTimeAction(u_rt=[0.3, 0.0])))
        assert await wait_for(lambda: moving(agent), 5.0)


async def test_only_a_message_over_twice_the_limit_drops_the_peers():
    async with controlled(rm_config({"max_frame_bytes": 64 << 10})) as (agent, peer):
        act = await peer.publisher("action")
        status = await peer.send_raw(act, [b"x"] * 50)   # 50 bytes, 50 parts: framing, the peer stays
        assert status["rejected_reasons"] == {"framing": 1} and status["evictions"] == {}
        status = await peer.send_raw(act, [b"x" * 1000] * 100)  # 100 kB: over the limit, under twice it
        assert status["rejected_reasons"] == {"framing": 1, "oversize": 1} and status["evictions"] == {}
        status = await peer.send_raw(act, [b"x" * 1000] * 200)  # 200 kB: over twice the limit
        assert status["rejected_reasons"] == {"framing": 1, "oversize": 2}
        assert await wait_for(lambda: peer.status()["evictions"] == {"action": 1}, 5.0)
        assert await asyncio.wait_for(act.recv(), 5) == b"\x01"  # dropped: our side reconnects by itself
        await peer.send(act, RobotAction(frame_id="base_link",
                                         real_time_action=RobotActionRealTimeAction(u_rt=[0.3, 0.0])))
        assert await wait_for(lambda: moving(agent), 5.0)
        assert peer.status()["rejected"] == 3
