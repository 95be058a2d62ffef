"""Incidents: what the recorder calls a moment worth replaying, found in the stream it records.

An incident is one of (``kind``):

- ``estop``: the emergency stop was set (reason and setter from the Halt);
- ``failsafe``: a failsafe latch tripped (battery, tilt, stall; its reason with figures);
- ``stop``: a ``stop`` command from a source while the tank was moving;
- ``watchdog``: the velocity watchdog stopped a moving tank (its source's commands stopped coming);
- ``device_lost``: a device's health became ``lost``;
- ``link_lost``: a protocol link that was up went down (the link's last error).

:class:`Detector` turns snapshots and events into :class:`Incident` s (pure: no I/O, no clock of its
own); :class:`IncidentLog` keeps them in ``incidents.jsonl`` in the recordings directory (one JSON
object a line, appended; cut back to the newest 2000 once over 1 MiB), which ``robot-agent incidents``
reads.
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from agent.model import Snapshot

log = logging.getLogger(__name__)

INCIDENTS_FILE = "incidents.jsonl"
#: incidents.jsonl is cut back to its newest :data:`KEEP_LINES` lines once it is this long, bytes
MAX_FILE_BYTES = 1 << 20
KEEP_LINES = 2000
KINDS = ("estop", "failsafe", "stop", "watchdog", "device_lost", "link_lost")
#: measured or commanded track speed above which the tank counts as moving, m/s
MOVING_MPS = 0.01


@dataclass(frozen=True, slots=True)
class Incident:
    """One incident.

    Attributes:
        id: unique in its directory: ``<UTC time>-<kind>`` (``20261201T183512.250Z-estop``).
        t_unix_s: when it happened, Unix s. kind: one of :data:`KINDS`.
        reason: one sentence. source: who or what: a command source, ``robot``, a device or a link.
    """

    id: str
    t_unix_s: float
    kind: str
    reason: str
    source: str

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready, with ``time`` (ISO 8601 UTC) added."""
        return {**asdict(self), "time": iso(self.t_unix_s)}


def iso(t_unix_s: float) -> str:
    """``2026-12-01T18:35:12.250Z``."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t_unix_s)) + f".{int(t_unix_s * 1000) % 1000:03d}Z"


def make(t_unix_s: float, kind: str, reason: str, source: str) -> Incident:
    """A new incident with its id from time and kind."""
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(t_unix_s)) + f".{int(t_unix_s * 1000) % 1000:03d}Z"
    return Incident(f"{stamp}-{kind}", t_unix_s, kind, reason, source)


def moving(s: Snapshot) -> bool:
    """The tracks are commanded or measured above :data:`MOVING_MPS`."""
    t = s.tracks
    return max(abs(t.cmd_left_mps), abs(t.cmd_right_mps), abs(t.left_mps), abs(t.right_mps)) > MOVING_MPS


def tick_lateness(prev: Snapshot, s: Snapshot, period_s: float, rest_s: float | None) -> float:
    """How much later than its period tick ``s`` followed tick ``prev``, s: the control period, or the rest
    period (``ControlLoop.rest_period_s``; None: the loop never rests) when ``prev``'s tick began or kept a
    rest (Snapshot.resting: its next slot was a rest period away; a tick woken sooner is not late, the
    first tick of a drive from rest included). A snapshot that does not say (``resting`` None): the rest
    period when the tank stood still at both ticks and the gap is longer than a period and a half."""
    gap = s.t_mono_s - prev.t_mono_s
    if prev.resting is not None:
        return max(0.0, gap - (rest_s if prev.resting and rest_s is not None else period_s))
    if rest_s is not None and gap > 1.5 * period_s and not moving(prev) and not moving(s):
        return max(0.0, gap - rest_s)
    return max(0.0, gap - period_s)


class Detector:
    """Finds incidents in consecutive snapshots and in link, device and command events."""

    def __init__(self) -> None:
        self._prev: Snapshot | None = None
        self._halts: set[tuple[str, float]] = set()
        self._devices: dict[str, str] = {}
        self._links: dict[str, bool] = {}

    def snapshot(self, s: Snapshot) -> list[Incident]:
        """Incidents between the previous snapshot and ``s`` (new halts, a watchdog stop, a lost device)."""
        out: list[Incident] = []
        prev, self._prev = self._prev, s
        if prev is None or s.safety is not prev.safety:     # the loop's same SafetyState: the same halts, none new
            halts = {(h.kind, h.since_unix_s): h for h in s.safety.halts}
            for key, h in halts.items():
                if key not in self._halts:
                    if h.kind == "estop":
                        out.append(make(s.t_unix_s, "estop", h.reason or f"emergency stop set by {h.by}", h.by))
                    else:
                        out.append(make(s.t_unix_s, "failsafe", f"{h.kind}: {h.reason}", h.by))
            self._halts = set(halts)
        if prev is not None and s.watchdog == "expired" and prev.watchdog != "expired" and moving(prev):
            who = prev.active_source or "a source"
            speed = max(abs(prev.tracks.left_mps), abs(prev.tracks.right_mps))
            out.append(make(s.t_unix_s, "watchdog", f"no fresh velocity command from {who} within its timeout "
                            f"while moving at {speed:.2f} m/s: tracks stopped", prev.active_source))
        for d in (s.devices if prev is None or s.devices != prev.devices else ()):    # equal reports: none lost
            before = self._devices.get(d.name)
            self._devices[d.name] = d.state
            if d.state == "lost" and before not in (None, "lost"):
                out.append(make(s.t_unix_s, "device_lost", d.last_error or f"{d.name} stopped answering", d.name))
        return out

    def command(self, t_unix_s: float, source: str, is_stop: bool, was_moving: bool) -> list[Incident]:
        """A stop command from ``source`` while the tank moved is an incident."""
        if is_stop and was_moving:
            return [make(t_unix_s, "stop", f"stop from {source} while moving", source)]
        return []

    def link(self, t_unix_s: float, name: str, connected: bool, last_error: str) -> list[Incident]:
        """A link that was up and is down now is an incident."""
        before = self._links.get(name)
        self._links[name] = connected
        if before and not connected:
            return [make(t_unix_s, "link_lost", last_error or f"{name} link dropped", name)]
        return []


class IncidentLog:
    """``incidents.jsonl`` in the recordings directory (see the module docstring)."""

    def __init__(self, directory: Path) -> None:
        self.path = Path(directory) / INCIDENTS_FILE

    def append(self, incident: Incident) -> None:
        """Append one line. Raises OSError (the caller degrades)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        line = (json.dumps(incident.as_dict(), separators=(",", ":")) + "\n").encode()
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, line)
            size = os.fstat(fd).st_size
        finally:
            os.close(fd)
        if size > MAX_FILE_BYTES:
            self._trim()

    def _trim(self) -> None:
        """Keep the newest :data:`KEEP_LINES` lines (temporary file + rename: never half a file)."""
        lines = self.path.read_bytes().splitlines(keepends=True)[-KEEP_LINES:]
        tmp = self.path.with_suffix(".jsonl.tmp")
        tmp.write_bytes(b"".join(lines))
        os.replace(tmp, self.path)

    def read(self) -> list[Incident]:
        """Every incident in the file, oldest first; bad lines are skipped (logged once)."""
        try:
            text = self.path.read_text(errors="replace")
        except FileNotFoundError:
            return []
        out, bad = [], 0
        for line in text.splitlines():
            try:
                d = json.loads(line)
                out.append(Incident(str(d["id"]), float(d["t_unix_s"]), str(d["kind"]), str(d["reason"]),
                                    str(d["source"])))
            except (ValueError, KeyError, TypeError):
                bad += 1
        if bad:
            log.warning("%s: %d unreadable line(s) skipped", self.path, bad)
        return out

    def find(self, incident_id: str) -> Incident | None:
        """The incident with this id (or the only one whose id starts with it), else None."""
        found = [i for i in self.read() if i.id == incident_id]
        if not found:
            found = [i for i in self.read() if i.id.startswith(incident_id)]
        return found[-1] if len(found) == 1 or (found and found[-1].id == incident_id) else None
