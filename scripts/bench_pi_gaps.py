"""What a late control tick waited for: the context of every gap over 30 ms in a bench_pi run (bench-only).

The agent's child wraps the control scheduler's tick (an instance attribute) and stamps, at each
tick's start and end, the monotonic time and the control thread's scheduler figures from
``/proc/thread-self/schedstat`` (man 5 proc: time on the CPU, time waiting on a run queue, ns). A
gap between two tick starts is then split into

- ``run queue``: the control thread was runnable and the kernel ran something else (the machine
  or the CPU quota was busy: not the agent's doing);
- ``previous tick``: the tick before the gap overran its slot (its own duration);
- the rest: the thread slept past its slot: its timed wait woke late, or it waited for the GIL
  (a thread waiting for the GIL sleeps on a condition variable: it shows as sleep, not as run
  queue), e.g. behind a garbage collection or a long C call of another thread.

Garbage collections (wall and CPU, any thread) and event loop lag samples that overlap the gap
are listed beside it, and, from :class:`ThreadSampler` (the parent reads the agent's
``/proc/PID/task/*/schedstat`` every 5 ms from its own process, outside the agent's GIL), the
threads that ran or waited on a run queue during the gap: a thread that holds the GIL and is
preempted (a niced one, or the machine busy) keeps every other thread waiting asleep.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

SCHEDSTAT = Path("/proc/thread-self/schedstat")
#: Gaps longer than this are explained, s ($BENCH_PI_GAP_MS overrides it: a shorter one shows more of them).
GAP_S = float(os.environ.get("BENCH_PI_GAP_MS", "30")) / 1e3


def _schedstat() -> tuple[int, int]:
    """(ns on the CPU, ns waiting on a run queue) of the calling thread; (0, 0) where unreadable."""
    try:
        run, wait, _ = SCHEDSTAT.read_text().split()
        return int(run), int(wait)
    except (OSError, ValueError):
        return 0, 0


class TickProbe:
    """(start, end, CPU ns at start, run-queue ns at start, run-queue ns at end) of every control tick;
    ``rest_at``: the tick times (the scheduler's ``now``) after which the loop rested (its next slot a
    rest period away: agent/control/rest.py; a tree without the rest has none)."""

    def __init__(self) -> None:
        self.ticks: list[tuple[float, float, int, int, int]] = []
        self.rest_at: set[float] = set()
        self.rest_starts: set[float] = set()     # the same ticks by their monotonic start

    def attach(self, agent) -> None:
        sched = agent.control._scheduler
        inner = sched._tick
        resting = getattr(sched, "resting", lambda: False)

        def tick(now):
            t0 = time.monotonic()
            run0, wait0 = _schedstat()
            try:
                return inner(now)
            finally:
                self.ticks.append((t0, time.monotonic(), run0, wait0, _schedstat()[1]))
                if resting():
                    self.rest_at.add(now)
                    self.rest_starts.add(t0)

        sched._tick = tick


def explain_gaps(ticks: list, gcs: list, lags: list, gap_s: float = GAP_S, period_s: float = 0.02,
                 spans: list | None = None, rest_starts: set[float] = frozenset()) -> list[str]:
    """One line per gap over ``gap_s`` between tick starts: its parts (see the module docstring); a gap after
    a tick that left the loop at rest (its start in ``rest_starts``) is a rest slot, not a gap.

    ``gcs``: (start, wall s, CPU s, generation) of each collection; ``lags``: (time the probe woke,
    lag s) of the event loop's lag probe; ``spans`` (when given) gets (start, end) of each gap, s.
    """
    spans = [] if spans is None else spans
    lines = []
    for (a0, a1, _, _, a_wait1), (b0, _, _, b_wait0, _) in zip(ticks, ticks[1:]):
        if a0 in rest_starts:
            continue
        if b0 - a0 > gap_s:
            spans.append((a0, b0))
        gap = b0 - a0
        if gap <= gap_s:
            continue
        queued = (b_wait0 - a_wait1) / 1e9
        overlapping = [f"gen{g} {w * 1e3:.1f} ms wall / {c * 1e3:.1f} CPU" for t, w, c, g in gcs
                       if t < b0 and t + w > a0]
        lagged = [f"{lag * 1e3:.1f}" for t, lag in lags if t - lag - 0.05 < b0 and t > a0 and lag > 0.005]
        late = gap - period_s
        lines.append(f"gap {gap * 1e3:.1f} ms ({late * 1e3:.1f} ms over the period): previous tick "
                     f"{1e3 * (a1 - a0):.2f} ms, the control thread on a run queue {queued * 1e3:.2f} ms (the kernel "
                     f"ran others), the rest {1e3 * (late - queued):.2f} ms asleep past its slot or waiting for the "
                     f"GIL; gc meanwhile: "
                     f"{', '.join(overlapping) or 'none'}; event loop lag over 5 ms ending in it: "
                     f"{', '.join(lagged) or 'none'}")
    return lines


class ThreadSampler:
    """Every ``period_s``, (monotonic time, {thread name: (CPU ns, run-queue ns)}) of process ``pid``'s
    threads, read from this process (bench-only, in bench_pi's parent) until :meth:`stop`."""

    def __init__(self, pid: int, period_s: float = 0.005) -> None:
        self.samples: list[tuple[float, dict[str, tuple[int, int]]]] = []
        self._pid, self._period = pid, period_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="thread-sampler", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        tasks = Path(f"/proc/{self._pid}/task")
        while not self._stop.wait(self._period):
            row: dict[str, tuple[int, int]] = {}
            try:
                for task in tasks.iterdir():
                    try:
                        name = (task / "comm").read_text().strip() + f"/{task.name}"
                        run, wait, _ = (task / "schedstat").read_text().split()
                    except (OSError, ValueError):
                        continue
                    row[name] = (int(run), int(wait))
            except OSError:
                return
            self.samples.append((time.monotonic(), row))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def during(self, a: float, b: float, names: dict[str, str], top: int = 3) -> str:
        """The threads that ran most and waited most on a run queue between ``a`` and ``b`` (ms);
        ``names``: thread id -> the agent's name for it."""
        before = next((row for t, row in reversed(self.samples) if t <= a), None)
        after = next((row for t, row in self.samples if t >= b), None)
        if before is None or after is None:
            return "no samples"
        def name(key: str) -> str:
            comm, tid = key.rsplit("/", 1)
            return names.get(tid, comm)

        ran = sorted(((after[n][0] - before[n][0]) / 1e6, name(n)) for n in after if n in before)[-top:]
        queued = sorted(((after[n][1] - before[n][1]) / 1e6, name(n)) for n in after if n in before)[-top:]
        return ("ran " + ", ".join(f"{n} {ms:.1f}" for ms, n in reversed(ran)) + "; queued "
                + ", ".join(f"{n} {ms:.1f}" for ms, n in reversed(queued)))
