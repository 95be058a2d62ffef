"""Best-effort threads give way to the control path: a higher nice value per thread (Linux).

Under a CPU quota (a Pi core, a cgroup) every thread of the process shares one budget; when
video encoding, capture and its supervision are runnable beside the control, motor and event
loop threads, the scheduler should pick the latter first. Linux keeps a nice value per thread
(``setpriority(PRIO_PROCESS, tid, ...)``, man 2 setpriority, "NOTES": a thread is a process
there); raising it needs no privilege. Elsewhere, or when refused, nothing changes.
"""

from __future__ import annotations

import logging
import os
import threading

log = logging.getLogger(__name__)

#: How much a background thread's nice value is raised above the process's (Linux range -20..19).
BACKGROUND_NICE_STEP = 10


def background_thread() -> None:
    """Raise the calling thread's nice value by BACKGROUND_NICE_STEP (at most 19); never raises."""
    try:
        tid = threading.get_native_id()
        nice = min(19, os.getpriority(os.PRIO_PROCESS, tid) + BACKGROUND_NICE_STEP)
        os.setpriority(os.PRIO_PROCESS, tid, nice)
    except (AttributeError, OSError) as err:  # not Linux, or refused: the thread keeps its priority
        log.debug("thread %s keeps its priority: %s", threading.current_thread().name, err)
