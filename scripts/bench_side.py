#!/usr/bin/env python3
"""The agent and the artex-robot 0.1.1 SDK side by side on one ARTEX hub: CPU, wake-ups, RSS per part.

Both robots run at the same time, each in its own process, against one
:class:`agent.testing.artex_hub.ArtexHub` in this process; the figures of both come from the
same window, so the load of the machine hits both alike (alternating windows would not).

- agent (``--child``, this script in a child process): the shipped params.json (sim devices,
  one 640x480 test-pattern camera at 20 fps) with ARTEX (telemetry and video to the hub),
  Sim2Bot (the real ``sim2bot bridge`` subprocess; a ``sim2bot.Robot`` controller here subscribes
  the camera at 20 fps and sends ``base_velocity`` every 100 ms: the tank moves) and robot_msg
  (RobotState at 50 Hz to a ZeroMQ subscriber here) on. The child samples its own threads
  (/proc/self/task/*/stat and status, Python thread names) at the start and end of the window.
- ``idle``: the same agent with no camera, no controller and no commands (links connected,
  tank still), measured after the side-by-side window, on its own.
- SDK: ``artex_robot.Robot`` streaming a telem dict and the same test-pattern camera at 20 Hz
  (``max_send_freq`` 0.05 s, the SDK default), as scripts/bench_artex.py runs it; whole process.

Parts of the agent: event loop (``MainThread``: ARTEX, Sim2Bot, robot_msg and their libraries;
one thread, split by the code each of its callbacks ran for into each adapter, the console, the
shared video code, the recorder and asyncio's own work between callbacks: scripts/bench_loopsplit.py), asyncio's executor threads, control, device I/O (``motor``,
``i2c-*``, ``estop-input``), camera (capture and encode threads), robot_msg receivers (``robotmsg-*``: one thread per SUB socket), ZeroMQ's threads;
emulators apart: ``RoboclawEmulator-*`` (the emulated motor controller, its own thread), and the
emulators that run inline on agent threads, measured by their own thread CPU time
(drivers/emulators/cputime.py): the I2C chips' emulation (FakeSMBus and its chips, on the ``i2c-*``
thread; its wire-time sleep is waiting, not counted), the GPIO chip of the e-stop input (on the
``estop-input`` thread) and the test pattern (drawn on the capture thread). Their time is taken
out of "device I/O" and "camera" and shown in rows of its own; the
agent's total without any emulator is compared with the SDK's CPU, and with the SDK's CPU without
its own test pattern (the SDK process draws the same pattern; it writes its meter to a file).
A ``--before`` tree whose emulators do not count their time shows "device I/O" and "camera" with
their emulators (said in the output).
Wake-ups: voluntary + involuntary context switches per second, summed over threads.
Work: what the agent delivered per second in the window (ARTEX telem and video messages, Sim2Bot
telemetry packets and frames, RobotState messages, the hub's encodes and how many were encoded ahead
on the capture thread): a change that cuts CPU or wake-ups must deliver the same.

``--before TREE``: another checkout (``git worktree add /tmp/before <commit>``, this script
copied into its ``scripts/``) runs in turn with this one in every run: before/after.

``BENCH_SIDE_PROFILE=PATH`` in the environment: the agent's event loop thread runs under cProfile
(on its thread CPU time) through the window and its stats go to ``PATH.all`` / ``PATH.idle``
(``python -m pstats``); the profiler's own cost inflates that run's figures.

Usage: ``scripts/bench_side.py [--window 20] [--runs 3] [--before TREE]`` (~30 s per agent run at
the default window, plus one idle run per tree: ~2 min for 3 runs, ~4 min with ``--before``;
the one-minute load average is printed beside every row).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

try:
    from bench_loopsplit import ASYNCIO, LoopSplit
except ImportError:         # a --before tree without it: no split
    ASYNCIO, LoopSplit = "", None

PY = sys.executable
FPS = 20
WARMUP_S = 4.0

EMU_MOTOR = "emulator: motor controller"
EMU_I2C = "emulator: I2C chips (inline in i2c-*)"
EMU_PATTERN = "emulator: test pattern (inline in capture)"
EMU_GPIO = "emulator: GPIO chip (inline in estop-input)"
DEVICE_IO = "device I/O"
LOOP = "event loop (adapters)"
CAMERA = "camera"
PARTS = [(EMU_MOTOR, ("RoboclawEmulator",)),
         ("control", ("control",)),
         (DEVICE_IO, ("motor", "i2c", "estop")),
         (CAMERA, ("camera-", "video-", "[cv2", "[python")),
         (LOOP, ("MainThread",)),
         ("robot_msg receivers", ("robotmsg-",)),
         ("asyncio executor", ("asyncio_",)),
         ("ZeroMQ", ("[ZMQ", "[zmq"))]


def part_of(name: str) -> str:
    for part, prefixes in PARTS:
        if name.startswith(prefixes):
            return part
    return "other: " + name


def task_figures(pid: int | str) -> tuple[float, int, dict[str, tuple[float, int]]]:
    """(RSS MiB, -, {tid-or-name: (CPU s, context switches)}) of a process, from /proc."""
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[str, tuple[float, int]] = {}
    base = Path(f"/proc/{pid}")
    for task in (base / "task").iterdir():
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
            status = (task / "status").read_text()
        except OSError:
            continue
        switches = sum(int(line.split()[1]) for line in status.splitlines()
                       if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")))
        out[task.name] = ((int(fields[11]) + int(fields[12])) / tick, switches)
    rss = next((int(line.split()[1]) / 1024 for line in (base / "status").read_text().splitlines()
                if line.startswith("VmRSS:")), 0.0)
    return rss, 0, out


# ---------------------------------------------------------------------- child: the agent
async def child(ports: dict, window_s: float, video: bool, out: str) -> None:
    import logging

    from bench_pi_agent import config

    from agent.app import Agent

    logging.basicConfig(level=logging.ERROR)
    split = LoopSplit() if LoopSplit is not None else None     # the event loop's CPU per part
    cfg = config(ports, video)
    if video:
        cam = cfg.drivers.cameras[0].model_copy(update={"fps": FPS})
        cfg = cfg.model_copy(update={"drivers": cfg.drivers.model_copy(update={"cameras": [cam]})})
    async with Agent(cfg) as agent:
        await asyncio.sleep(WARMUP_S)
        Path(out + ".go").write_text("")
        names0 = names()
        work0 = work(agent)
        emu0 = emulators()
        _, _, t0 = task_figures("self")
        split0 = split.take() if split is not None else {}
        start = time.monotonic()
        profile = os.environ.get("BENCH_SIDE_PROFILE")    # the event loop thread's CPU by function
        if profile:
            import cProfile
            prof = cProfile.Profile(time.thread_time)
            prof.enable()
        await asyncio.sleep(window_s)
        if profile:
            prof.disable()
            prof.dump_stats(f"{profile}.{'all' if video else 'idle'}")
        rss, _, t1 = task_figures("self")
        split1 = split.take() if split is not None else {}
        window = time.monotonic() - start
        emu1 = emulators()
        work1 = work(agent)
        names1 = {**names0, **names()}
    rows: dict[str, list[float]] = {}
    for tid, (cpu, sw) in t1.items():
        cpu0, sw0 = t0.get(tid, (0.0, 0))
        part = part_of(names1.get(int(tid), f"[{tid}]"))
        row = rows.setdefault(part, [0.0, 0.0])
        row[0] += 100 * (cpu - cpu0) / window
        row[1] += (sw - sw0) / window
    for kind, (part, host) in {"i2c": (EMU_I2C, DEVICE_IO), "gpio": (EMU_GPIO, DEVICE_IO),
                               "pattern": (EMU_PATTERN, CAMERA)}.items():
        cpu = 100 * (emu1.get(kind, 0.0) - emu0.get(kind, 0.0)) / window
        if host in rows and cpu > 0:     # inline: its thread's CPU, not its own wake-ups
            rows[host][0] -= cpu
            rows[part] = [cpu, 0.0]
    done = {k: (v - work0.get(k, 0)) / window for k, v in work1.items()}
    loop = {k: 100 * (v - split0.get(k, 0.0)) / window for k, v in split1.items()}
    if loop and LOOP in rows:
        loop[ASYNCIO] = rows[LOOP][0] - sum(loop.values())
    Path(out).write_text(json.dumps({"rss": rss, "parts": rows, "work": done, "emulators_apart": True,
                                     "loop": loop}))


def emulators() -> dict[str, float]:
    """Thread CPU time, s, the inline emulators (I2C chips, test pattern) spent in this process so far."""
    from drivers.emulators.cputime import totals

    return totals()


#: (label, adapter, counter) of the work the agent did in the window, per second
WORK = [("ARTEX telem", "artex", "sent_telem"), ("ARTEX video", "artex", "sent_video"),
        ("Sim2Bot telemetry", "sim2bot", "sent"), ("Sim2Bot frames", "sim2bot", "frames_sent"),
        ("RobotState", "robot_msg", "sent")]


def work(agent) -> dict[str, float]:
    """What the agent delivered so far (the same work before and after a change: fewer wake-ups
    must not come from fewer messages), and the hub's encodes."""
    out: dict[str, float] = {}
    for label, name, key in WORK:
        adapter = agent.adapters.get(name)
        if adapter is not None:
            st = adapter.status()
            out[label] = float(st.counters.get(key, st.detail.get(key, 0)) or 0)
    stats = agent.video.stats() if agent.video is not None else {}
    out["encodes"] = float(stats.get("encodes", 0))
    if "encoded_ahead" in stats:
        out["of them encoded ahead"] = float(stats["encoded_ahead"])
    return out


def names() -> dict[int, str]:
    out = {t.native_id: t.name for t in threading.enumerate()}
    for task in Path("/proc/self/task").iterdir():
        if int(task.name) not in out:
            try:
                out[int(task.name)] = "[" + (task / "comm").read_text().strip() + "]"
            except OSError:
                pass
    return out


# ---------------------------------------------------------------------- parent
SDK_ROBOT = '''
import os
import sys
from artex_robot import Robot
sys.path.insert(0, sys.argv[1])
from drivers.emulators.camera import PatternCapture
camera = PatternCapture(640, 480, 20.0, paced=False)
meter = getattr(camera, "emulation", None)      # the test pattern's own CPU time (drivers/emulators/cputime.py)
robot = Robot()

@robot.com_handler
def on_command(type_command, command, author=None):
    pass

robot.init_connector()
n = 0

@robot.mainloop
def loop(context):
    global n
    n += 1
    robot.vault.set_telem("battery", round(11.7 - 1e-4 * n, 2))
    robot.vault.set_telem("imu", [0.01, -0.02, 9.81])
    robot.vault.set_telem("odom", {"x_m": round(0.01 * n, 3), "y_m": 0.0, "yaw_rad": 0.0})
    ok, frame = camera.read()
    robot.vault.set_video("front", frame)
    if meter is not None and n % 5 == 0:
        with open("pattern_cpu.tmp", "w") as f:
            f.write(repr(meter.cpu_s))
        os.replace("pattern_cpu.tmp", "pattern_cpu")

robot.main_freq = 0.05
robot.start()
'''


def process_figures(pid: int, before, after, window: float) -> tuple[float, float, float]:
    cpu = sum(c for c, _ in after[2].values()) - sum(c for c, _ in before[2].values())
    sw = sum(s for _, s in after[2].values()) - sum(s for _, s in before[2].values())
    return 100 * cpu / window, sw / window, after[0]


async def agent_run(peers, tmp: str, window_s: float, video: bool, sdk_dir: Path | None,
                    drive: bool, tree: Path = ROOT) -> dict:
    out = str(Path(tmp) / f"agent_{int(video)}_{time.monotonic_ns()}.json")
    proc = subprocess.Popen([PY, str(tree / "scripts" / "bench_side.py"), "--child", json.dumps(peers.ports()),
                             str(window_s), str(int(video)), out], cwd=str(tree))
    sdk = subprocess.Popen([PY, "sdk_robot.py", str(ROOT)], cwd=str(sdk_dir), stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL) if sdk_dir is not None else None
    stop = threading.Event()
    try:
        controller = None
        if drive:
            from agent.testing.sim2bot_bridge import controller as s2b_controller
            controller = s2b_controller(peers.bridge)
            robot = await controller.__aenter__()
            stream = robot.camera("model:0", fps=FPS)

            def commands() -> None:
                while not stop.wait(0.1):
                    robot.base_velocity(0.2, omega=0.3)
                    stream.read(0.0)

            threading.Thread(target=commands, daemon=True).start()
        while not Path(out + ".go").exists():
            if proc.poll() is not None:
                raise RuntimeError("agent child ended early")
            await asyncio.sleep(0.05)
        load0 = os.getloadavg()[0]
        sdk0 = task_figures(sdk.pid) if sdk else None
        pattern0 = sdk_pattern_s(sdk_dir)
        t0 = time.monotonic()
        await asyncio.to_thread(proc.wait, window_s + 30)
        sdk_row = process_figures(sdk.pid, sdk0, task_figures(sdk.pid), time.monotonic() - t0) if sdk else None
        pattern1 = sdk_pattern_s(sdk_dir)
        if sdk_row is not None and pattern0 is not None and pattern1 is not None:
            sdk_row = (*sdk_row, 100 * (pattern1 - pattern0) / (time.monotonic() - t0))
        stop.set()
        if controller is not None:
            stream.close()
            await controller.__aexit__(None, None, None)
        got = json.loads(Path(out).read_text())
        return {"agent": got, "sdk": sdk_row, "load": (load0 + os.getloadavg()[0]) / 2}
    finally:
        stop.set()
        for p in (proc, sdk):
            if p is not None and p.poll() is None:
                p.terminate()
                p.wait(10)


def sdk_pattern_s(sdk_dir: Path | None) -> float | None:
    """The thread CPU time, s, the SDK process's test pattern spent so far (written every 5 frames), or None."""
    try:
        return float((sdk_dir / "pattern_cpu").read_text()) if sdk_dir is not None else None
    except (OSError, ValueError):
        return None


def show(title: str, r: dict) -> None:
    parts = r["agent"]["parts"]
    apart = r["agent"].get("emulators_apart", False)
    cpu = sum(v[0] for v in parts.values())
    wake = sum(v[1] for v in parts.values())
    emu = sum(v[0] for k, v in parts.items() if k.startswith("emulator"))
    motor = parts.get(EMU_MOTOR, [0.0, 0.0])[0]
    print(f"{title}   load {r['load']:.2f}")
    inline = "" if apart else ": NOT the inline ones (this tree does not count them)"
    print(f"  agent: CPU {cpu:5.1f} % of one core ({cpu - motor:5.1f} % without the motor emulator, "
          f"{cpu - emu:5.1f} % without any emulator{inline}), "
          f"wake-ups {wake:6.0f}/s, RSS {r['agent']['rss']:.1f} MiB")
    for part, (c, w) in sorted(parts.items(), key=lambda kv: -kv[1][0]):
        label = part if apart else {DEVICE_IO: DEVICE_IO + " (+ inline I2C, GPIO emulation)",
                                    CAMERA: CAMERA + " (+ test pattern)"}.get(part, part)
        waking = f"{w:6.0f}/s" if part not in (EMU_I2C, EMU_GPIO, EMU_PATTERN) else "  (its thread's)"
        print(f"    {label:<44} CPU {c:5.2f} %   wake-ups {waking}")
        loop = r["agent"].get("loop") if part == LOOP else None
        if loop:
            print("      of it: " + ", ".join(f"{k} {v:.2f} %" for k, v in sorted(loop.items(), key=lambda kv: -kv[1])))
    done = r["agent"].get("work", {})
    if done:
        print("    work per second: " + ", ".join(f"{k} {v:.1f}" for k, v in done.items()))
    if r["sdk"] is not None:
        c, w, rss = r["sdk"][:3]
        print(f"  SDK:   CPU {c:5.1f} % of one core, wake-ups {w:6.0f}/s, RSS {rss:.1f} MiB   "
              f"(agent/SDK CPU {cpu / c:.2f}x, without the motor emulator {(cpu - motor) / c:.2f}x, "
              f"without any emulator {(cpu - emu) / c:.2f}x)")
        if len(r["sdk"]) > 3:
            own = c - r["sdk"][3]
            print(f"         without its test pattern ({r['sdk'][3]:.2f} %): CPU {own:5.1f} %; the agent without any "
                  f"emulator is {(cpu - emu) / own:.2f}x that")


async def main(args: argparse.Namespace) -> None:
    from bench_pi_peers import Peers

    peers = Peers()
    await peers.start()
    ctx_sub = None
    try:
        import zmq
        ctx_sub = peers.ctx.socket(zmq.SUB)     # a RobotState subscriber: robot_msg publishes to someone
        ctx_sub.setsockopt(zmq.SUBSCRIBE, b"")
        ctx_sub.connect(f"tcp://127.0.0.1:{peers.state_port}")
        with tempfile.TemporaryDirectory(prefix="bench_side_") as tmp:
            sdk_dir = Path(tmp) / "sdk"
            sdk_dir.mkdir()
            (sdk_dir / "params.json").write_text(json.dumps({
                "name": "sdk-bot", "type": "Robot", "telem_can": True, "video_can": True,
                "server": "http://127.0.0.1", "port": peers.artex_port, "max_send_freq": 0.05,
                "logger_type": "file", "logger_level": "skip_TODO"}))
            (sdk_dir / "sdk_robot.py").write_text(SDK_ROBOT)
            drain = asyncio.create_task(_drain(ctx_sub))
            trees = [("", ROOT)] + ([(" (before)", Path(args.before))] if args.before else [])
            for run in range(args.runs):
                for label, tree in trees:
                    r = await agent_run(peers, tmp, args.window, True, sdk_dir, drive=True, tree=tree)
                    show(f"run {run + 1}{label}: everything on (ARTEX + Sim2Bot + robot_msg, camera 640x480 @ "
                         f"{FPS} fps, tank moving), SDK beside it, window {args.window:.0f} s", r)
            for label, tree in trees if not args.no_idle else []:
                r = await agent_run(peers, tmp, args.window, False, None, drive=False, tree=tree)
                show(f"idle{label}: links connected, tank still, no camera, window {args.window:.0f} s", r)
            drain.cancel()
    finally:
        if ctx_sub is not None:
            ctx_sub.close(0)
        await peers.stop()


async def _drain(sub) -> None:
    while True:
        await sub.recv_multipart()


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        asyncio.run(child(json.loads(sys.argv[2]), float(sys.argv[3]), sys.argv[4] == "1", sys.argv[5]))
        sys.exit(0)
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--window", type=float, default=20.0, help="measured window, s (default 20)")
    p.add_argument("--runs", type=int, default=3, help="side-by-side runs (default 3)")
    p.add_argument("--no-idle", action="store_true", help="skip the idle agent run")
    p.add_argument("--before", help="another checkout (with this script copied into its scripts/) whose agent "
                                    "runs in turn with this one, each beside the SDK (before/after)")
    asyncio.run(main(p.parse_args()))
