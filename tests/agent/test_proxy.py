"""The loopback proxy the link tests rely on: pass, black-hole (held, then delivered), throttle."""

from __future__ import annotations

import asyncio
import time

from agent.testing.proxy import TcpProxy


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
