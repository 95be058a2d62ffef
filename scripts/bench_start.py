#!/usr/bin/env python3
"""Start -> READY=1 and start -> connected to the ARTEX hub, agent and artex-robot SDK interleaved.

Each trial starts one process (``python -m agent run`` or the artex-robot 0.1.1 SDK's
``Robot().start()``) and times, from just before ``exec``:

- ``ready``: the ``READY=1`` datagram on the ``NOTIFY_SOCKET`` this script listens on (the
  agent sends it through systemd-python once devices, control loop and adapters are up;
  the SDK sends none);
- ``connected``: the hub (:class:`agent.testing.artex_hub.ArtexHub`, in this process) sees the
  robot's ``/robot`` namespace connect; beside it the CPU time (user + system, /proc/PID/stat) the
  process had used by then, which a loaded machine changes far less than the wall time.

Variants, one trial of each per round, in turn (so the machine's load hits all alike):
``agent artex-only`` (sim devices, no camera, ARTEX alone), ``agent shipped`` (config/params.json:
sim devices, a 640x480 test-pattern camera, ARTEX and the console), ``sdk``. The one-minute load
average is printed beside every figure.

``--before TREE``: the same two agent variants again from another checkout of this repository
(``git worktree add /tmp/before <commit>``), interleaved in the same rounds: before/after under
the same load.

Bytecode: an installed agent starts from compiled modules (scripts/install.sh compiles them; pip
compiled the SDK's), so the script first compiles ``agent/`` and ``drivers/`` of each tree
(``compileall``; a checkout under ``PYTHONDONTWRITEBYTECODE`` has none, and every start would compile
~140 modules from source). ``--no-compile`` leaves the trees as they are.

Usage: ``scripts/bench_start.py [--rounds 10] [--before TREE] [--no-compile]`` (about 1-3 s per trial: ~60 s for
10 rounds on a quiet machine, twice that with ``--before``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agent.testing.artex_hub import ArtexHub  # noqa: E402
from agent.testing.ports import free_port  # noqa: E402

PY = sys.executable

SDK_ROBOT = textwrap.dedent('''
    from artex_robot import Robot
    robot = Robot()

    @robot.com_handler
    def on_command(type_command, command, author=None):
        pass

    robot.init_connector()

    @robot.mainloop
    def loop(context):
        pass

    robot.start()
''')


def cpu_s(pid: int) -> float:
    """utime + stime of ``pid`` so far, s (the start's CPU: what load does not change much)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def load1() -> float:
    return os.getloadavg()[0]


def agent_config(port: int, variant: str) -> dict:
    cfg = json.loads((ROOT / "config" / "params.json").read_text())
    cfg["server"], cfg["port"] = "http://127.0.0.1", port
    cfg["logger_level"] = "error"
    cfg["console"]["port"] = free_port()
    if variant == "agent artex-only":
        cfg["drivers"].pop("cameras", None)
        cfg["console"]["enabled"] = False
    return cfg


async def trial(hub: ArtexHub, argv: list[str], cwd: str, env: dict,
                notify: socket.socket) -> tuple[float | None, float, float]:
    """(start -> READY=1 or None, start -> connected, CPU s of the process until connected)."""
    before = len(hub.passports)
    while True:                       # stale datagrams from the last trial
        try:
            notify.recv(4096)
        except BlockingIOError:
            break
    loop = asyncio.get_running_loop()
    t0 = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(*argv, cwd=cwd, env=env, stdout=asyncio.subprocess.DEVNULL,
                                                stderr=asyncio.subprocess.DEVNULL)
    ready = connected = None
    cpu = float("nan")
    try:
        deadline = t0 + 20.0
        while connected is None or (ready is None and "NOTIFY_SOCKET" in env):
            now = time.perf_counter()
            if now > deadline:
                break
            try:
                if b"READY=1" in notify.recv(4096) and ready is None:
                    ready = time.perf_counter() - t0
            except BlockingIOError:
                pass
            if connected is None and len(hub.passports) > before:
                connected = time.perf_counter() - t0
                cpu = cpu_s(proc.pid)
            await asyncio.sleep(0.001)
    finally:
        proc.terminate()
        try:
            await asyncio.wait_for(proc.wait(), 10)
        except TimeoutError:
            proc.kill()
            await proc.wait()
    del loop
    return ready, (connected if connected is not None else float("nan")), cpu


async def main(args: argparse.Namespace) -> None:
    hub = ArtexHub(ready_delay_s=0.05)
    port = await hub.start()
    variants = ["agent artex-only", "agent shipped", "sdk"]
    trees = {v: str(ROOT) for v in variants}
    if args.before:
        for v in variants[:2]:
            trees[f"{v} (before)"] = args.before
        variants = variants[:2] + [f"{v} (before)" for v in variants[:2]] + ["sdk"]
    results: dict[str, list[tuple[float | None, float, float, float]]] = {v: [] for v in variants}
    if not args.no_compile:
        for tree in sorted(set(trees.values())):
            subprocess.run([PY, "-m", "compileall", "-q", "agent", "drivers"], cwd=tree, check=True,
                           stdout=subprocess.DEVNULL)
        print(f"bytecode compiled in {', '.join(sorted(set(trees.values())))} (as installed; --no-compile: not)")
    with tempfile.TemporaryDirectory(prefix="bench_start_") as tmp:
        sock_path = str(Path(tmp) / "notify")
        notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        notify.bind(sock_path)
        notify.setblocking(False)
        setups = {}
        for v in variants[:-1]:
            kind = v.split(" (")[0]
            path = Path(tmp) / f"{kind.split()[1]}.json"
            path.write_text(json.dumps(agent_config(port, kind)))
            env = {**os.environ, "NOTIFY_SOCKET": sock_path}
            setups[v] = ([PY, "-m", "agent", "run", "--config", str(path)], trees[v], env)
        sdk_dir = Path(tmp) / "sdk"
        sdk_dir.mkdir()
        (sdk_dir / "params.json").write_text(json.dumps({
            "name": "sdk-bot", "type": "Robot", "telem_can": True, "video_can": False,
            "server": "http://127.0.0.1", "port": port, "max_send_freq": 0.05,
            "logger_type": "file", "logger_level": "skip_TODO"}))
        (sdk_dir / "sdk_robot.py").write_text(SDK_ROBOT)
        sdk_env = {k: v for k, v in os.environ.items() if k != "NOTIFY_SOCKET"}
        setups["sdk"] = ([PY, "sdk_robot.py"], str(sdk_dir), sdk_env)
        for v in variants:                       # warm the page cache: first starts are not the figure
            await trial(hub, *setups[v], notify)
        for r in range(args.rounds):
            for v in variants:
                ready, conn, cpu = await trial(hub, *setups[v], notify)
                results[v].append((ready, conn, load1(), cpu))
                print(f"round {r + 1:2d} {v:<26} ready {'  -  ' if ready is None else f'{ready:5.3f}'} s   "
                      f"connected {conn:5.3f} s (CPU {cpu:5.3f} s)   load {load1():.2f}", flush=True)
        notify.close()
    await hub.stop()
    print(f"\nstart -> READY=1 / connected, median (min..max) over {args.rounds} rounds, interleaved; "
          f"{os.cpu_count()} cores")
    for v, rows in results.items():
        conns = [c for _, c, _, _ in rows]
        readys = [r for r, _, _, _ in rows if r is not None]
        loads = [ld for _, _, ld, _ in rows]
        cpus = [c for _, _, _, c in rows]
        ready_txt = (f"READY {statistics.median(readys):.3f} ({min(readys):.3f}..{max(readys):.3f}) s"
                     if readys else "READY -")
        print(f"  {v:<26} {ready_txt}   connected {statistics.median(conns):.3f} "
              f"({min(conns):.3f}..{max(conns):.3f}) s   CPU to connected {statistics.median(cpus):.3f} s   "
              f"load {min(loads):.2f}..{max(loads):.2f}")


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=10, help="rounds of one trial per variant (default 10)")
    p.add_argument("--before", help="another checkout whose agent runs interleaved (before/after)")
    p.add_argument("--no-compile", action="store_true", help="do not compile the trees' bytecode first")
    asyncio.run(main(p.parse_args()))
