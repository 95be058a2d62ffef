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
are listed beside it.
"""

from __future__ import annotations

import time
from pathlib import Path

SCHEDSTAT = Path("/proc/thread-self/schedstat")
#: Gaps longer than this are explained, s.
GAP_S = 0.030


def _schedstat() -> tuple[int, int]:
    """(ns on the CPU, ns waiting on a run queue) of the calling thread; (0, 0) where unreadable."""
    try:
        run, wait, _ = SCHEDSTAT.read_text().split()
        return int(run), int(wait)
    except (OSError, ValueError):
        return 0, 0


class TickProbe:
    """(start, end, CPU ns at start, run-queue ns at start, run-queue ns at end) of every control tick."""

    def __init__(self) -> None:
        self.ticks: list[tuple[float, float, int, int, int]] = []

    def attach(self, agent) -> None:
        sched = agent.control._scheduler
        inner = sched._tick

        def tick(now):
            t0 = time.monotonic()
            run0, wait0 = _schedstat()
            try:
                return inner(now)
            finally:
                self.ticks.append((t0, time.monotonic(), run0, wait0, _schedstat()[1]))

        sched._tick = tick


def explain_gaps(ticks: list, gcs: list, lags: list, gap_s: float = GAP_S, period_s: float = 0.02) -> list[str]:
    """One line per gap over ``gap_s`` between tick starts: its parts (see the module docstring).

    ``gcs``: (start, wall s, CPU s, generation) of each collection; ``lags``: (time the probe woke,
    lag s) of the event loop's lag probe.
    """
    lines = []
    for (a0, a1, _, _, a_wait1), (b0, _, _, b_wait0, _) in zip(ticks, ticks[1:]):
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
