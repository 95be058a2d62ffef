"""CPU time spent inside the in-process emulators, so a benchmark can show it apart from the agent's.

The I2C chips' emulation (drivers/emulators/i2c.py and its chips) runs inline on the agent's
``i2c-*`` device thread, the GPIO chip's (drivers/emulators/gpio.py) on the ``estop-input`` thread
and the test pattern (drivers/emulators/camera.py) is drawn on the capture thread: those threads'
CPU is partly the emulators'. Each emulator adds the
``time.thread_time()`` it spent per call (a transaction, a frame) to its own
:class:`CpuMeter` and to the process-wide one of its kind in :data:`TOTALS`, which
scripts/bench_side.py reads at the start and end of its window. Thread CPU time does not
advance while a thread sleeps, and the I2C bus stops its meter around its wire-time sleep anyway:
waiting is not counted.

Cost: two ``thread_time()`` calls (clock_gettime(CLOCK_THREAD_CPUTIME_ID)) and a lock per
transaction or frame.
"""

from __future__ import annotations

import threading
import time

__all__ = ["CpuMeter", "MeteredLock", "TOTALS", "I2C", "PATTERN", "GPIO", "totals"]

#: Kinds of :data:`TOTALS`: the emulated I2C bus and its chips; the camera test pattern; the GPIO
#: chip of a ``sim://`` e-stop input (its reads and waits run on the ``estop-input`` thread).
I2C = "i2c"
PATTERN = "pattern"
GPIO = "gpio"


class CpuMeter:
    """Thread CPU time, s, and calls measured; thread-safe. ``add`` also adds to ``parent`` when given."""

    __slots__ = ("cpu_s", "calls", "_lock", "_parent")

    def __init__(self, parent: CpuMeter | None = None) -> None:
        self.cpu_s = 0.0
        self.calls = 0
        self._lock = threading.Lock()
        self._parent = parent

    def add(self, cpu_s: float, calls: int = 1) -> None:
        """Count ``cpu_s`` seconds of thread CPU time over ``calls`` calls."""
        with self._lock:
            self.cpu_s += cpu_s
            self.calls += calls
        if self._parent is not None:
            self._parent.add(cpu_s, calls)

    def since(self, start: float) -> float:
        """Add the calling thread's CPU time since ``start`` (a ``time.thread_time()`` reading); returns now's."""
        now = time.thread_time()
        self.add(now - start)
        return now


class MeteredLock:
    """A lock whose holder's thread CPU time goes to ``meter`` (one call per hold); a context manager.

    :meth:`pause` and :meth:`resume` (by the holder) leave a stretch out, e.g. a wire-time sleep.
    """

    __slots__ = ("_lock", "meter", "_start")

    def __init__(self, meter: CpuMeter) -> None:
        self._lock = threading.Lock()
        self.meter = meter
        self._start = 0.0       # thread_time() when the holder took it or resumed

    def __enter__(self) -> MeteredLock:
        self._lock.acquire()
        self._start = time.thread_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.meter.since(self._start)
        self._lock.release()

    def pause(self) -> None:
        """Holder only: count the CPU time so far, and none until :meth:`resume`."""
        self.meter.add(time.thread_time() - self._start, 0)

    def resume(self) -> None:
        """Holder only: count again from now."""
        self._start = time.thread_time()


#: Process-wide totals per kind of emulator (every instance adds to its kind's).
TOTALS: dict[str, CpuMeter] = {I2C: CpuMeter(), PATTERN: CpuMeter(), GPIO: CpuMeter()}


def totals() -> dict[str, float]:
    """Kind -> thread CPU time, s, every emulator of that kind spent in this process so far."""
    return {kind: meter.cpu_s for kind, meter in TOTALS.items()}
