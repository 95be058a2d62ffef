#!/usr/bin/env python3
"""The agent's resident memory under a robot_msg multipart flood (issue 24).

Starts ``python -m agent run`` on the simulated tank (cameras off, robot_msg bound to free
loopback ports) and sends, on the action and the command socket at once, ``--messages``
messages of ``--parts`` parts of ``--part-bytes`` each (every part under the per-frame limit,
ZMQ_MAXMSGSIZE = 2 x ``max_frame_bytes`` = 2 MiB; each message far over ``max_frame_bytes``).
Prints the agent process's VmRSS before, its peak during the flood (VmHWM, and the highest
VmRSS sampled every 10 ms), VmRSS ``--after-s`` (3 s) after the last message was handed to ZeroMQ, and whether it is still up.
The flood is sent without copies (one shared part) from this process.

Usage: ``python scripts/bench_robotmsg_flood.py [--messages 4 --parts 150 --part-bytes 1048576]``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import zmq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agent.testing.ports import free_ports  # noqa: E402
from agent.testing.running_agent import sim_config  # noqa: E402

MIB = 1 << 20


def status_kib(pid: int, key: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(key + ":"))


def subscribed(address: str, timeout_s: float) -> zmq.Socket:
    """An XPUB connected to ``address``, returned once the agent's subscription arrived."""
    pub = zmq.Context.instance().socket(zmq.XPUB)
    pub.setsockopt(zmq.LINGER, 2000)
    pub.setsockopt(zmq.SNDHWM, 1)       # a send waits while a message is queued: the flood is paced by the agent
    pub.setsockopt(zmq.XPUB_NODROP, 1)
    pub.setsockopt(zmq.SNDTIMEO, 5000)
    pub.connect(address)
    if not pub.poll(int(timeout_s * 1000)):
        raise SystemExit(f"the agent never subscribed on {address}")
    pub.recv()
    return pub


def flood(pub: zmq.Socket, messages: int, parts: int, part: memoryview, sent: list[int]) -> None:
    for _ in range(messages):
        try:
            for _ in range(parts - 1):
                pub.send(part, zmq.SNDMORE, copy=False)
            pub.send(part, copy=False)
            sent.append(1)
        except zmq.Again:  # the agent dropped the connection mid-message
            continue
    pub.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=4)
    ap.add_argument("--parts", type=int, default=150)
    ap.add_argument("--part-bytes", type=int, default=MIB)
    ap.add_argument("--after-s", type=float, default=3.0, help="when to read VmRSS after the flood, s")
    args = ap.parse_args()
    state, command, action = free_ports(3)
    cfg = sim_config(drivers={"cameras": []}, robot_msg={
        "enabled": True, "state": {"address": f"tcp://127.0.0.1:{state}"},
        "command": {"address": f"tcp://127.0.0.1:{command}"}, "action": {"address": f"tcp://127.0.0.1:{action}"}})
    with tempfile.TemporaryDirectory() as tmp:
        params = Path(tmp) / "params.json"
        params.write_text(json.dumps(cfg))
        env = {k: v for k, v in os.environ.items() if k not in ("NOTIFY_SOCKET", "WATCHDOG_USEC")}
        proc = subprocess.Popen([sys.executable, "-m", "agent", "run", "--config", str(params), "--status-file",
                                 str(Path(tmp) / "status.json")], cwd=ROOT, env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            pubs = [subscribed(f"tcp://127.0.0.1:{port}", 30) for port in (action, command)]
            time.sleep(2.0)  # settle
            before = status_kib(proc.pid, "VmRSS")
            part = memoryview(bytes(args.part_bytes))
            sent: list[int] = []
            threads = [threading.Thread(target=flood, args=(p, args.messages, args.parts, part, sent)) for p in pubs]
            peak = before
            t0 = time.monotonic()
            for t in threads:
                t.start()
            while any(t.is_alive() for t in threads):
                peak = max(peak, status_kib(proc.pid, "VmRSS"))
                time.sleep(0.01)
            took = time.monotonic() - t0
            end = time.monotonic() + args.after_s
            while time.monotonic() < end:
                peak = max(peak, status_kib(proc.pid, "VmRSS"))
                time.sleep(0.01)
            after, hwm = status_kib(proc.pid, "VmRSS"), status_kib(proc.pid, "VmHWM")
            up = proc.poll() is None
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
    size = args.parts * args.part_bytes / MIB
    print(f"flood: 2 sockets x {args.messages} messages x {args.parts} parts x {args.part_bytes} B "
          f"({size:.0f} MiB a message), {len(sent)} sent whole in {took:.2f} s")
    print(f"agent VmRSS before {before / 1024:.0f} MiB, peak sampled {peak / 1024:.0f} MiB (VmHWM "
          f"{hwm / 1024:.0f} MiB), {args.after_s:g} s after {after / 1024:.0f} MiB ({(after - before) / 1024:+.0f} MiB); "
          f"agent {'up' if up else 'DOWN'}")


if __name__ == "__main__":
    main()
