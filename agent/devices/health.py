"""Health of one supervised device or camera: a state, the last error, an error count.

One mechanism for every device (agent/devices/supervisor.py) and camera (agent/video/capture.py):
:class:`HealthTracker` holds a :class:`Health` state and logs each transition
once, on the owner's logger: WARNING going to ``lost`` or ``degraded`` (with the
reason: the agent holds the tracks at zero and reopens the device, a handled
state in the log-level policy of docs/architecture.md), INFO on recovery. A
device not yet opened (or a camera before its first frame) reports ``starting``,
not ``lost``, until its first open fails; a device that never came up gets one
WARNING with the reason of its first failure (no such port, no I2C bus, wrong
chip, camera missing). Repeating a state logs nothing more, so a device that
stays lost while it is retried fills no log. Every line carries ``extra={"device": name, "fault": reason}`` (journal
fields ``DEVICE=`` / ``FAULT=``).
Message form: ``<name>: <old> -> <new>[: <reason>]``.
"""

from __future__ import annotations

import enum
import logging
import threading

from agent.model import DeviceHealth

__all__ = ["DEGRADED", "LOST", "OK", "STARTING", "Health", "HealthTracker"]

#: The reported state of a device not opened yet (a camera before its first frame) that has not
#: failed: internally ``lost`` (the reopener opens it), shown as ``starting`` (not a fault).
STARTING = "starting"


class Health(enum.StrEnum):
    """Supervision state; the values are the telemetry strings."""

    OK = "ok"
    DEGRADED = "degraded"  # recent errors, still answering
    LOST = "lost"          # not answering; being reopened


OK, DEGRADED, LOST = Health.OK, Health.DEGRADED, Health.LOST

_LEVEL = {OK: logging.INFO, DEGRADED: logging.WARNING, LOST: logging.WARNING}


class HealthTracker:
    """State, last error and error count of one device; thread-safe.

    Args:
        name: device name in logs and reports (``motor``, ``camera.front``).
        logger: where transitions are logged (the owner's module logger).
        state: initial state (``lost`` until the first open or frame).
        last_error: initial reason (e.g. ``not opened yet``).
        error_when_ok: report the last error while ``ok`` too (cameras), instead of "".
    """

    def __init__(self, name: str, logger: logging.Logger, *, state: Health = LOST, last_error: str = "",
                 error_when_ok: bool = False) -> None:
        self.name = name
        self._log = logger
        self._lock = threading.Lock()
        self._state = state
        self._last_error = last_error
        self._errors = 0
        self._error_when_ok = error_when_ok
        self._starting = state == LOST     # not up yet and no failure: reported as ``starting``
        self._last_report: DeviceHealth | None = None
        self._changes = 0                   # bumped by every change of state, error or count
        self._reported = -1                 # ``_changes`` when ``_last_report`` was made

    @property
    def state(self) -> Health:
        """Current state."""
        return self._state

    @property
    def last_error(self) -> str:
        """Text of the last error ("" before any)."""
        return self._last_error

    @property
    def errors(self) -> int:
        """Errors counted since start."""
        return self._errors

    def fail(self, state: Health, error: str) -> None:
        """Count one error and move to ``state`` (``degraded`` or ``lost``), logging a change once."""
        self._set(state, error, count=True)

    def recover(self) -> None:
        """Move to ``ok``; logged at INFO when it is a change."""
        self._set(OK, "", count=False)

    def retire(self, reason: str) -> None:
        """Move to ``lost`` without counting or logging an error (a deliberate close)."""
        with self._lock:
            self._state, self._last_error, self._starting = LOST, reason, False
            self._changes += 1

    def _set(self, state: Health, error: str, *, count: bool) -> None:
        with self._lock:  # logged before the new state is visible: whoever sees it finds the line
            old = self._state
            fields = {"device": self.name, "fault": error or "-"}
            shown = STARTING if self._starting else old.value
            if old != state:
                self._log.log(_LEVEL[state], "%s: %s -> %s%s", self.name, shown, state.value,
                              f": {error}" if error else "", extra=fields)
            elif count and self._errors == 0:  # never came up: say why once (no port, no bus, wrong chip)
                self._log.warning("%s: unavailable: %s", self.name, error, extra=fields)
            self._starting = False
            if error:
                self._last_error = error
            if count:
                self._errors += 1
            self._state = state
            self._changes += 1

    def report(self) -> DeviceHealth:
        """This device's :class:`~agent.model.DeviceHealth` (plain-string state: ``starting``, ``ok``,
        ``degraded``, ``lost``).

        The same object while nothing changed: the control loop asks every tick and keeps each
        tick's answer in its snapshot ring, so a new one per tick would be garbage-collection work.
        Nothing changed since the last report: that one, without taking the lock."""
        if self._reported == self._changes:
            return self._last_report        # type: ignore[return-value]
        with self._lock:    # the report and its change count are stored together
            state, error, errors, starting = self._state, self._last_error, self._errors, self._starting
            shown = error if state != OK or self._error_when_ok else ""
            value = STARTING if starting else state.value
            last = self._last_report
            if last is None or last.state != value or last.last_error != shown or last.errors != errors:
                last = self._last_report = DeviceHealth(self.name, value, shown, errors)
            self._reported = self._changes
            return last
