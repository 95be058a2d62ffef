#!/usr/bin/env python3
"""Sim2Bot on a slow shared path: control drops, commands lost, frame age, recovery (prints, asserts nothing).

The simulated tank's agent (in this process, a 640x480 test-pattern camera at 20 fps) reaches
the real ``sim2bot bridge`` (subprocess) through one :class:`agent.testing.proxy.TcpProxy`
run on its own thread and event loop, shared by both of the agent's sockets (control and
``/video``: ``shared=True``, one path's rate per direction, as on a weak Wi-Fi). A
``sim2bot.Robot`` controller, connected to the bridge directly (it stands for another
machine), subscribes the camera at 20 fps (JPEG, the camera's size and quality) and sends a
``base_velocity`` every 100 ms while reading frames.

Per rate (default 1 Mbit/s and 300 kbit/s), for ``--seconds`` s on the slow path:

- control drops: times the agent's control socket to the bridge reconnected (``connects``);
  video socket reconnects beside it;
- commands lost: ``base_velocity`` sent by the controller less those the agent received;
- frame age at the controller (receipt time - capture time, both Unix clocks of this
  machine) p50/p99/max and frames per second;
- what the path carried from the agent to the bridge (video, telemetry) meanwhile, kB/s;
- then the path's limit is lifted: seconds until the end of the first one-second window that
  delivers 90 % of the asked rate (``recovered``; 1.0 s at best), within 15 s.

The one-minute load average is printed beside each figure.
Usage: ``scripts/bench_slowlink.py [--seconds 30] [--rates 125000,37500]`` (~50 s per rate).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import statistics
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agent.testing.proxy import TcpProxy  # noqa: E402
from agent.testing.running_agent import running_agent, wait_for  # noqa: E402
from agent.testing.sim2bot_bridge import Bridge, agent_params, controller  # noqa: E402

FPS = 20


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


class ProxyThread:
    """A TcpProxy on its own thread and event loop (the agent's loop does not pace it)."""

    def __init__(self, port: int, rate_bps: float) -> None:
        self.loop = asyncio.new_event_loop()
        self.proxy = TcpProxy("127.0.0.1", port, rate_bps=rate_bps, shared=True)
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, name="proxy", daemon=True)
        self.thread.start()
        self.ready.wait(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(self.proxy.start())
        self.ready.set()
        self.loop.run_forever()

    def set_rate(self, rate_bps: float | None) -> None:
        self.loop.call_soon_threadsafe(setattr, self.proxy, "rate_bps", rate_bps)

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self.proxy.close(), self.loop).result(5)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


class Reader:
    """Reads a CameraStream on a thread: (receipt Unix time, capture Unix time) per frame."""

    def __init__(self, stream) -> None:
        self.stream = stream
        self.frames: list[tuple[float, float]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="reader", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            frame = self.stream.read(0.2)
            if frame is not None:
                self.frames.append((time.time(), frame.capture_ts))

    def since(self, t_unix: float) -> list[tuple[float, float]]:
        return [f for f in self.frames if f[0] >= t_unix]


async def one_rate(bridge: Bridge, rate_bps: float, seconds: float) -> dict:
    proxy = ProxyThread(bridge.port, rate_bps)
    params = agent_params(bridge, url=f"ws://127.0.0.1:{proxy.proxy.port}/ws")
    params["drivers"]["cameras"][0].update({"fps": FPS, "width": 640, "height": 480})
    params["control"]["sources"]["sim2bot"]["timeout_s"] = 2.0
    try:
        async with running_agent(params) as agent, controller(bridge) as robot:
            adapter = agent.adapters["sim2bot"]
            room = adapter.rooms[0]
            stream = robot.camera("model:0", fps=FPS)
            reader = Reader(stream)
            await wait_for(lambda: reader.frames, 20)
            connects0, vconn0 = room.link.connects, room.video_link.connects
            def commands() -> int:
                c = adapter.status().counters
                return c["received"] - c["camera"] - c["status"]

            received0 = commands()
            sent = 0
            t0, up0 = time.time(), proxy.proxy.carried["up"]
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                await asyncio.to_thread(robot.base_velocity, 0.05)
                sent += 1
                await asyncio.sleep(0.1)
            await asyncio.sleep(1.0)          # the last commands' way through the slow path
            received = commands() - received0
            slow = reader.since(t0)
            t_slow_end = time.time()
            carried = (proxy.proxy.carried["up"] - up0) / (t_slow_end - t0)
            drops, vdrops = room.link.connects - connects0, room.video_link.connects - vconn0
            load_slow = os.getloadavg()[0]
            proxy.set_rate(None)
            t_rec, recovered = time.time(), None
            while time.time() - t_rec < 15:
                await asyncio.sleep(0.25)
                now = time.time()
                window = [f for f in reader.frames if now - 1.0 <= f[0] <= now]
                if now - t_rec >= 1.0 and len(window) >= 0.9 * FPS:
                    recovered = now - t_rec     # the end of the first full-rate second
                    break
            reader.stop.set()
            await asyncio.to_thread(stream.close)
            ages = [r - c for r, c in slow]
            return {"rate": rate_bps, "drops": drops, "video_reconnects": vdrops, "sent": sent,
                    "lost": sent - received, "frames": len(slow),
                    "fps": len(slow) / max(1e-9, t_slow_end - t0), "p50": pct(ages, 50), "p99": pct(ages, 99),
                    "max": max(ages) if ages else float("nan"), "recovered": recovered, "load": load_slow,
                    "stats": adapter.status().detail.get("video", {}),
                    "telemetry_skipped": getattr(room, "telemetry_skipped", None),
                    "telemetry_sent": room.sent, "carried": carried}
    finally:
        proxy.close()


async def main(args: argparse.Namespace) -> None:
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    with Bridge() as bridge:
        for rate in (float(r) for r in args.rates.split(",")):
            r = await one_rate(bridge, rate, args.seconds)
            rec = "not within 15 s" if r["recovered"] is None else f"{r['recovered']:.1f} s"
            print(f"Sim2Bot, path {r['rate'] * 8 / 1000:.0f} kbit/s shared by control + video, {args.seconds:.0f} s: "
                  f"control drops {r['drops']} (video socket {r['video_reconnects']}), "
                  f"commands lost {r['lost']} of {r['sent']}, frames {r['frames']} "
                  f"({r['fps']:.1f}/s), frame age p50 {r['p50']:.2f} s p99 {r['p99']:.2f} s max {r['max']:.2f} s; "
                  f"full rate again {rec} after the path recovered; the path carried {r['carried'] / 1000:.0f} kB/s "
                  f"agent -> bridge   load {r['load']:.2f}", flush=True)
            if args.verbose:
                print("   video:", r["stats"], "telemetry sent", r["telemetry_sent"], "skipped", r["telemetry_skipped"])


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seconds", type=float, default=30.0, help="seconds on the slow path per rate (default 30)")
    p.add_argument("--rates", default="125000,37500", help="path rates, bytes/s (default 1 Mbit/s, 300 kbit/s)")
    p.add_argument("--log-level", default="ERROR")
    p.add_argument("-v", "--verbose", action="store_true")
    asyncio.run(main(p.parse_args()))
