"""The agent side of scripts/bench_pi.py (runs in the quota-limited child process).

Starts the agent on the shipped simulated tank with ARTEX, Sim2Bot and
robot_msg pointed at the parent's peers, records every duty the RoboClaw
emulator applies (monotonic time: comparable across processes on Linux) and
the tick times from the snapshot ring, then writes the figures as JSON.
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import os
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

from agent.app import Agent  # noqa: E402
from agent.config import AgentConfig  # noqa: E402
from bench_pi import CGROUP_V1, CGROUP_V2  # noqa: E402  (where the cgroup trees are mounted)
from bench_pi_gaps import TickProbe, explain_gaps  # noqa: E402
from bench_pi_stages import StageProbe  # noqa: E402
from drivers.serialport import transfer_s  # noqa: E402

WARMUP_S = 3.0
#: Sleep of the event loop lag probe, s.
LAG_PROBE_S = 0.05
#: Libraries whose import weighs in RSS (requests and websocket-client come only with the test extra:
#: python-socketio[client]; the engine.io package imports them when they are installed).
HEAVY = ("cv2", "numpy", "zmq", "robot_msg", "socketio", "aiohttp", "requests", "websocket", "ahrs")
#: RoboClaw duty packet (cmd 34): address, command, 2 x int16, CRC16.
DUTY_PACKET_BYTES = 8


def config(ports: dict, video: bool = True) -> AgentConfig:
    """The shipped params.json (its camera, 640x480 at 15 fps, and ARTEX send period) with the three
    protocol adapters on, pointed at the parent's peers (the web console off); ``video`` False: no
    camera configured (A/B of the video path's share); ``ports["motor"]``: the motor port (the pty of
    an emulator in a process of its own) instead of the simulated tank's."""
    cfg = json.loads((ROOT / "config" / "params.json").read_text())
    cfg.update(server="http://127.0.0.1", port=ports["artex"], telem_can=True, video_can=True,
               logger_level="warning")
    if not video:
        cfg["video_can"] = False
        cfg["drivers"]["cameras"] = []
    cfg["console"] = {**cfg.get("console", {}), "enabled": False}    # its fixed port may be taken here
    if ports.get("motor"):              # the emulator in a process of its own: its pty (bench_pi_emulator.py)
        cfg["drivers"]["motor"]["port"] = ports["motor"]
    cfg["sim2bot"] = {**cfg.get("sim2bot", {}), "enabled": True, "url": ports["sim2bot"],
                      "reconnect_delay_s": 0.1, "reconnect_delay_max_s": 0.5}
    tcp = "tcp://127.0.0.1:{}".format
    cfg["robot_msg"] = {"enabled": True, "state_hz": 50, "state": {"address": tcp(ports["state"])},
                        "command": {"address": tcp(ports["command"])}, "action": {"address": tcp(ports["action"])}}
    return AgentConfig.model_validate(cfg)


class DutyEvents:
    """(monotonic s, left, right) of every duty change the emulated controller applies."""

    def __init__(self, physics) -> None:
        self.events: list[tuple[float, float, float]] = []
        self._lock = threading.Lock()
        self._last = (0.0, 0.0)
        original = physics.set_duty

        def set_duty(left: float, right: float) -> None:
            original(left, right)
            if (left, right) != self._last:
                self._last = (left, right)
                with self._lock:
                    self.events.append((time.monotonic(), left, right))

        physics.set_duty = set_duty


class Submits:
    """(monotonic s, source) of every non-stop command handed to ControlLoop.submit: where a command's
    time goes, adapter side (bench-only: Front.submit is wrapped in this child process)."""

    def __init__(self) -> None:
        from agent.commands import Stop
        from agent.control.front import Front

        self.events: list[tuple[float, str]] = []
        original = Front.submit       # ControlLoop.submit is its Front's, bound when the loop is built

        def submit(front, source, command) -> None:
            if not isinstance(command, Stop):
                self.events.append((time.monotonic(), source))
            original(front, source, command)

        Front.submit = submit


def _rss_mib(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return 0.0


def thread_cpu_s() -> dict[str, tuple[float, int]]:
    """(CPU seconds (user + system), voluntary context switches: wake-ups) per thread name, from
    /proc/self/task/<tid>/stat and status; threads Python did not start (ZeroMQ's I/O thread,
    OpenCV's pool) under their kernel name."""
    tick = os.sysconf("SC_CLK_TCK")
    names = {t.native_id: t.name for t in threading.enumerate()}
    out: dict[str, tuple[float, int]] = {}
    for task in Path("/proc/self/task").iterdir():
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
            status = (task / "status").read_text()
            name = names.get(int(task.name)) or "[" + (task / "comm").read_text().strip() + "]"
        except OSError:
            continue
        wakeups = next((int(line.split()[1]) for line in status.splitlines()
                        if line.startswith("voluntary_ctxt_switches")), 0)
        cpu, n = out.get(name, (0.0, 0))
        out[name] = (cpu + (int(fields[11]) + int(fields[12])) / tick, n + wakeups)
    return out


def thread_figures(before: dict, after: dict, window: float) -> list[tuple[float, float, str]]:
    """(CPU % of one core, wake-ups per second, name) per thread over the window, busiest first."""
    rows = []
    for name, (cpu, wakeups) in after.items():
        cpu0, wakeups0 = before.get(name, (0.0, 0))
        rows.append((100 * (cpu - cpu0) / window, (wakeups - wakeups0) / window, name))
    return sorted(rows, reverse=True)


def cpu_cgroup(pid: int | str = "self") -> tuple[Path, bool] | None:
    """The directory of ``pid``'s CPU-controller cgroup and whether it is cgroup v1 (``cpu``), else
    the v2 unified tree's (hybrid hosts list both: v1's ``cpu`` wins), from ``/proc/<pid>/cgroup``;
    None without either."""
    found = None
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "cpu" in controllers.split(","):
            return CGROUP_V1 / path.lstrip("/"), True
        if controllers == "":
            found = (CGROUP_V2 / path.lstrip("/"), False)
    return found


def throttling() -> dict[str, int]:
    """The quota's counters for this process's cgroup (cpu.stat: nr_periods, nr_throttled, throttled
    time in ns; v1 ``throttled_time``, v2 ``throttled_usec`` given in ns), or {} without one."""
    group = cpu_cgroup()
    if group is None or not (group[0] / "cpu.stat").exists():
        return {}
    stat = dict(entry.split() for entry in (group[0] / "cpu.stat").read_text().splitlines())
    if "nr_throttled" not in stat:
        return {}
    ns = int(stat["throttled_time"]) if "throttled_time" in stat else 1000 * int(stat.get("throttled_usec", 0))
    return {"periods": int(stat["nr_periods"]), "throttled": int(stat["nr_throttled"]), "ns": ns}


def emulator_out_of_quota() -> str:
    """Move the motor emulator's thread (on a real tank the RoboClaw is another chip) into the bench
    parent's cgroup, outside the quota: cgroup v1 places single threads (``tasks``); v2 moves whole
    processes only (without threaded mode), so there it stays in. Returns what was done."""
    tids = [t.native_id for t in threading.enumerate() if t.name.endswith("-pty")]
    mine, parents = cpu_cgroup("self"), cpu_cgroup(os.getppid())
    if mine is None or parents is None or not mine[1]:
        return "inside the quota (cgroup v2 or no cpu controller: threads move only with their process)"
    if mine == parents:
        return "outside the quota (there is none)"
    try:
        for tid in tids:
            (parents[0] / "tasks").write_text(str(tid))
    except OSError as err:
        return f"inside the quota ({err})"
    return f"outside the quota ({len(tids)} thread{'s' * (len(tids) != 1)} moved to the parent's cgroup)"


def tick_figures(times: list[float], rate_hz: float, window_s: float, rest_at: set[float] = frozenset()) -> dict:
    """Ticks on schedule per second (rate_hz less the slots missed: a gap of more than 1.5 periods
    misses round(gap / period) - 1 slots), ticks per second, worst gap and gaps over 30 ms. A gap after a
    tick that left the loop at rest (its time in ``rest_at``: agent/control/rest.py) is a rest slot: its
    time is left out of the span and of the gaps, and counted in ``rest_s``."""
    period = 1.0 / rate_hz
    pairs = list(zip(times, times[1:]))
    gaps = [b - a for a, b in pairs if a not in rest_at]
    rest = sum(b - a for a, b in pairs if a in rest_at)
    missed = sum(round(g / period) - 1 for g in gaps if g > 1.5 * period)
    span = max(times[-1] - times[0] - rest, period)
    return {"on_schedule_hz": rate_hz * (1.0 - missed * period / span), "ticks_hz": len(times) / window_s,
            "worst_gap_ms": 1e3 * max(gaps, default=0.0), "gaps_over_30": sum(g > 0.030 for g in gaps),
            "rest_s": rest}


class GcPauses:
    """Duration of every garbage collection per generation: wall time and the collecting thread's CPU
    time, s (gc.callbacks; bench-only). Wall far above CPU: the process was throttled (or the
    thread preempted) during the collection, not a long collection."""

    def __init__(self) -> None:
        self.pauses: dict[int, list[tuple[float, float, int]]] = {0: [], 1: [], 2: []}
        self.spans: list[tuple[float, float, float, int]] = []     # (start, wall, CPU, generation), s
        self._start = (0.0, 0.0, 0.0)
        gc.callbacks.append(self._note)

    def _note(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._start = (time.perf_counter(), time.thread_time(), time.monotonic())
        else:
            wall, cpu, mono = self._start
            wall, cpu = time.perf_counter() - wall, time.thread_time() - cpu
            self.pauses[info["generation"]].append((wall, cpu, info["collected"]))
            self.spans.append((mono, wall, cpu, info["generation"]))

    def figures(self) -> dict:
        return {str(g): [len(p), 1e3 * max((w for w, _, _ in p), default=0.0)] for g, p in self.pauses.items()}

    def longest(self, n: int = 5) -> list[tuple[float, float, int, int]]:
        """The ``n`` longest collections: (wall ms, CPU ms, generation, objects freed), longest first."""
        return sorted(((1e3 * w, 1e3 * c, g, k) for g, p in self.pauses.items() for w, c, k in p), reverse=True)[:n]


async def loop_lag(lags: list[tuple[float, float]], stop: asyncio.Event) -> None:
    """(when, how late) a 50 ms sleep on the event loop wakes, s (the loop busy with adapters, video,
    telemetry); 20 wake-ups a second: a denser probe costs the quota it measures."""
    while not stop.is_set():
        t = time.monotonic()
        await asyncio.sleep(LAG_PROBE_S)
        now = time.monotonic()
        lags.append((now, now - t - LAG_PROBE_S))


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values) or [0.0]
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


async def tick_times(agent: Agent, seconds: float) -> tuple[list[float], list[tuple[float, float]]]:
    """Every tick's time over ``seconds`` from the snapshot ring, and the event loop's lags meanwhile
    (when, lag), s."""
    times: list[float] = []
    lags: list[tuple[float, float]] = []
    stop = asyncio.Event()
    lag_task = asyncio.create_task(loop_lag(lags, stop))
    seq = agent.control.snapshot().seq
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        await asyncio.sleep(0.5)
        got = agent.control.samples_since(seq, limit=512)
        if got:
            seq = got[-1].seq
            times.extend(s.t_mono_s for s in got)
    stop.set()
    await lag_task
    return times, lags


async def run_agent(ports: dict, seconds: float, out: str, switch_interval: float | None,
                    gc_freeze: bool = True, video: bool = True, emulator_outside: bool = True) -> None:
    logging.basicConfig(level=logging.ERROR)
    cfg = config(ports, video)
    submits = Submits()
    stages = StageProbe()
    stages.watch_zmq()
    async with Agent(cfg) as agent:
        if switch_interval is not None:
            sys.setswitchinterval(switch_interval)
        duty = DutyEvents(agent.physics)
        stages.attach(agent)
        ticks = TickProbe()
        ticks.attach(agent)
        emulator_quota = (emulator_out_of_quota() if emulator_outside else "inside the quota") \
            if not ports.get("motor") else "in a process of its own (bench_pi_emulator.py), outside the quota"
        await asyncio.sleep(WARMUP_S)
        if not gc_freeze:
            gc.unfreeze()       # A/B: the agent's startup objects (frozen 1 s after start) collected again
        pauses = GcPauses()     # the window's collections (not the startup freeze's, 1 s after start)
        cpu0, t0, threads0, quota0 = os.times(), time.monotonic(), thread_cpu_s(), throttling()
        times, lags = await tick_times(agent, seconds)
        lag = [x for _, x in lags]
        cpu1, window, threads1, quota1 = os.times(), time.monotonic() - t0, thread_cpu_s(), throttling()
        threads = thread_figures(threads0, threads1, window)
        spans: list[tuple[float, float]] = []
        motor = cfg.drivers.motor
        result = {
            "window_s": window, "rate_hz": cfg.control.rate_hz, **tick_figures(times, cfg.control.rate_hz, window, ticks.rest_at),
            "cpu_pct": 100 * (cpu1.user + cpu1.system - cpu0.user - cpu0.system) / window,
            "rss_mib": _rss_mib("VmRSS"), "rss_peak_mib": _rss_mib("VmHWM"),
            "switch_interval_ms": sys.getswitchinterval() * 1e3,
            "baud": motor.baud, "duty_wire_s": transfer_s(DUTY_PACKET_BYTES, motor.baud),
            "duty_events": duty.events, "submits": submits.events, "stages": stages.events, "gc_pauses": pauses.figures(), "gc_frozen": gc.get_freeze_count(),
            "loop_lag_ms": [1e3 * _pct(lag, 50), 1e3 * _pct(lag, 99), 1e3 * max(lag, default=0.0)],
            "gaps": explain_gaps([t for t in ticks.ticks if t[0] >= t0], pauses.spans, lags,
                                 period_s=1.0 / cfg.control.rate_hz, spans=spans, rest_starts=ticks.rest_starts),
            "gap_spans": spans,
            "tids": {str(t.native_id): t.name for t in threading.enumerate()},
            "ticks": ticks.ticks,
            "gc_longest": pauses.longest(),
            "throttling": {k: quota1[k] - quota0[k] for k in quota1} if quota0 and quota1 else {},
            "heavy": [m for m in HEAVY if m in sys.modules],
            "emulator_quota": emulator_quota,
            "emulator_cpu_pct": sum(cpu for cpu, _, name in threads if name.endswith("-pty")),
            "threads": threads,
        }
    Path(out).write_text(json.dumps(result))

