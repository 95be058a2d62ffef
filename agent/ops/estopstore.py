"""The e-stop kept across restarts: ``estop.json`` and its reader and writer.

**Kept across restarts.** Every set and release is written (atomically, on a thread of its own) to
``estop.json`` in the state directory (``$STATE_DIRECTORY``, ``/var/lib/robot-agent`` under systemd),
or next to the status file without one (:func:`store_path`). At start the agent puts a kept e-stop
back before any adapter connects, so a robot restarted by the watchdog or a reboot comes back
halted, never armed. A state file that cannot be read sets the e-stop too (by ``robot``), with the
reason; release it as any other.
"""

from __future__ import annotations

import concurrent.futures
import json
import logging
import math
import os
import time
from pathlib import Path

from agent.config.base import state_directory
from agent.model import Halt
from agent.support.atomicfile import write_text_atomically
from agent.support.jsonkeys import unique_keys
from agent.support.ratelimit import safe
from agent.support.readfile import read_regular

log = logging.getLogger(__name__)

#: the kept e-stop's file name, in the state directory (or next to the status file)
STORE_NAME = "estop.json"
#: environment variable naming the kept e-stop's file instead
STORE_ENV = "ROBOT_AGENT_ESTOP_FILE"


def store_path(status_file: Path) -> Path:
    """The kept e-stop: ``$ROBOT_AGENT_ESTOP_FILE``, else ``$STATE_DIRECTORY/estop.json`` (systemd),
    else ``estop.json`` beside ``status_file``."""
    if os.environ.get(STORE_ENV):
        return Path(os.environ[STORE_ENV])
    state = state_directory()
    return state / STORE_NAME if state else Path(status_file).parent / STORE_NAME


#: who a kept e-stop may name: the e-stop's setters, and ``robot`` (an e-stop set because the file was unknown)
KEPT_SETTERS = ("console", "cli", "input", "robot")
#: the setter of an e-stop whose kept state is unknown
ROBOT = "robot"
#: the largest e-stop file read, bytes (a valid one is about 100-700)
MAX_STORE_BYTES = 64 * 1024
#: the deepest JSON nesting in a valid e-stop file (a valid one nests 2 deep)
MAX_STORE_DEPTH = 8
#: the latest time a kept e-stop may have been set, Unix s (2100-01-01T00:00:00Z); the earliest is 0
MAX_SINCE_UNIX_S = 4102444800.0


def _max_depth(text: str) -> int:
    """The deepest nesting of ``[`` / ``{`` in JSON ``text`` (brackets inside strings not counted)."""
    depth = deepest = 0
    in_string = escaped = False
    for c in text:
        if in_string:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
        elif c in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif c in "]}":
            depth -= 1
    return deepest


def _kept_halt(data: object) -> Halt | None:
    """The Halt in a parsed e-stop file, None when released. Raises ValueError naming the problem."""
    if not isinstance(data, dict) or data.get("version") != 1 or "estop" not in data:
        raise ValueError('not {"version": 1, "estop": ...}')
    kept = data["estop"]
    if kept is None:
        return None
    if not isinstance(kept, dict):
        raise ValueError(f"estop is a {type(kept).__name__}, not an object or null")
    missing = [k for k in ("by", "reason", "since_unix_s") if k not in kept]
    if missing:
        raise ValueError(f"estop lacks {', '.join(missing)}")
    by, reason, since = kept["by"], kept["reason"], kept["since_unix_s"]
    if not isinstance(by, str) or by not in KEPT_SETTERS:
        raise ValueError(f"estop.by {safe(by, 40)} is not one of {', '.join(KEPT_SETTERS)}")
    if not isinstance(reason, str):
        raise ValueError(f"estop.reason is a {type(reason).__name__}, not a string")
    if isinstance(since, bool) or not isinstance(since, (int, float)):
        raise ValueError(f"estop.since_unix_s is a {type(since).__name__}, not a number")
    try:
        seconds = float(since)
    except OverflowError:
        seconds = math.inf
    if not (math.isfinite(seconds) and 0 <= seconds <= MAX_SINCE_UNIX_S):
        raise ValueError(f"estop.since_unix_s {safe(since, 40)} is not a time from 1970 to 2100")
    return Halt("estop", safe(reason, 400), by, seconds)



class EstopStore:
    """``estop.json``: the e-stop in force (a Halt's fields) or ``{"estop": null}``.

    Args:
        path: the file. Writes go through one worker thread in call order (latest state last).
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._writer = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="estop-store")

    def load(self, now_unix_s: float | None = None) -> Halt | None:
        """The kept e-stop, None when there is none (no file, or released). Blocking: call off the event loop.

        A file that exists but cannot be read, parsed or validated gives an e-stop by ``robot`` whose
        reason names the file and the problem (never an exception): not knowing whether the robot was
        e-stopped is treated as e-stopped. Valid: at most :data:`MAX_STORE_BYTES` bytes, JSON nested at
        most :data:`MAX_STORE_DEPTH` deep, ``{"version": 1, "estop": null | {"by", "reason",
        "since_unix_s"}}`` with ``by`` one of :data:`KEPT_SETTERS`, ``reason`` a string and
        ``since_unix_s`` a finite number of seconds from 1970 to 2100 (:data:`MAX_SINCE_UNIX_S`).
        """
        try:
            raw = read_regular(self.path, MAX_STORE_BYTES + 1)
        except FileNotFoundError:
            return None
        except OSError as err:
            return self._unknown(f"cannot read it ({err})", now_unix_s)
        try:
            if len(raw) > MAX_STORE_BYTES:
                raise ValueError(f"longer than {MAX_STORE_BYTES} bytes")
            text = raw.decode("utf-8")
            depth = _max_depth(text)
            if depth > MAX_STORE_DEPTH:
                raise ValueError(f"JSON nested {depth} deep (at most {MAX_STORE_DEPTH})")
            data = json.loads(text, object_pairs_hook=unique_keys)   # a key twice: which one held?
        except (ValueError, RecursionError) as err:     # UnicodeDecodeError and JSONDecodeError are ValueErrors
            return self._unknown(f"not JSON ({safe(str(err), 80)})", now_unix_s)
        try:
            return _kept_halt(data)
        except ValueError as err:
            return self._unknown(f"not a valid e-stop file ({err})", now_unix_s)

    def _unknown(self, problem: str, now_unix_s: float | None) -> Halt:
        log.error("e-stop state unknown: %s: %s: the robot starts e-stopped by robot", self.path, problem)
        return Halt("estop", safe(f"the e-stop kept across restarts is unknown: {self.path}: {problem}", 300),
                    ROBOT, time.time() if now_unix_s is None else now_unix_s)

    def save(self, halt: Halt | None) -> concurrent.futures.Future:
        """Write ``halt`` (None: released) on the store's thread; never blocks the caller."""
        return self._writer.submit(self._write, halt)

    def _write(self, halt: Halt | None) -> None:
        data = {"version": 1, "estop": None if halt is None else
                {"by": halt.by, "reason": halt.reason, "since_unix_s": halt.since_unix_s}}
        try:
            write_text_atomically(self.path, json.dumps(data), prefix=".estop-", durable=True)
        except OSError as err:
            log.error("cannot keep the e-stop in %s (%s): after a restart the robot would not remember it",
                      self.path, err)

    def close(self) -> None:
        """Finish pending writes."""
        self._writer.shutdown(wait=True)
