"""robot_msg flood guard (agent/adapters/robotmsg_guard.py): bounded reading of one message over
real ZeroMQ sockets, the drop policy's reasons and eviction rate, and dropping a socket's peers."""

from __future__ import annotations

import asyncio

import pytest
import zmq
import zmq.asyncio
from zmq.utils.monitor import parse_monitor_message

from agent.adapters.robotmsg_guard import (
    EVICT_INTERVAL_S, MAX_PARTS, YIELD_EVERY_PARTS, DropPolicy, Dropped, read_message_now, rebind_now,
)

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def pair():
    """A connected PAIR of sockets over inproc: (sender, receiver), no high-water marks."""
    ctx = zmq.Context()
    rx, tx = ctx.socket(zmq.PAIR), ctx.socket(zmq.PAIR)
    rx.setsockopt(zmq.RCVHWM, 0)
    tx.setsockopt(zmq.SNDHWM, 0)
    rx.bind("inproc://guard")
    tx.connect("inproc://guard")
    yield tx, rx
    ctx.destroy(linger=0)


async def receive(rx: zmq.Socket, max_bytes: int = 1000) -> list[bytes] | Dropped:
    """One message read as the adapter's receiving thread reads it (off the event loop)."""
    return await asyncio.to_thread(lambda: read_message_now(rx, rx.recv(copy=False), MAX_PARTS, max_bytes))


@pytest.mark.parametrize("parts, expected", [
    ([b"topic", b"envelope"], [b"topic", b"envelope"]),
    ([b"x" * 1000], [b"x" * 1000]),
    ([b"a", b"b", b"c"], Dropped(3, 3)),                    # more parts than [topic, envelope]
    ([b"x" * 1001], Dropped(1, 1001)),                      # one part over the byte limit
    ([b"x" * 600, b"y" * 600], Dropped(2, 1200)),           # parts under it, total over it
    ([b"x" * 100] * 500, Dropped(500, 50_000)),
])
async def test_a_message_is_kept_only_within_parts_and_bytes(pair, parts, expected):
    tx, rx = pair
    tx.send_multipart(parts)
    tx.send(b"next")
    assert await receive(rx) == expected
    assert await receive(rx) == [b"next"]                   # the rest of a dropped one was read out


async def test_a_message_of_many_parts_lets_the_event_loop_run(pair):
    tx, rx = pair
    n = 5 * YIELD_EVERY_PARTS
    tx.send_multipart([b"x"] * n)
    turns = 0

    async def count() -> None:
        nonlocal turns
        while True:
            turns += 1
            await asyncio.sleep(0)

    task = asyncio.create_task(count())
    await asyncio.sleep(0)
    before = turns
    assert await receive(rx) == Dropped(n, n)
    task.cancel()
    assert turns - before >= 4


def test_the_policy_names_the_reason_and_drops_peers_at_most_once_per_interval():
    policy = DropPolicy(1000)
    rejected, evict = policy.judge("action", Dropped(3, 30), 0.0)
    assert (rejected.reason, evict) == ("framing", False) and "3 parts" in rejected.detail
    rejected, evict = policy.judge("action", Dropped(2, 1500), 0.0)
    assert (rejected.reason, evict) == ("oversize", False)  # over the limit, not over twice it
    assert "2 part(s), 1500 bytes; the limit is 1000" in rejected.detail
    assert policy.judge("action", Dropped(1, 2000), 0.0)[1] is False   # a frame libzmq lets through
    assert policy.judge("action", Dropped(40, 2001), 0.0)[1] is True
    assert policy.judge("action", Dropped(40, 2001), EVICT_INTERVAL_S / 2)[1] is False
    assert policy.judge("command", Dropped(40, 2001), EVICT_INTERVAL_S / 2)[1] is True  # per socket
    assert policy.judge("action", Dropped(40, 2001), EVICT_INTERVAL_S)[1] is True
    assert policy.evictions == {"action": 2, "command": 1}



def test_many_tiny_parts_cost_libzmq_their_message_structures_too():
    policy = DropPolicy(64 << 10)                   # peers dropped above 128 KiB of cost
    rejected, evict = policy.judge("action", Dropped(100, 100), 0.0)         # 6.5 kB: a framing drop only
    assert (rejected.reason, evict) == ("framing", False)
    rejected, evict = policy.judge("action", Dropped(3000, 3000), 0.0)       # 3 kB of bytes, 195 kB of parts
    assert (rejected.reason, evict) == ("framing", True)


async def test_rebind_drops_the_peers_of_a_bound_socket_and_they_come_back():
    ctx = zmq.asyncio.Context()
    try:
        sub = ctx.socket(zmq.SUB)
        sub.setsockopt(zmq.SUBSCRIBE, b"")
        sub.bind("tcp://127.0.0.1:*")
        address = sub.getsockopt(zmq.LAST_ENDPOINT).decode()
        received = asyncio.ensure_future(sub.recv())   # a waiting reader lets the SUB work its mailbox
        pub = ctx.socket(zmq.XPUB)
        pub.setsockopt(zmq.XPUB_VERBOSE, 1)
        monitor = pub.get_monitor_socket()
        pub.connect(address)
        assert await asyncio.wait_for(pub.recv(), 5) == b"\x01"
        received.cancel()            # as the adapter does: rebind between reads, then read again
        rebind_now(sub, "bind", address)
        received = asyncio.ensure_future(sub.recv())
        events = []
        while zmq.EVENT_DISCONNECTED not in events:                # the peer's connection ended
            events.append(parse_monitor_message(await asyncio.wait_for(monitor.recv_multipart(), 5))["event"])
        while await asyncio.wait_for(pub.recv(), 5) != b"\x01":    # it reconnected and subscribed again
            pass
        await pub.send(b"after")
        assert await asyncio.wait_for(received, 5) == b"after"
        assert sub.getsockopt(zmq.LAST_ENDPOINT).decode() == address
    finally:
        ctx.destroy(linger=0)
