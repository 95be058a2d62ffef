"""The motor controller's own thread: duty writes and feedback reads off the control thread.

:class:`MotorWorker` owns the serial exchange with one supervised motor
controller. The control thread only posts the newest duty (:meth:`post`, never
blocks: latest value wins, an older duty not yet written is dropped) and reads
what the worker published (:attr:`acked`, :attr:`feedback`). The worker writes a
posted duty before anything else, and between duties reads the feedback set at
``feedback_hz``. A silent controller therefore costs the control thread nothing:
its timeouts and retries run here, and when the supervisor declares it lost the
driver is closed here too (agent/supervisor.py drops it inside the failed call).

Bounds (docs/architecture.md, "Hardware"): a posted duty waits at most for the
transaction in progress: a serial controller's feedback set is read with the
duty slipped in between its transactions (drivers/serialport.py,
``read_feedback(between)``), so not for a whole set (5 RoboClaw transactions,
~17 ms of wire time at 38400 baud with the reply latency) but for one (~4 ms at most); with a silent
controller, for the driver's reply timeout times its retries.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from agent.health import LOST
from agent.supervisor import Supervised
from drivers.base import MotorController, MotorFeedback
from drivers.serialport import SerialMotorController

log = logging.getLogger(__name__)

Duty = tuple[float, float]


class MotorWorker:
    """One thread per motor controller; see the module docstring.

    Args:
        motor: the supervised controller; its calls never raise.
        feedback_hz: feedback sets read per second (a set is several transactions).
        on_feedback: called on the worker thread with each new feedback (status logging).
    """

    def __init__(self, motor: Supervised[MotorController], *, feedback_hz: float,
                 on_feedback: Callable[[MotorFeedback], None] | None = None) -> None:
        self.motor = motor
        self._period = 1.0 / feedback_hz
        self._on_feedback = on_feedback
        self._cond = threading.Condition()
        self._pending: Duty | None = None     # newest posted duty not yet written
        self._posted = 0                      # duties posted so far
        self._done = 0                        # the _posted count of the last duty written (or dropped)
        self._stop = False
        self.acked = True                     # the last duty write was acknowledged
        self.feedback: MotorFeedback | None = None
        self.writes = 0
        self._thread = threading.Thread(target=self._run, name="motor", daemon=True)

    def start(self) -> None:
        """Start the thread (once)."""
        self._thread.start()

    def post(self, left: float, right: float) -> bool:
        """Queue (left, right) duty for the worker (latest wins); returns whether the last write was acknowledged.

        Never blocks on the controller. False while the controller is lost.
        """
        with self._cond:
            self._pending = (left, right)
            self._posted += 1
            self._cond.notify_all()
        return self.acked and self.motor.state != LOST

    def settle(self, timeout_s: float) -> bool:
        """Wait until every duty posted so far was written; True when done in time and the last was acknowledged."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while self._done < self._posted and not self._stop:
                left = deadline - time.monotonic()
                if left <= 0 or not self._thread.is_alive():
                    return False
                self._cond.wait(left)
            return self._done >= self._posted and self.acked

    def close(self, timeout_s: float = 3.0) -> None:
        """Stop the thread (a write in progress finishes). Idempotent."""
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout_s)

    # ------------------------------------------------------------------ the thread
    def _run(self) -> None:
        next_feedback = time.monotonic()
        while True:
            with self._cond:
                while not self._stop and self._pending is None and time.monotonic() < next_feedback:
                    self._cond.wait(max(0.0, next_feedback - time.monotonic()))
                if self._stop:
                    return
                duty, self._pending, serial = self._pending, None, self._posted
            if duty is not None:
                self._write(duty, serial)
                continue
            next_feedback = time.monotonic() + self._period
            self._read()

    def _write(self, duty: Duty, serial: int) -> None:
        ok = bool(self.motor.call(lambda d: (d.set_duty(duty[0], duty[1]), True)[1], default=False))
        with self._cond:
            self.acked = ok
            self.writes += 1
            self._done = max(self._done, serial)
            self._cond.notify_all()

    def _read(self) -> None:
        taken: list[int] = []

        def between() -> Duty | None:     # a duty posted meanwhile goes out before the next transaction
            with self._cond:
                duty, self._pending = self._pending, None
                if duty is not None:
                    taken.append(self._posted)
            return duty

        fb = self.motor.call(lambda d: d.read_feedback(between) if isinstance(d, SerialMotorController)
                             else d.read_feedback())
        if taken:       # written inside the set: acknowledged when the whole read succeeded
            with self._cond:
                self.acked = fb is not None
                self.writes += len(taken)
                self._done = max(self._done, taken[-1])
                self._cond.notify_all()
        self.feedback = fb      # None while lost or failing: never a stale value
        if fb is not None and self._on_feedback is not None:
            self._on_feedback(fb)
