"""Thread priorities: best-effort threads give way to the control path, and the control thread goes first (Linux).

Under a CPU quota (a Pi core, a cgroup) every thread of the process shares one budget; when
video encoding, capture and its supervision are runnable beside the control, motor and event
loop threads, the scheduler should pick the latter first. Linux keeps a nice value per thread
(``setpriority(PRIO_PROCESS, tid, ...)``, man 2 setpriority, "NOTES": a thread is a process
there); raising it needs no privilege (:func:`background_thread`). Elsewhere, or when refused,
nothing changes.

:func:`control_thread` lowers the control thread's nice value by :data:`CONTROL_NICE_STEP`, so a
busy machine (other processes on its cores) delays its ticks less: a thread runnable but not run
was the cause of most ticks over 30 ms apart in scripts/bench_pi.py (its gap lines). Lowering a
nice value needs CAP_SYS_NICE or an ``RLIMIT_NICE`` that allows it (systemd ``LimitNICE=``,
systemd/robot-agent.service); without either the thread keeps the process's priority.
"""

from __future__ import annotations

import logging
import os
import threading

log = logging.getLogger(__name__)

#: How much a background thread's nice value is raised above the process's (Linux range -20..19).
BACKGROUND_NICE_STEP = 10
#: How much the control thread's nice value is lowered below the process's (:func:`control_thread`).
CONTROL_NICE_STEP = 10
#: Environment variable overriding BACKGROUND_NICE_STEP (0..19; 0 keeps background threads at the
#: process's priority: the test suite sets it, since its parallel workers are not one robot sharing
#: one budget and a niced camera in one worker starves behind another worker's work).
NICE_STEP_ENV = "ROBOT_AGENT_BACKGROUND_NICE"


def nice_step() -> int:
    """The step in force: ``$ROBOT_AGENT_BACKGROUND_NICE`` when it is an integer 0..19, else BACKGROUND_NICE_STEP."""
    value = os.environ.get(NICE_STEP_ENV, "")
    if value.strip().isdigit() and int(value) <= 19:
        return int(value)
    if value:
        log.warning("%s=%r is not an integer 0..19; background threads use %d", NICE_STEP_ENV, value[:20],
                    BACKGROUND_NICE_STEP)
    return BACKGROUND_NICE_STEP


def _renice(delta: int) -> bool:
    """Add ``delta`` to the calling thread's nice value (kept in -20..19); True when done. Never raises."""
    try:
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, min(19, max(-20, os.getpriority(os.PRIO_PROCESS, tid) + delta)))
        return True
    except (AttributeError, OSError) as err:  # not Linux, or refused: the thread keeps its priority
        log.debug("thread %s keeps its priority: %s", threading.current_thread().name, err)
        return False


def background_thread() -> None:
    """Raise the calling thread's nice value by :func:`nice_step` (at most 19); never raises."""
    step = nice_step()
    if step:
        _renice(step)


def control_thread() -> bool:
    """Lower the calling thread's nice value by :data:`CONTROL_NICE_STEP` (at least -20) where the
    process may (CAP_SYS_NICE or ``RLIMIT_NICE``); True when done. Never raises. Not done when
    ``$ROBOT_AGENT_BACKGROUND_NICE`` is 0 (the test suite's parallel workers: no thread of one worker
    ahead of another's)."""
    return nice_step() != 0 and _renice(-CONTROL_NICE_STEP)
