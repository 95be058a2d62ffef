#!/usr/bin/env python3
"""ARTEX test hub: the minimal server from the ARTEX protocol page, extended.

python-socketio ``AsyncServer`` + aiohttp, namespace ``/robot``. On each robot
connection it prints the passport, calls ``heartbeat ["d_meta", "Ready"]`` and
prints the answer; then it prints telemetry (compact, clipped), video frame
sizes and ``file`` answers, never whole payloads.

Lines typed on stdin become commands to the connected robots:

- ``forward``, ``back``, ``left``, ``stop``... (any word) -> ``{"com": WORD}``
- ``drive VX OMEGA`` -> ``{"drive": {"vx": VX, "omega": OMEGA}}`` (m/s, rad/s)
- ``tracks LEFT RIGHT`` -> ``{"tracks": {"left": LEFT, "right": RIGHT}}`` (duty -1..1)
- ``log`` / ``error`` / ``clear`` -> ``{"file": ...}``
- ``hb [REQ ...]`` -> heartbeat call (default ``d_meta Ready``); ``token`` -> token_ask
- a JSON object: a payload ``{TYPE: COMMAND}``, or a whole ``{"author", "payload"}`` command
- ``quit`` -> stop the hub

The robot stops 0.5 s after the last motion command (its watchdog):
``--repeat-ms 150`` resends the last motion command every 150 ms until ``stop``.
``--demo`` drives a forward / turn / stop pattern after every Ready.

The :class:`ArtexHub` class is reused by tests/adapters/test_artex.py and

The hub itself is :class:`agent.testing.artex_hub.ArtexHub` (also used by the tests
and scripts/bench_artex.py); this script is its console.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import threading
import time
from typing import Any

import socketio

from agent.testing.artex_hub import NAMESPACE, ArtexHub, compact, is_motion, parse_line

__all__ = ["ArtexHub", "is_motion", "main", "parse_line", "printer", "safety"]


#: longest halt text in the telemetry line's lead, characters
HALT_LIMIT = 200


def safety(data: Any) -> str:
    """The lead of a telemetry line: ``E-STOP SET: <halt>`` or ``HALTED: <halt>`` (a failsafe) while
    one holds, ``estop off`` otherwise, "" when the telemetry carries no safety fields (telem
    ``estop``, ``halted``, ``halt``, ``speed_cap_mps``: docs/artex.md)."""
    if not isinstance(data, dict) or not ("estop" in data or "halted" in data):
        return ""
    halt = str(data.get("halt") or "")
    halt = halt if len(halt) <= HALT_LIMIT else halt[:HALT_LIMIT] + "..."
    if data.get("estop") is True:
        head = f"E-STOP SET: {halt or 'emergency stop'}"
    elif data.get("halted") is True:
        head = f"HALTED: {halt or 'a failsafe holds'}"
    else:
        head = "estop off"
    cap = data.get("speed_cap_mps")
    if isinstance(cap, (int, float)) and not isinstance(cap, bool):
        head += f" · speed cap {cap:.2f} m/s"
    return head


#: longest telemetry line printed, characters (the whole dict of a robot with joints and a few
#: devices fits; the motors summary comes first in any case)
TELEM_LIMIT = 4000


def motors(data: Any) -> str:
    """``motors at zero · duty L +0.00 R +0.00 · speed L +0.00 R +0.00 m/s`` from a telemetry dict
    (its ``tracks``), or "" when it has none: are the motors at zero, at a glance."""
    t = data.get("tracks") if isinstance(data, dict) else None
    if not isinstance(t, dict):
        return ""
    try:
        dl, dr = float(t.get("duty_left", 0.0)), float(t.get("duty_right", 0.0))
        vl, vr = float(t.get("left_mps", 0.0)), float(t.get("right_mps", 0.0))
    except (TypeError, ValueError):
        return ""
    state = "at zero" if dl == 0.0 and dr == 0.0 else "DRIVING"
    return f"motors {state} · duty L {dl:+.2f} R {dr:+.2f} · speed L {vl:+.2f} R {vr:+.2f} m/s"


def printer(kind: str, sid: str, data: Any) -> None:
    """The CLI's event printer (bounded output; telemetry leads with a halt in force, then the motors'
    duty and speed, then ``estop off`` when none holds)."""
    if kind == "telem":
        halt, motion = safety(data), motors(data)
        heads = [halt, motion] if halt.startswith(("E-STOP", "HALTED")) else [motion, halt]
        head = " | ".join(h for h in heads if h)
        print(f"telem {head + ' | ' if head else ''}{compact(data, TELEM_LIMIT)}", flush=True)
    elif kind == "video":
        print(f"video {data} bytes", flush=True)
    elif kind == "file":
        content = data.get("content", "") if isinstance(data, dict) else ""
        kind_ = data.get("type") if isinstance(data, dict) else "?"
        print(f"file {kind_}: {len(content)} chars; tail:\n{content[-600:]}", flush=True)
    elif kind == "connect":
        print(f"connected {sid}: passport {compact(data)}", flush=True)
    else:
        print(f"{kind} {sid}: {compact(data)}", flush=True)


class _Console:
    """stdin lines -> hub actions, with the optional motion repeat and demo pattern."""

    DEMO = ((2.0, {"com": "forward"}), (1.5, {"com": "left"}), (2.0, {"com": "back"}),
            (1.5, {"com": "right"}), (2.0, {"com": "stop"}))

    def __init__(self, hub: ArtexHub, repeat_s: float | None) -> None:
        self.hub = hub
        self.repeat_s = repeat_s
        self.motion: Any = None
        self.quit = asyncio.Event()

    async def send(self, payload: Any) -> None:
        self.motion = None          # repeated only once sent: a payload the encoder cannot send is not
        try:
            await self.hub.command(payload)
        except ConnectionError as err:
            print(f"not sent: {err}", flush=True)
            return
        self.motion = payload if is_motion(payload) else None

    async def repeat(self) -> None:
        """Resend the held motion every ``repeat_s``; a failed send is reported and the repeat goes
        on (one that raised used to end the task silently: no key repeated again until restart)."""
        while self.repeat_s:
            await asyncio.sleep(self.repeat_s)
            if self.motion is not None and self.hub.connected:
                try:
                    await self.hub.command(self.motion)
                except (ConnectionError, TimeoutError, socketio.exceptions.SocketIOError,
                        RecursionError, ValueError, TypeError) as err:
                    print(f"repeat not sent: {type(err).__name__}: {str(err)[:120]}", flush=True)

    async def demo(self) -> None:
        while True:
            for duration, payload in self.DEMO:
                end = time.monotonic() + duration
                once = not is_motion(payload)  # stop: once, then silence (the watchdog needs nothing)
                while time.monotonic() < end:
                    if self.hub.connected and self.hub.heartbeats:
                        with contextlib.suppress(ConnectionError):
                            await self.hub.command(payload)
                    await asyncio.sleep(duration if once else 0.15)

    async def lines(self, queue: asyncio.Queue) -> None:
        while True:
            line = await queue.get()
            if line is None:
                return  # stdin closed: keep serving
            action, arg = parse_line(line)
            try:
                if action == "command":
                    await self.send(arg)
                elif action == "raw":
                    await self.hub.send_raw("command", arg)
                elif action == "heartbeat":
                    await self.hub.heartbeat(arg)
                elif action == "token":
                    print(f"token {await self.hub.token_ask()}", flush=True)
                elif action == "quit":
                    self.quit.set()
                    return
                elif action == "error":
                    print(arg, flush=True)
            except (TimeoutError, ConnectionError, socketio.exceptions.SocketIOError) as err:
                print(f"failed: {err!r}", flush=True)
            except (RecursionError, ValueError, TypeError) as err:   # a payload the encoder cannot send
                print(f"failed: cannot send that payload: {type(err).__name__}: {str(err)[:120]}", flush=True)


def _stdin_queue(loop: asyncio.AbstractEventLoop) -> asyncio.Queue:
    queue: asyncio.Queue = asyncio.Queue()

    def reader() -> None:
        for line in sys.stdin:
            loop.call_soon_threadsafe(queue.put_nowait, line)
        loop.call_soon_threadsafe(queue.put_nowait, None)

    threading.Thread(target=reader, name="stdin", daemon=True).start()
    return queue


async def _main(args: argparse.Namespace) -> None:
    hub = ArtexHub(host=args.host, port=args.port, on_event=printer)
    await hub.start()
    print(f"ARTEX test hub on http://{args.host}:{hub.port} namespace {NAMESPACE}", flush=True)
    console = _Console(hub, args.repeat_ms / 1000.0 if args.repeat_ms else None)
    tasks = [asyncio.create_task(console.lines(_stdin_queue(asyncio.get_running_loop())))]
    if args.repeat_ms:
        tasks.append(asyncio.create_task(console.repeat()))
    if args.demo:
        tasks.append(asyncio.create_task(console.demo()))
    try:
        await console.quit.wait()
    finally:
        for task in tasks:
            task.cancel()
        await hub.stop()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default loopback; 0.0.0.0 for robots on other machines)")
    p.add_argument("--port", type=int, default=8765, help="port (default 8765)")
    p.add_argument("--repeat-ms", type=float, default=0.0,
                   help="resend the last motion command every this many ms until stop (0 = off)")
    p.add_argument("--demo", action="store_true", help="drive a forward/turn/stop pattern after Ready")
    args = p.parse_args(argv)
    try:
        asyncio.run(_main(args))
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
