#!/usr/bin/env python3
"""ARTEX and Sim2Bot link figures on loopback with the default liveness settings (prints, asserts nothing).

1. dead-link detection: the path to a real hub / real ``sim2bot bridge`` is black-holed
   (agent.testing.proxy.TcpProxy: sockets open, nothing delivered) while the link's source drives;
   seconds until the adapter declares the link down and until the emulated motor has zero duty,
   then until the link is up again after the path returns. Defaults: ARTEX
   ``artex.ping_interval_s`` 4 s (bound 6 s); Sim2Bot ``ping_interval_s`` 2 s + ``ping_timeout_s``
   3 s + 0.5 s close (bound 5.5 s).
2. stop latency: the hub emits ``{"com": "stop"}`` while ARTEX drives; ms until the motor emulator
   has zero duty, over a plain loopback link, after a broken binary packet (``51-/robot,[...]``),
   and over a 1 Mbit/s link (``rate_bps=125_000``) with video streaming; and the stop sent as raw
   packets with a key given twice (``{"com":"stop","com":"forward"}``), as a text event and as a
   binary event with one attachment (docs/artex.md, ``repeated_key``).
3. SIGTERM to exit of ``python -m agent run`` with ARTEX connected and with a hung Sim2Bot bridge.

Usage: ``.venv/bin/python scripts/bench_links.py [--rounds N] [--stops-only]`` (``--stops-only``: the
plain and repeated-key stops, ~5 s a round each). The machine is shared: figures move
with the load of other processes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

from agent.commands import BaseVelocity
from agent.testing.artex_hub import ArtexHub, artex_params, driving
from agent.testing.proxy import TcpProxy
from agent.testing.running_agent import ROOT, running_agent, sim_config, wait_for
from agent.testing.sim2bot_bridge import Bridge, HungBridge, agent_params

LONG = {"control": {"sources": {"artex": {"priority": 10, "timeout_s": 5.0},
                                "sim2bot": {"priority": 20, "timeout_s": 5.0}}}}


def ms(values: list[float]) -> str:
    return f"median {statistics.median(values) * 1e3:.1f} ms, max {max(values) * 1e3:.1f} ms (n={len(values)})"


async def outage(proxy: TcpProxy, agent, connected, back) -> tuple[float, float, float]:
    """Black-hole the path: (s to declared dead, s to zero duty, s from the path's return to ``back()``)."""
    proxy.blackhole, t0 = True, time.monotonic()
    await wait_for(lambda: not connected(), 30, 0.005)
    dead = time.monotonic() - t0
    await wait_for(lambda: agent.physics.duty == [0.0, 0.0], 5, 0.005)
    stopped = time.monotonic() - t0
    await asyncio.sleep(0.5)
    proxy.blackhole, t1 = False, time.monotonic()
    await wait_for(back, 30, 0.005)
    return dead, stopped, time.monotonic() - t1


async def artex_blackhole() -> tuple[float, float, float]:
    async with ArtexHub(ready_delay_s=0.05) as hub, TcpProxy("127.0.0.1", hub.port) as proxy:
        params = artex_params(hub, **LONG)
        params["port"] = proxy.port
        async with running_agent(params) as agent:
            adapter = agent.adapters["artex"]
            await wait_for(lambda: hub.heartbeats, 15)
            n = len(hub.heartbeats)
            async with driving(hub, {"com": "forward"}):
                await wait_for(lambda: agent.physics.duty[0] > 0.0, 5)
                return await outage(proxy, agent, lambda: adapter.status()["connected"],
                                    lambda: len(hub.heartbeats) > n)


async def sim2bot_blackhole() -> tuple[float, float, float]:
    with Bridge() as bridge:
        async with TcpProxy("127.0.0.1", bridge.port) as proxy:
            params = agent_params(bridge, url=f"ws://127.0.0.1:{proxy.port}/ws")
            params["control"] = LONG["control"]
            async with running_agent(params) as agent:
                adapter = agent.adapters["sim2bot"]
                await wait_for(lambda: adapter.status()["connected"], 15)
                agent.control.submit("sim2bot", BaseVelocity(0.4, 0.0))
                await wait_for(lambda: agent.physics.duty[0] > 0.0, 5)
                up = lambda: adapter.status()["connected"]  # noqa: E731
                return await outage(proxy, agent, up, up)


#: a stop with a key given twice, as raw packets: a text event, and a binary event then its attachment
TEXT_STOP = ('2/robot,["command",{"author":"x","payload":{"com":"stop","com":"forward"}}]',)
BINARY_STOP = ('51-/robot,["command",{"author":"x","payload":{"com":"stop","com":"forward"},'
               '"blob":{"_placeholder":true,"num":0}}]', b"\x00\x01")


async def stop_latency(rounds: int, rate_bps: float | None, junk: str | None,
                       raw_stop: tuple[str | bytes, ...] = ()) -> list[float]:
    async with ArtexHub(ready_delay_s=0.05) as hub, TcpProxy("127.0.0.1", hub.port, rate_bps=rate_bps) as proxy:
        params = artex_params(hub, max_send_freq=0.05, **LONG)
        params["port"] = proxy.port
        async with running_agent(params) as agent:
            await wait_for(lambda: hub.heartbeats, 15)
            await asyncio.sleep(2.0)
            took = []
            for _ in range(rounds):
                async with driving(hub, {"com": "forward"}):
                    await wait_for(lambda: agent.physics.duty[0] > 0.0, 5, 0.005)
                if junk is not None:
                    await hub.send_packet(junk)
                t0 = time.perf_counter()
                for packet in raw_stop:
                    await hub.send_packet(packet)
                if not raw_stop:
                    await hub.command({"com": "stop"})
                await wait_for(lambda: agent.physics.duty == [0.0, 0.0], 5, 0.001)
                took.append(time.perf_counter() - t0)
                await asyncio.sleep(agent.cfg.source_timeout_s("artex") + 0.1)  # every round from rest
            return took


async def sigterm_s(cfg: dict, ready) -> float:
    cfg["drivers"]["cameras"] = []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "params.json"
        path.write_text(json.dumps(cfg))
        proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "agent", "run", "--config", str(path),
                                                    cwd=ROOT, env=dict(os.environ), stderr=asyncio.subprocess.DEVNULL)
        await wait_for(ready, 30)
        await asyncio.sleep(0.5)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        await proc.wait()
        return time.monotonic() - t0


async def shutdowns() -> tuple[float, float]:
    async with ArtexHub() as hub:
        artex = await sigterm_s(sim_config(server="http://127.0.0.1", port=hub.port), lambda: hub.heartbeats)
    async with HungBridge() as bridge:
        hung = await sigterm_s(sim_config(sim2bot={"enabled": True, "url": bridge.url}),
                               lambda: bridge.connections >= 1)
    return artex, hung


async def stops(rounds: int) -> None:
    print(f"ARTEX stop, plain loopback: {ms(await stop_latency(rounds, None, None))}")
    print(f"ARTEX stop with a key given twice, text event: {ms(await stop_latency(rounds, None, None, TEXT_STOP))}")
    print(f"ARTEX stop with a key given twice, binary event: {ms(await stop_latency(rounds, None, None, BINARY_STOP))}")


async def main(rounds: int) -> None:
    dead, stopped, back = await artex_blackhole()
    print(f"ARTEX black-hole (ping_interval_s 4, bound 6 s): declared dead {dead:.2f} s, tank stopped "
          f"{stopped:.2f} s, Ready {back:.2f} s after the path returned")
    dead, stopped, back = await sim2bot_blackhole()
    print(f"Sim2Bot black-hole (ping 2 s + pong 3 s + close 0.5 s): declared dead {dead:.2f} s, tank stopped "
          f"{stopped:.2f} s, connected {back:.2f} s after the path returned")
    print(f"ARTEX stop, plain loopback: {ms(await stop_latency(rounds, None, None))}")
    junk = await stop_latency(rounds, None, '51-/robot,["command",{"payload":{"com":"forward"}}]')
    print(f"ARTEX stop after a broken binary packet: {ms(junk)}")
    print(f"ARTEX stop over 1 Mbit/s with video: {ms(await stop_latency(rounds, 125_000, None))}")
    artex, hung = await shutdowns()
    print(f"SIGTERM to exit: ARTEX connected {artex:.2f} s, hung Sim2Bot bridge {hung:.2f} s")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--stops-only", action="store_true", help="only the stop latencies (plain, repeated keys)")
    args = parser.parse_args()
    asyncio.run(stops(args.rounds) if args.stops_only else main(args.rounds))
