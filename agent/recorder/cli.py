"""``robot-agent incidents`` and ``robot-agent export INCIDENT``: the recordings of a running or stopped agent.

Both read the recordings directory (:func:`recordings_dir`): ``--dir``, else ``recorder.dir`` of
``--config``, else ``$ROBOT_AGENT_RECORDINGS``, else ``$STATE_DIRECTORY/recordings``, else
``/var/lib/robot-agent/recordings`` (the systemd unit's state directory). For ``scripts/run-sim.sh``:
``--dir logs/recordings`` (or ``--config config/params.json``).

Exit statuses: 0 done; 1 no such incident, or a prefix several start with (export), or no incident yet
(incidents); 2 no recordings directory or a bad config; 3 the output file cannot be written (export).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

from agent.config.base import state_directory
from agent.config.recorder import STATE_SUBDIR
from agent.recorder.export import export
from agent.recorder.incidents import IncidentLog, iso

RECORDINGS_ENV = "ROBOT_AGENT_RECORDINGS"
SYSTEM_RECORDINGS = "/var/lib/robot-agent/recordings"
EXIT_OK, EXIT_NONE, EXIT_NO_DIR, EXIT_NO_WRITE = 0, 1, 2, 3


def recordings_dir(explicit: str | None, config: str | None) -> Path:
    """The recordings directory (see the module docstring). Raises ConfigError for a bad ``config``."""
    if explicit:
        return Path(explicit)
    if config:
        from agent.config import load
        d = load(config).recorder.directory()
        if d is not None:
            return d
    if os.environ.get(RECORDINGS_ENV):
        return Path(os.environ[RECORDINGS_ENV])
    state = state_directory()
    return state / STATE_SUBDIR if state else Path(SYSTEM_RECORDINGS)


def list_incidents(directory: Path, write: Callable[[str], None], as_json: bool = False, last: int = 50) -> int:
    """Print the latest ``last`` incidents, oldest first: id, time (UTC), kind, source, reason."""
    if not directory.is_dir():
        write(f"no recordings directory {directory} (is the recorder on? recorder.dir, --dir)")
        return EXIT_NO_DIR
    incidents = IncidentLog(directory).read()[-last:]
    if as_json:
        write(json.dumps([i.as_dict() for i in incidents], indent=2))
        return EXIT_OK if incidents else EXIT_NONE
    if not incidents:
        write(f"no incidents recorded in {directory}")
        return EXIT_NONE
    write(f"{'ID':<34} {'TIME (UTC)':<24} {'KIND':<12} {'SOURCE':<10} REASON")
    for i in incidents:
        write(f"{i.id:<34} {iso(i.t_unix_s):<24} {i.kind:<12} {i.source:<10} {i.reason}")
    return EXIT_OK


def export_incident(directory: Path, incident_id: str, out: str | None, before_s: float, after_s: float,
                    write: Callable[[str], None]) -> int:
    """Write the incident's window (``before_s`` before, ``after_s`` after) as one MCAP file."""
    if not directory.is_dir():
        write(f"no recordings directory {directory} (is the recorder on? recorder.dir, --dir)")
        return EXIT_NO_DIR
    log = IncidentLog(directory)
    incident = log.find(incident_id)
    if incident is None:
        several = [i.id for i in log.read() if i.id.startswith(incident_id)]
        if len(several) > 1:
            write(f"{len(several)} incidents in {directory} start with {incident_id!r} ({several[0]} ... "
                  f"{several[-1]}): give more of the id (robot-agent incidents lists them)")
        else:
            write(f"no incident {incident_id!r} in {directory} (robot-agent incidents lists them)")
        return EXIT_NONE
    data = export(directory, incident, before_s, after_s)
    path = Path(out or f"incident-{incident.id}.mcap")
    try:
        path.write_bytes(data)
    except OSError as err:              # a missing directory, a read-only place, a full disk: said, no traceback
        write(f"cannot write {path}: {err.strerror or err}")
        return EXIT_NO_WRITE
    write(f"{path}: {len(data)} bytes, {incident.kind} at {iso(incident.t_unix_s)} "
          f"(-{before_s:g} s .. +{after_s:g} s); open it in Foxglove (docs/recorder.md)")
    return EXIT_OK
