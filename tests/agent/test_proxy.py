"""The loopback proxy the link tests rely on: pass, black-hole (held, then delivered), throttle at the
rate asked (also after a live change of the rate)."""

from __future__ import annotations

import asyncio
import time

from agent.testing.proxy import TcpProxy, window
from agent.testing.running_agent import wait_for


async def echo_server():
    async def serve(reader, writer):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
        writer.close()
    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


async def test_passes_then_holds_while_blackholed_then_delivers():
    server, port = await echo_server()
    async with TcpProxy("127.0.0.1", port) as proxy:
        reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
        writer.write(b"ping")
        assert await asyncio.wait_for(reader.readexactly(4), 5) == b"ping"
        proxy.blackhole = True
        writer.write(b"lost?")
        await writer.drain()
        try:
            got = await asyncio.wait_for(reader.read(100), 0.3)
        except asyncio.TimeoutError:
            got = None
        assert got is None  # nothing delivered while the path is dead
        proxy.blackhole = False
        assert await asyncio.wait_for(reader.readexactly(5), 5) == b"lost?"
        writer.close()
    server.close()


async def test_throttle_paces_bytes():
    server, port = await echo_server()
    async with TcpProxy("127.0.0.1", port, rate_bps=100_000) as proxy:
        reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
        payload = b"x" * 50_000
        t0 = time.monotonic()
        writer.write(payload)
        await asyncio.wait_for(reader.readexactly(len(payload)), 10)
        elapsed = time.monotonic() - t0
        writer.close()
    server.close()
    assert elapsed > 0.4  # 50 kB at 100 kB/s each way: at least 0.5 s less a chunk's worth


async def sink_server():
    """A server that reads and discards everything."""
    async def serve(reader, writer):
        while await reader.read(65536):
            pass
        writer.close()
    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


async def carried_rate(proxy: TcpProxy, writer: asyncio.StreamWriter, nbytes: int) -> float:
    """Bytes/s the proxy forwards upstream while ``writer`` keeps it busy, over ``nbytes`` forwarded
    (after a window's warm-up)."""
    async def feed():
        while True:
            writer.write(b"x" * 65536)
            await writer.drain()

    feeder = asyncio.create_task(feed())
    try:
        mark = proxy.carried["up"] + window(proxy.rate_bps)
        assert await wait_for(lambda: proxy.carried["up"] >= mark, 10)
        start, t0 = proxy.carried["up"], time.monotonic()
        assert await wait_for(lambda: proxy.carried["up"] >= start + nbytes, 20)
        return (proxy.carried["up"] - start) / (time.monotonic() - t0)
    finally:
        feeder.cancel()
        await asyncio.gather(feeder, return_exceptions=True)


async def test_throttle_carries_the_rate_asked_also_after_a_live_change():
    """1 Mbit/s asked -> 60-130 % of it carried (a window of 4 KiB carried ~40 kB/s in the Sim2Bot
    benchmark); the rate changed on the live connection (300 kbit/s -> 1 Mbit/s) is carried too, and a
    lifted limit leaves the connection unpaced."""
    server, port = await sink_server()
    async with TcpProxy("127.0.0.1", port, rate_bps=125_000, shared=True) as proxy:
        _, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
        rate = await carried_rate(proxy, writer, 125_000)        # ~1 s of the asked rate
        assert 0.6 * 125_000 <= rate <= 1.3 * 125_000, rate
        writer.close()
    async with TcpProxy("127.0.0.1", port, rate_bps=37_500, shared=True) as proxy:
        _, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
        rate = await carried_rate(proxy, writer, 18_750)         # ~0.5 s at 300 kbit/s
        assert 0.6 * 37_500 <= rate <= 1.3 * 37_500, rate
        proxy.rate_bps = 125_000                                 # the same connection, a faster path
        rate = await carried_rate(proxy, writer, 125_000)
        assert 0.6 * 125_000 <= rate <= 1.3 * 125_000, rate
        proxy.rate_bps = None                                    # the path recovers: no limit
        rate = await carried_rate(proxy, writer, 2_000_000)
        assert rate > 4 * 125_000, rate
        writer.close()
    server.close()
