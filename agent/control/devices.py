"""The control loop's device I/O: the only place it writes to or reads from the hardware.

:class:`HardwarePort` is what the loop needs from agent.devices.hardware.Hardware
(docs/architecture.md, "Hardware"). :class:`DeviceIO` does one tick's exchange:
the duty first, the servo pulses only when they changed, then the readings the
pure tick (agent.control.tick) folds into the snapshot; and the zero writes of
a failed tick and of closing. None of it waits for a device on the control
thread: the duty is posted to the motor's own thread and the readings are the
newest its threads published. Only a caller that steps time itself
(``ControlLoop.tick``) waits, bounded, for the duty to be written.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Protocol

from agent.control.state import Pair
from agent.control.tick import Readings
from agent.model import DeviceHealth, ImuSample, PowerSample
from drivers.base import MotorFeedback

log = logging.getLogger(__name__)

#: Pause between two attempts of the closing zero write, s.
ZERO_RETRY_S = 0.05
#: Longest wait of a self-stepped tick (``ControlLoop.tick``) for its duty to be written, s.
SETTLE_TIMEOUT_S = 2.0


class HardwarePort(Protocol):
    """What the loop needs from agent.devices.hardware.Hardware (docs/architecture.md, "Hardware")."""

    def set_duty(self, left: float, right: float, *, force: bool = False) -> bool: ...
    def settle_motor(self, timeout_s: float) -> bool: ...
    def has_motor(self) -> bool: ...
    def read_motor(self) -> MotorFeedback | None: ...
    def read_motor_timed(self) -> tuple[MotorFeedback | None, tuple[float, float] | None]: ...
    def set_servo_pulses(self, pulses: dict[int, float | None]) -> None: ...
    def latest_imu(self) -> ImuSample | None: ...
    def latest_power(self) -> PowerSample | None: ...
    def calibrate_imu(self) -> concurrent.futures.Future: ...
    def health(self) -> tuple[DeviceHealth, ...]: ...
    def faults(self, health: tuple[DeviceHealth, ...] | None = None) -> tuple[str, ...]: ...
    def motor_resting(self) -> bool: ...
    def on_rest_end(self, listener: Callable[[], None]) -> None: ...


class DeviceIO:
    """One tick's writes and reads; control thread only (or the caller of ``ControlLoop.tick``).

    Args:
        hardware: the supervised devices; their methods never raise.
        wall: Unix clock, s, for ``Snapshot.t_unix_s``.
    """

    def __init__(self, hardware: HardwarePort, wall: Callable[[], float]) -> None:
        self._hw = hardware
        self._wall = wall
        self._last_pulses: Mapping[int, float] | None = None

    def write_duty(self, duty: Pair, *, wait: bool = False) -> bool:
        """Post (left, right) duty in [-1, 1] to the motor's thread; True while the controller acknowledges.

        Without ``wait`` the answer is the last write's (the control thread never blocks on the
        line); with ``wait`` (self-stepped ticks) this duty's, waiting up to ``SETTLE_TIMEOUT_S``.
        """
        ok = self._hw.set_duty(duty[0], duty[1])
        return self._hw.settle_motor(SETTLE_TIMEOUT_S) if wait else ok

    def write_pulses(self, pulses: Mapping[int, float]) -> None:
        """Servo channel -> pulse, us; sent only when different from the last pulses sent."""
        if pulses != self._last_pulses:
            self._hw.set_servo_pulses(dict(pulses))
            self._last_pulses = pulses

    def read(self) -> Readings:
        """Motor feedback (after the duty write, so it never delays the duty), sensors, health, wall time,
        the motor line's rest."""
        feedback, span = self._hw.read_motor_timed()
        devices = self._hw.health()
        return Readings(feedback=feedback, feedback_span=span, t_unix_s=self._wall(), imu=self._hw.latest_imu(),
                        power=self._hw.latest_power(), devices=devices, faults=self._hw.faults(devices),
                        resting=self._hw.motor_resting())

    def zero_after_failure(self) -> None:
        """Command zero after a tick failed; logs (never raises) when that fails too."""
        try:
            self._hw.set_duty(0.0, 0.0)
        except Exception:  # Hardware never raises; guard anyway
            log.exception("zero duty after a failed tick failed too")

    def zero_confirmed(self, deadline: float) -> bool | None:
        """Command zero until the motor controller confirms it or ``time.monotonic()`` passes ``deadline``.

        At least one attempt. Returns True once confirmed, False when the deadline passed, None
        at once when there is no controller to confirm it (none configured, or lost).
        """
        pause = threading.Event()
        while True:
            if not self._hw.has_motor():
                return None
            self._hw.set_duty(0.0, 0.0, force=True)     # a fresh answer, never a recent write's
            if self._hw.settle_motor(max(0.0, deadline - time.monotonic())):
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            pause.wait(min(ZERO_RETRY_S, left))
