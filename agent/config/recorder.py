"""``recorder`` section: the flight recorder (agent.recorder, docs/recorder.md).

The recorder writes MCAP files (the ``mcap`` library) under ``dir``: rotating files of at most
``file_mib``, all of them together at most ``max_mib`` (the oldest deleted first), cut into chunks of
``chunk_kib`` or every ``chunk_max_s`` seconds, whichever comes first, so a file cut by a power loss
reads back up to its last whole chunk and an export sees data at most ``chunk_max_s`` old.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

from pydantic import Field

from agent.config.base import Section, state_directory

#: where recordings go under systemd when ``dir`` is not set: ``$STATE_DIRECTORY/recordings``
STATE_SUBDIR = "recordings"


class RecorderConfig(Section):
    """Flight recorder settings.

    Attributes:
        enabled: record (default true). Off: no files, no camera frames; /metrics still counts.
        dir: directory of the recordings; None: ``$STATE_DIRECTORY/recordings`` under systemd
            (``/var/lib/robot-agent/recordings``), and without ``STATE_DIRECTORY`` no recording
            (said once at start). ``config/params.json`` (``scripts/run-sim.sh``) sets ``logs/recordings``.
        max_mib: all recordings together at most this many MiB; the oldest file is deleted first.
        file_mib: one file at most this many MiB, then a new one starts.
        chunk_kib: a chunk is written once it holds this many KiB (uncompressed).
        chunk_max_s: ... or once its oldest message is this old, s.
        frame_fps: camera frames recorded per second and camera (JPEG, the encode ARTEX uses).
        incident_before_s, incident_after_s: an incident's exported window around it, s.
        queue_size: commands, log records and events waiting for the recorder thread; more are
            dropped and counted (``robot_agent_recorder_dropped_total``).
    """

    enabled: bool = True
    dir: str | None = Field(None, min_length=1, max_length=4096)
    max_mib: float = Field(256.0, ge=1.0, le=1_000_000.0)
    file_mib: float = Field(16.0, ge=0.25, le=4096.0)
    chunk_kib: int = Field(512, ge=4, le=65536)
    chunk_max_s: float = Field(2.0, gt=0.0, le=60.0)
    frame_fps: float = Field(2.0, ge=0.0, le=30.0)
    incident_before_s: float = Field(30.0, ge=0.0, le=3600.0)
    incident_after_s: float = Field(10.0, ge=0.0, le=3600.0)
    queue_size: int = Field(4096, ge=16, le=1_000_000)

    def directory(self) -> Path | None:
        """The recordings directory: ``dir``, else ``$STATE_DIRECTORY/recordings``, else None (off)."""
        if self.dir:
            return Path(self.dir)
        state = state_directory()
        return state / STATE_SUBDIR if state else None


def dir_problem(recorder: Any) -> str | None:
    """Why the raw ``recorder`` section's ``dir`` cannot hold the recordings, or None: the path, or the
    nearest part of it that exists, is not a directory (a regular file named as ``dir`` passes the
    field checks and fails only at run time, when the recorder makes the directory). Not checked
    with ``enabled`` false (the path is not used). Relative paths are taken from the working
    directory, as ``robot-agent run`` takes them. Reads the file system (``stat``)."""
    if not isinstance(recorder, dict) or recorder.get("enabled") is False:
        return None
    value = recorder.get("dir")
    if not isinstance(value, str) or not value or "\0" in value:
        return None                     # the field check reports a wrong type
    path = Path(value)
    for part in (path, *path.parents):
        try:
            mode = os.stat(part).st_mode
        except (FileNotFoundError, NotADirectoryError):
            if os.path.islink(part):    # a dangling symlink: mkdir cannot make it (File exists)
                return f"{value!r} cannot be made: {str(part)!r} is a symbolic link to {os.readlink(part)!r}, " \
                       "which does not exist (make that directory, or name another)"
            continue                    # made at start (parents too), or a file on the way: found further up
        except OSError:
            return None                 # not for us to judge (permissions: the service's user differs)
        if stat.S_ISDIR(mode):
            return None
        kind = _KINDS.get(stat.S_IFMT(mode), "no directory")
        if part == path:
            return f"{value!r} is {kind}, not a directory: the recordings need a directory of their own"
        return f"{value!r} cannot be made: {str(part)!r} on its way is {kind}, not a directory"
    return None


#: what a path that is no directory is, by its file type
_KINDS = {stat.S_IFREG: "a regular file", stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device",
          stat.S_IFIFO: "a FIFO", stat.S_IFSOCK: "a socket"}
