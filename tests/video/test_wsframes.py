"""FragmentWriter: big binary messages as masked fragments on a real ``websockets`` connection."""

from __future__ import annotations

import asyncio
import os

import numpy as np
import pytest
from websockets.asyncio.client import connect
from websockets.asyncio.server import serve
from websockets.utils import apply_mask

from agent.video.links import shrink_send_buffer
from agent.video.wsframes import FragmentWriter, mask_bytes, mask_into


@pytest.mark.parametrize("length", [0, 1, 3, 4, 5, 7, 8, 1001, 65_537])
def test_mask_into_matches_the_reference_masking(length):
    data, mask = os.urandom(length), os.urandom(4)
    out = np.empty(max(1, length), np.uint8)
    assert bytes(mask_into(memoryview(data), mask, out)) == apply_mask(data, mask)


class Server:
    """A real websockets server recording every message; ``read_delay_s`` before each receive."""

    def __init__(self, read_delay_s: float = 0.0) -> None:
        self.messages: list[bytes] = []
        self.read_delay_s = read_delay_s

    async def handler(self, ws) -> None:
        while True:
            await asyncio.sleep(self.read_delay_s)
            try:
                self.messages.append(await ws.recv())
            except Exception:  # noqa: BLE001 - the client closed: the test reads what arrived
                return


async def on_server(server: Server):
    srv = await serve(server.handler, "127.0.0.1", 0, max_size=None, compression=None)
    port = srv.sockets[0].getsockname()[1]
    return srv, connect(f"ws://127.0.0.1:{port}", max_size=None, compression=None)


async def wait_messages(server: Server, count: int, timeout_s: float = 10.0) -> None:
    async with asyncio.timeout(timeout_s):
        while len(server.messages) < count:
            await asyncio.sleep(0.01)


async def test_a_message_in_parts_arrives_whole_with_pings_between_its_fragments():
    server = Server()
    srv, client = await on_server(server)
    async with srv, client as conn:
        shrink_send_buffer(conn.transport)   # 32 KB: each 64 KB fragment waits in the transport, the writer yields
        writer = FragmentWriter(conn, fragment_bytes=64 * 1024)
        head, body = os.urandom(29), os.urandom(3_000_001)
        send = asyncio.create_task(writer.send([head, memoryview(body)]))
        pongs = []
        while not send.done():               # the library's pings go out between our fragments
            pongs.append(await conn.ping())
            await asyncio.sleep(0.005)
        nbytes, cpu_s = await send
        await asyncio.wait_for(asyncio.gather(*pongs), 5)
        await wait_messages(server, 1)
    assert server.messages == [head + body]
    assert nbytes > len(head) + len(body) and cpu_s > 0 and len(pongs) >= 3


async def test_a_cancelled_caller_never_cuts_a_message_in_half():
    server = Server(read_delay_s=0.05)
    srv, client = await on_server(server)
    async with srv, client as conn:
        shrink_send_buffer(conn.transport)
        writer = FragmentWriter(conn, fragment_bytes=64 * 1024)
        big = os.urandom(3_000_000)          # 46 fragments through a 32 KB send buffer
        first = asyncio.create_task(writer.send([big]))
        await asyncio.sleep(0.001)
        first.cancel()                       # the caller goes mid-message; the message is finished regardless
        assert (await writer.send([b"next"]))[0] > 0
        await wait_messages(server, 2)
        assert first.cancelled()
    assert server.messages == [big, b"next"]


async def test_nothing_is_written_on_a_closed_connection():
    server = Server()
    srv, client = await on_server(server)
    async with srv, client as conn:
        writer = FragmentWriter(conn)
        await conn.close()
        assert not writer.open()
        assert await writer.send([b"late"]) == (0, 0.0)
    assert server.messages == []


@pytest.mark.parametrize("length", [0, 1, 3, 4, 5, 29, 512])
def test_mask_bytes_matches_the_reference_masking(length):
    data, mask = os.urandom(length), os.urandom(4)
    assert mask_bytes(memoryview(data), mask) == apply_mask(data, mask)


async def test_a_message_the_transport_takes_at_once_is_written_in_the_callers_step():
    server = Server()
    srv, client = await on_server(server)
    async with srv, client as conn:
        writer = FragmentWriter(conn, fragment_bytes=16 * 1024)
        head, body = os.urandom(29), os.urandom(20_001)     # a frame prefix and a 2-fragment JPEG
        step = writer.send([head, memoryview(body)])
        with pytest.raises(StopIteration) as done:          # finished without waiting on the event loop
            step.send(None)
        nbytes, cpu_s = done.value.value
        await wait_messages(server, 1)
    assert server.messages == [head + body]
    assert nbytes == (2 + 4 + len(head)) + (4 + 4 + 16 * 1024) + (4 + 4 + 20_001 - 16 * 1024) and cpu_s >= 0  # headers: 2|4 + key


async def test_a_message_sent_while_another_is_waiting_for_the_transport_comes_after_it():
    server = Server(read_delay_s=0.02)
    srv, client = await on_server(server)
    async with srv, client as conn:
        shrink_send_buffer(conn.transport)
        writer = FragmentWriter(conn, fragment_bytes=64 * 1024)
        big, small = os.urandom(2_000_000), os.urandom(40)
        first = asyncio.create_task(writer.send([big]))
        await asyncio.sleep(0)               # its first fragments are written, the rest waits in a task
        second = asyncio.create_task(writer.send([small]))
        assert (await first)[0] > len(big) and (await second)[0] == len(small) + 6
        await wait_messages(server, 2)
    assert server.messages == [big, small]


async def test_a_short_fragment_goes_out_in_one_write_with_the_fragment_after_it():
    server = Server()
    srv, client = await on_server(server)
    async with srv, client as conn:
        writer = FragmentWriter(conn)
        writes: list[int] = []
        real_write = conn.transport.write

        def counted(data) -> None:         # the real transport's write, counted
            writes.append(len(data))
            real_write(data)

        conn.transport.write = counted
        head, body, tail = os.urandom(29), os.urandom(20_001), os.urandom(3)
        assert (await writer.send([head, body]))[0] == 6 + 29 + 8 + 20_001
        assert (await writer.send([head, tail]))[0] == 6 + 29 + 6 + 3         # two short ones: one write too
        await wait_messages(server, 2)
    assert server.messages == [head + body, head + tail]
    assert writes[:2] == [6 + 29 + 8 + 20_001, 6 + 29 + 6 + 3]    # then the library's close frame
