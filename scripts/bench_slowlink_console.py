#!/usr/bin/env python3
"""The web console (and ARTEX) on a slow path: drops, commands delivered, STOP latency, frame age (prints only).

The simulated tank's agent (in this process; a 640x480 test-pattern camera at 20 fps, the
console's defaults: JPEG q70, at most 15 frames/s) serves its console through one
:class:`agent.testing.proxy.TcpProxy` on its own thread (``shared=True``: one path's rate per
direction, as on a weak Wi-Fi). A client speaks the console's protocol (``/ws``) through it as
the page does: it answers each frame with ``{"type": "frame"}`` at once, holds a drive
(``{"type": "drive", "press": true}`` then one every 100 ms) and every 2 s sends ``stop``
during the video, then presses again.

Per rate (default 1 Mbit/s and 300 kbit/s), for ``--seconds`` s on the slow path:

- control drops: the tab's WebSocket closed (and was opened again by the client);
- drives lost: drives sent less those the agent read (executed + refused);
- STOP: ``stop`` sent -> zero duty written to the motor emulator (p50/max), and -> the page's
  ``state`` showing zero duty (the operator sees it), p50/max;
- frame age at the client (receipt - capture, Unix clock of this process) p50/p99/max and
  frames per second; the capture time is the frame's stamp (a JPEG comment, agent.console.video)
  or, for an agent that does not stamp its frames, the hub's encode of the same bytes;
- state age (receipt - the snapshot time ``t`` of a ``state`` message) p50/p99;
- then the limit is lifted: seconds until the end of the first one-second window with
  90 % of the full frame rate (``recovered``; 1.0 s at best), within 15 s. The full rate is the
  one this agent delivered to a tab connected without the proxy for 3 s before (at most 15/s; on a
  loaded machine less). Lifting the proxy's rate also widens its open connections' receive
  buffers (:attr:`agent.testing.proxy.TcpProxy.rate_bps`). Beside it, for an agent that follows the link, the seconds until
  it sends the asked format (ladder level 0) at the full rate of the learned link rate again.

ARTEX on the same kind of path (``--protocols artex``; :func:`artex_rate`): the agent's one Socket.IO
connection (commands up, telemetry and video down) through the proxy to an in-process
:class:`agent.testing.artex_hub.ArtexHub` that drives, stops every 2 s and records frames: control
drops (reconnects), commands lost, stop -> zero duty, frame age at the hub (its capture time from
the hub's encode of the same bytes), recovery.

The one-minute load average is printed beside each figure.
Usage: ``scripts/bench_slowlink_console.py [--seconds 15] [--rates 125000,37500] [--protocols console,artex]``
(~25 s per rate and protocol).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import logging
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import aiohttp  # noqa: E402

from agent.testing.ports import free_port  # noqa: E402
from agent.testing.running_agent import running_agent, sim_config, wait_for  # noqa: E402
from bench_slowlink import ProxyThread, pct  # noqa: E402

FPS = 20
#: Seconds of the unthrottled path before the slow one: the frame rate measured there is "full rate".
BASELINE_S = 3.0
DRIVE = {"type": "drive", "vx": 0.3, "omega": 0.0}


def stamp_of(data: bytes) -> float | None:
    """The capture time a stamped console frame carries (agent.console.video), else None."""
    try:
        from agent.console.video import capture_stamp
    except ImportError:             # an agent before the stamp
        return None
    stamp = capture_stamp(data)
    return None if stamp is None else float(stamp["t"])


class Client:
    """The console page's protocol, through the proxy: frames acknowledged at once, ages recorded."""

    def __init__(self, url: str, encodes: dict[bytes, float]) -> None:
        self.url, self.encodes = url, encodes
        self.frames: list[tuple[float, float]] = []     # (receipt, capture), Unix s
        self.states: list[tuple[float, float, float]] = []   # (receipt, snapshot t, |duty|)
        self.opened = 0
        self.ws: aiohttp.ClientWebSocketResponse | None = None
        self.unknown = 0
        self.received: list[tuple[float, int, bool]] = []     # (receipt Unix s, bytes, binary)

    async def run(self, http: aiohttp.ClientSession) -> None:
        while True:
            try:
                async with http.ws_connect(self.url, heartbeat=None, max_msg_size=0) as ws:
                    self.ws = ws
                    self.opened += 1
                    async for msg in ws:
                        now = time.time()
                        if msg.type in (aiohttp.WSMsgType.BINARY, aiohttp.WSMsgType.TEXT):
                            self.received.append((now, len(msg.data), msg.type == aiohttp.WSMsgType.BINARY))
                        if msg.type == aiohttp.WSMsgType.BINARY:
                            await ws.send_json({"type": "frame"})
                            t = stamp_of(msg.data)
                            if t is None:
                                t = self.encodes.get(hashlib.blake2b(msg.data, digest_size=16).digest())
                            if t is None:
                                self.unknown += 1
                            else:
                                self.frames.append((now, t))
                        elif msg.type == aiohttp.WSMsgType.TEXT:
                            m = json.loads(msg.data)
                            if m["type"] == "state":
                                tr = m["tracks"]
                                self.states.append((now, m["t"], abs(tr["duty_left"] or 0) + abs(tr["duty_right"] or 0)))
            except (aiohttp.ClientError, OSError):
                pass
            self.ws = None
            await asyncio.sleep(0.5)

    async def send(self, msg: dict) -> bool:
        ws = self.ws
        if ws is None or ws.closed:
            return False
        await ws.send_json(msg)
        return True


def spy_encodes(hub, encodes: dict[bytes, float]) -> None:
    """Remember the capture time of every encode by its bytes (for an agent that does not stamp frames)."""
    original = hub.encoded

    async def encoded(frame, fmt):
        out = await original(frame, fmt)
        if out is not None:
            encodes[hashlib.blake2b(bytes(out.data), digest_size=16).digest()] = out.t_unix_s
        return out

    hub.encoded = encoded


async def one_rate(rate_bps: float, seconds: float) -> dict:
    port = free_port()
    params = sim_config(console={"enabled": True, "port": port})
    params["drivers"]["cameras"][0].update({"fps": FPS, "width": 640, "height": 480})
    proxy = ProxyThread(port, rate_bps)
    encodes: dict[bytes, float] = {}
    try:
        async with running_agent(params) as agent, aiohttp.ClientSession() as http:
            console = agent.adapters["console"]
            await asyncio.wait_for(console.ready.wait(), 10)
            spy_encodes(agent.video, encodes)
            emu = agent.sim.motor_emulator
            # full rate: what this agent delivers to a tab on loopback (no proxy) under the same load
            direct = Client(f"http://127.0.0.1:{port}/ws", encodes)
            task = asyncio.create_task(direct.run(http))
            await wait_for(lambda: direct.frames, 20)
            await asyncio.sleep(1.0)
            t_base = time.time()
            await asyncio.sleep(BASELINE_S)
            full_fps = len([f for f in direct.frames if f[0] >= t_base]) / (time.time() - t_base)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            await wait_for(lambda: not console.sessions, 5)
            client = Client(f"http://127.0.0.1:{proxy.proxy.port}/ws", encodes)
            reader = asyncio.create_task(client.run(http))
            await wait_for(lambda: client.frames, 20)
            sessions0 = console.counters["sessions"]
            c0 = console.counters["executed"] + console.counters["refused"]
            sent, stops, seen_stops = 0, [], []
            t0 = time.time()
            end = time.monotonic() + seconds
            press = True
            next_stop = time.monotonic() + 2.0
            while time.monotonic() < end:
                if await client.send({**DRIVE, "press": press}):
                    sent += 1
                    press = False
                if time.monotonic() >= next_stop and emu.motor_duty[0] > 0.05:
                    t_stop, t_unix = time.monotonic(), time.time()
                    if await client.send({"type": "stop"}):
                        sent += 1
                        if await wait_for(lambda: emu.motor_duty == [0.0, 0.0], 5.0, 0.002):
                            stops.append(time.monotonic() - t_stop)
                        n = len(client.states)
                        if await wait_for(lambda: any(s[1] >= t_unix and s[2] == 0.0 for s in client.states[n:]), 5.0, 0.005):
                            first = next(s for s in client.states[n:] if s[1] >= t_unix and s[2] == 0.0)
                            seen_stops.append(first[0] - t_unix)
                    press = True
                    next_stop = time.monotonic() + 2.0
                await asyncio.sleep(0.1)
            await asyncio.sleep(1.0)            # the last drives' way through the slow path
            delivered = console.counters["executed"] + console.counters["refused"] - c0
            t_slow_end = time.time()
            slow = [f for f in client.frames if f[0] >= t0]
            states = [s for s in client.states if t0 <= s[0] <= t_slow_end]
            load = os.getloadavg()[0]
            drops = console.counters["sessions"] - sessions0
            stats = console.status().detail.get("video")
            proxy.set_rate(None)

            def full_again() -> bool:      # the agent sends the asked format at the full rate again
                videos = [tab.video for tab in console.sessions if getattr(tab, "video", None) is not None]
                return bool(videos) and all(v.pacer.level == 0 and v.rate.spacing_s(v.pacer.last_bytes) <= v.period_s
                                            for v in videos)

            t_rec, recovered, agent_full = time.time(), None, None
            while time.time() - t_rec < 15 and (recovered is None or agent_full is None):
                await asyncio.sleep(0.05)
                now = time.time()
                window = [f for f in client.frames if now - 1.0 <= f[0] <= now]
                if recovered is None and now - t_rec >= 1.0 and len(window) >= 0.9 * full_fps:
                    recovered = now - t_rec
                if agent_full is None and full_again():
                    agent_full = now - t_rec
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader
            ages = [r - c for r, c in slow]
            span = max(1e-9, t_slow_end - t0)
            got = [(n, b) for t, n, b in client.received if t0 <= t <= t_slow_end]
            video_Bps = sum(n for n, b in got if b) / span
            text_Bps = sum(n for n, b in got if not b) / span
            sages = [r - t for r, t, _ in states]
            return {"rate": rate_bps, "drops": drops, "sent": sent, "lost": sent - delivered,
                    "frames": len(slow), "fps": len(slow) / max(1e-9, t_slow_end - t0),
                    "p50": pct(ages, 50), "p99": pct(ages, 99), "max": max(ages) if ages else float("nan"),
                    "s50": pct(sages, 50), "s99": pct(sages, 99),
                    "stop50": pct(stops, 50), "stopmax": max(stops) if stops else float("nan"), "stops": len(stops),
                    "seen50": pct(seen_stops, 50), "seenmax": max(seen_stops) if seen_stops else float("nan"),
                    "recovered": recovered, "load": load, "stats": stats, "unknown": client.unknown,
                    "video_Bps": video_Bps, "text_Bps": text_Bps,
                    "full_fps": full_fps, "agent_full": agent_full}
    finally:
        proxy.close()


async def artex_rate(rate_bps: float, seconds: float) -> dict:
    """ARTEX through the same kind of path: the agent's one Socket.IO connection (control and video) via
    the proxy to an in-process hub, which drives (``{"com": "forward"}`` every 100 ms), stops every 2 s
    and records frames; a frame's capture time is the hub's encode of the same bytes (ARTEX frames
    carry none)."""
    from agent.testing.artex_hub import ArtexHub, artex_params

    encodes: dict[bytes, float] = {}
    frames: list[tuple[float, float]] = []
    async with ArtexHub(ready_delay_s=0.05) as hub:
        proxy = ProxyThread(hub.port, rate_bps)
        try:
            params = artex_params(hub, max_send_freq=1 / FPS)
            params["port"] = proxy.proxy.port
            params["drivers"]["cameras"][0].update({"fps": FPS, "width": 640, "height": 480})
            unknown = [0]

            def on_event(kind: str, sid: str, data) -> None:
                if kind != "video":
                    return
                now = time.time()
                for frame in (hub.last_video or {}).values():
                    if isinstance(frame, (bytes, bytearray)):
                        t = encodes.get(hashlib.blake2b(bytes(frame), digest_size=16).digest())
                        if t is None:
                            unknown[0] += 1
                        else:
                            frames.append((now, t))

            hub.on_event = on_event
            async with running_agent(params) as agent:
                spy_encodes(agent.video, encodes)
                adapter, emu = agent.adapters["artex"], agent.sim.motor_emulator
                await wait_for(lambda: frames, 30)
                proxy.set_rate(None)
                await asyncio.sleep(1.0)
                t_base = time.time()
                await asyncio.sleep(BASELINE_S)
                full_fps = len([f for f in frames if f[0] >= t_base]) / (time.time() - t_base)
                proxy.set_rate(rate_bps)
                connects0, received0 = adapter.counters["connects"], adapter.counters["received"]
                sent, stops = 0, []
                t0 = time.time()
                end = time.monotonic() + seconds
                next_stop = time.monotonic() + 2.0
                while time.monotonic() < end:
                    with contextlib.suppress(ConnectionError, KeyError, ValueError):
                        await hub.command({"com": "forward"})
                        sent += 1
                    if time.monotonic() >= next_stop and emu.motor_duty[0] > 0.05:
                        t_stop = time.monotonic()
                        with contextlib.suppress(ConnectionError, KeyError, ValueError):
                            await hub.command({"com": "stop"})
                            sent += 1
                            if await wait_for(lambda: emu.motor_duty == [0.0, 0.0], 5.0, 0.002):
                                stops.append(time.monotonic() - t_stop)
                        next_stop = time.monotonic() + 2.0
                    await asyncio.sleep(0.1)
                await asyncio.sleep(1.0)
                t_slow_end = time.time()
                received = adapter.counters["received"] - received0
                drops = adapter.counters["connects"] - connects0
                load = os.getloadavg()[0]
                slow = [f for f in frames if t0 <= f[0] <= t_slow_end]
                stats = adapter.status().detail.get("video")
                proxy.set_rate(None)
                t_rec, recovered = time.time(), None
                while time.time() - t_rec < 15:
                    await asyncio.sleep(0.25)
                    now = time.time()
                    if now - t_rec >= 1.0 and len([f for f in frames if now - 1.0 <= f[0] <= now]) >= 0.9 * full_fps:
                        recovered = now - t_rec
                        break
                ages = [r - c for r, c in slow]
                return {"rate": rate_bps, "drops": drops, "sent": sent, "lost": sent - received,
                        "frames": len(slow), "fps": len(slow) / max(1e-9, t_slow_end - t0),
                        "p50": pct(ages, 50), "p99": pct(ages, 99), "max": max(ages) if ages else float("nan"),
                        "stop50": pct(stops, 50), "stopmax": max(stops) if stops else float("nan"),
                        "stops": len(stops), "recovered": recovered, "load": load, "full_fps": full_fps,
                        "stats": stats, "unknown": unknown[0]}
        finally:
            proxy.close()


async def main(args: argparse.Namespace) -> None:
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    protocols = args.protocols.split(",")
    for rate in (float(r) for r in args.rates.split(",")):
        if "artex" in protocols:
            r = await artex_rate(rate, args.seconds)
            rec = "not within 15 s" if r["recovered"] is None else f"{r['recovered']:.1f} s"
            print(f"ARTEX, path {r['rate'] * 8 / 1000:.0f} kbit/s, {args.seconds:.0f} s: control drops {r['drops']}, "
                  f"commands lost {r['lost']} of {r['sent']}, stop -> zero duty p50 {r['stop50'] * 1000:.0f} ms "
                  f"max {r['stopmax'] * 1000:.0f} ms ({r['stops']} stops); frames {r['frames']} ({r['fps']:.1f}/s), "
                  f"frame age p50 {r['p50']:.2f} s p99 {r['p99']:.2f} s max {r['max']:.2f} s; full rate "
                  f"({r['full_fps']:.1f}/s) again {rec} after the path recovered   load {r['load']:.2f}", flush=True)
            if args.verbose:
                print(f"   agent's view: {r['stats']}; frames without a known capture time {r['unknown']}")
        if "console" not in protocols:
            continue
        r = await one_rate(rate, args.seconds)
        rec = "not within 15 s" if r["recovered"] is None else f"{r['recovered']:.1f} s"
        rec += (" (the agent: asked format at full rate again " +
                ("n/a" if r["agent_full"] is None else f"{r['agent_full']:.1f} s") + ")")
        print(f"console, path {r['rate'] * 8 / 1000:.0f} kbit/s, {args.seconds:.0f} s: control drops {r['drops']}, "
              f"commands lost {r['lost']} of {r['sent']}, STOP -> zero duty p50 {r['stop50'] * 1000:.0f} ms "
              f"max {r['stopmax'] * 1000:.0f} ms ({r['stops']} stops), -> page shows zero p50 {r['seen50']:.2f} s "
              f"max {r['seenmax']:.2f} s; frames {r['frames']} ({r['fps']:.1f}/s), frame age p50 {r['p50']:.2f} s "
              f"p99 {r['p99']:.2f} s max {r['max']:.2f} s; state age p50 {r['s50']:.2f} s p99 {r['s99']:.2f} s; "
              f"full rate ({r['full_fps']:.1f}/s) again {rec} after the path recovered   load {r['load']:.2f}", flush=True)
        if args.verbose:
            print(f"   received video {r['video_Bps'] / 1000:.1f} kB/s, text {r['text_Bps'] / 1000:.1f} kB/s;"
                  f" agent's view: {r['stats']}; frames without a known capture time {r['unknown']}")


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seconds", type=float, default=15.0, help="seconds on the slow path per rate (default 15)")
    p.add_argument("--rates", default="125000,37500", help="path rates, bytes/s (default 1 Mbit/s, 300 kbit/s)")
    p.add_argument("--protocols", default="console,artex", help="console, artex or both (default both)")
    p.add_argument("--log-level", default="ERROR")
    p.add_argument("-v", "--verbose", action="store_true")
    asyncio.run(main(p.parse_args()))
