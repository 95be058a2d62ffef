"""``robot-agent estop``: the local control channel to the running agent, and the e-stop kept across restarts.

**Channel.** The agent listens on a Unix stream socket, ``control.sock`` next to the status file
(``/run/robot-agent/control.sock`` under systemd, ``logs/control.sock`` for ``scripts/run-sim.sh``;
:func:`socket_path`). Its mode is 0660: root and the service's user and group may use it, nobody
else (the kernel checks write permission on connect). One request per connection, one JSON line
each way, at most :data:`MAX_LINE` bytes:

- ``{"op": "estop", "reason": "..."}`` -> ``{"ok": true, "new": bool, "estop": {...}}``
- ``{"op": "release"}`` -> ``{"ok": true, "released": {...}}``, or ``{"ok": false, "error": "no_estop",
  "message": ...}`` when none is set
- ``{"op": "state"}`` -> ``{"ok": true, "safety": {...}}``

The setter is always ``cli``; the caller's uid and pid (``SO_PEERCRED``) are logged. Bad requests get
``{"ok": false, "error": "bad_request", "message": ...}`` and change nothing.

**Kept across restarts.** Every set and release is written (atomically, on a thread of its own) to
``estop.json`` in the state directory (``$STATE_DIRECTORY``, ``/var/lib/robot-agent`` under systemd),
or next to the status file without one (:func:`store_path`). At start the agent puts a kept e-stop
back before any adapter connects, so a robot restarted by the watchdog or a reboot comes back
halted, never armed. A state file that cannot be read sets the e-stop too (by ``robot``), with the
reason; release it as any other.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import errno
import json
import logging
import math
import os
import socket
import struct
import time
from pathlib import Path
from typing import Any

from agent.support.atomicfile import write_text_atomically
from agent.config.base import state_directory
from agent.errors import CommandError
from agent.model import Halt
from agent.support.ratelimit import safe

log = logging.getLogger(__name__)

#: the socket's file name, next to the status file
SOCKET_NAME = "control.sock"
#: the kept e-stop's file name, in the state directory (or next to the status file)
STORE_NAME = "estop.json"
#: environment overrides for the socket and the state file
SOCKET_ENV = "ROBOT_AGENT_CONTROL_SOCKET"
STORE_ENV = "ROBOT_AGENT_ESTOP_FILE"
#: the socket's mode: root and the service's user and group
SOCKET_MODE = 0o660
#: longest request or reply line, bytes
MAX_LINE = 4096
#: how long either side waits for the other, s
IO_TIMEOUT_S = 5.0
#: the longest path a Unix socket address holds (Linux sun_path, 108 bytes with the NUL)
MAX_SOCKET_PATH = 107
#: longest reason the CLI sends, characters (the agent keeps 200: agent.control.safety.MAX_REASON_CHARS)
MAX_REASON_CHARS = 200
#: exit statuses of ``robot-agent estop``
EXIT_DONE, EXIT_REFUSED, EXIT_NO_AGENT, EXIT_DENIED = 0, 1, 2, 3


def socket_path(status_file: Path) -> Path:
    """The control socket: ``$ROBOT_AGENT_CONTROL_SOCKET``, else ``control.sock`` beside ``status_file``."""
    if os.environ.get(SOCKET_ENV):
        return Path(os.environ[SOCKET_ENV])
    return Path(status_file).parent / SOCKET_NAME


def store_path(status_file: Path) -> Path:
    """The kept e-stop: ``$ROBOT_AGENT_ESTOP_FILE``, else ``$STATE_DIRECTORY/estop.json`` (systemd),
    else ``estop.json`` beside ``status_file``."""
    if os.environ.get(STORE_ENV):
        return Path(os.environ[STORE_ENV])
    state = state_directory()
    return state / STORE_NAME if state else Path(status_file).parent / STORE_NAME


# ----------------------------------------------------------------------------- the kept e-stop

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
            with self.path.open("rb") as f:
                raw = f.read(MAX_STORE_BYTES + 1)
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
            data = json.loads(text)
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


# ----------------------------------------------------------------------------- the agent's side


def _peer(writer: asyncio.StreamWriter) -> str:
    sock = writer.get_extra_info("socket")
    try:
        pid, uid, _gid = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                            struct.calcsize("3i")))
        return f"uid {uid} pid {pid}"
    except (OSError, AttributeError):
        return "unknown peer"


class ControlServer:
    """The control socket on the event loop; see the module docstring.

    Args:
        control: the ControlLoop (``estop``, ``release_estop``, ``snapshot``).
        path: the socket path.
    """

    def __init__(self, control: Any, path: Path) -> None:
        self.control = control
        self.path = Path(path)
        self._server: asyncio.AbstractServer | None = None

    async def start(self) -> bool:
        """Listen; False (logged) when it cannot: path too long, directory missing, another agent on it."""
        path = self.path
        if len(os.fsencode(path)) > MAX_SOCKET_PATH:
            log.error("control socket path %s is longer than %d bytes: `robot-agent estop` cannot reach this "
                      "agent; set %s to a shorter path", path, MAX_SOCKET_PATH, SOCKET_ENV)
            return False
        if path.is_socket():
            if await asyncio.to_thread(_answers, path):
                log.error("control socket %s is in use by another running agent: `robot-agent estop` reaches "
                          "that one, not this", path)
                return False
            path.unlink(missing_ok=True)            # left behind by an agent that died
        try:
            self._server = await asyncio.start_unix_server(self._serve, path=str(path), limit=MAX_LINE)
            os.chmod(path, SOCKET_MODE)
        except OSError as err:
            log.error("cannot listen on the control socket %s (%s): `robot-agent estop` cannot reach this agent",
                      path, err)
            return False
        log.info("control socket %s (robot-agent estop)", path)
        return True

    async def close(self) -> None:
        """Stop listening and remove the socket."""
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 1.0)
            self._server = None
            with contextlib.suppress(OSError):
                self.path.unlink(missing_ok=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = _peer(writer)
        try:
            try:
                line = await asyncio.wait_for(reader.readline(), IO_TIMEOUT_S)
                reply = self.handle(line, peer)
            except (ValueError, asyncio.LimitOverrunError):
                reply = _bad(peer, f"request longer than {MAX_LINE} bytes")
            except asyncio.TimeoutError:
                reply = _bad(peer, f"no request line within {IO_TIMEOUT_S:.0f} s")
            writer.write(json.dumps(reply).encode() + b"\n")
            await asyncio.wait_for(writer.drain(), IO_TIMEOUT_S)
        except (OSError, asyncio.TimeoutError) as err:
            log.info("control socket: %s left early (%s)", peer, err)
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    def handle(self, line: bytes, peer: str = "") -> dict[str, Any]:
        """One request line -> the reply dict (never raises)."""
        try:
            request = json.loads(line)
        except ValueError:
            return _bad(peer, f"not a JSON line: {safe(line, 80)}")
        except RecursionError:
            return _bad(peer, f"JSON nested too deep: {safe(line, 80)}")
        if not isinstance(request, dict) or not isinstance(request.get("op"), str):
            return _bad(peer, 'a request is {"op": "estop" | "release" | "state", ...}')
        op = request["op"]
        try:
            if op == "estop":
                reason = request.get("reason", "")
                if not isinstance(reason, str):
                    return _bad(peer, "reason must be a string")
                reason = reason.strip() or f"robot-agent estop ({peer})"
                new = self.control.estop("cli", reason)
                log.warning("control socket: e-stop %s by robot-agent estop (%s)", "set" if new else "already set",
                            peer)
                return {"ok": True, "new": new, "estop": self._estop()}
            if op == "release":
                before = self._estop()
                self.control.release_estop("cli")
                log.warning("control socket: e-stop released by robot-agent estop --release (%s)", peer)
                return {"ok": True, "released": before}
            if op == "state":
                return {"ok": True, "safety": self.control.snapshot().safety.as_dict()}
        except CommandError as err:     # CommandDeclined: release without an e-stop
            return {"ok": False, "error": err.reason, "message": str(err)}
        return _bad(peer, f"unknown op {safe(op, 40)}; known: estop, release, state")

    def _estop(self) -> dict[str, Any] | None:
        with self.control.locked():
            halt = self.control.safety.state().estop
        return None if halt is None else {**halt.as_dict(), "text": halt.describe()}


def _bad(peer: str, message: str) -> dict[str, Any]:
    log.error("control socket: bad request from %s: %s", peer or "a client", message)
    return {"ok": False, "error": "bad_request", "message": message}


def _answers(path: Path) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(1.0)
        try:
            s.connect(str(path))
        except OSError:
            return False
    return True


# ----------------------------------------------------------------------------- the CLI's side


def request(path: Path, message: dict[str, Any], timeout_s: float = IO_TIMEOUT_S) -> dict[str, Any]:
    """Send one request to the agent at ``path`` and return its reply.

    Raises:
        FileNotFoundError / ConnectionRefusedError: no agent listens there.
        PermissionError: the caller may not use the socket.
        OSError: any other failure (timeout, a reply that is not JSON: ``OSError(EPROTO)``).
    """
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout_s)
        s.connect(str(path))
        s.sendall(_line(message))
        data = b""
        while not data.endswith(b"\n") and len(data) <= MAX_LINE * 4:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    try:
        reply = json.loads(data)
    except ValueError as err:
        raise OSError(errno.EPROTO, f"the agent's reply is not JSON: {safe(data, 80)}") from err
    if not isinstance(reply, dict):
        raise OSError(errno.EPROTO, "the agent's reply is not a JSON object")
    return reply


def _line(message: dict[str, Any]) -> bytes:
    """One request line: JSON with non-ASCII escaped (so any ``str``, lone surrogates included, encodes)."""
    return json.dumps(message).encode() + b"\n"


def fit_reason(reason: str) -> str:
    """``reason`` cut to :data:`MAX_REASON_CHARS` characters and so that the set request's line stays
    within :data:`MAX_LINE` bytes once encoded (``\\uXXXX`` escapes count 6 bytes a character)."""
    cut = reason[:MAX_REASON_CHARS]
    while cut and len(_line({"op": "estop", "reason": cut})) > MAX_LINE:
        cut = cut[: len(cut) * 3 // 4]
    return cut


def command(path: Path, release: bool, reason: str, out: Any) -> int:
    """``robot-agent estop [--release]``: print what happened through ``out``; return the exit status
    (0 done, 1 refused by the agent, 2 no agent running, 3 permission denied).

    A set is never refused for its reason: a reason longer than :data:`MAX_REASON_CHARS` characters, or
    one whose request line would pass :data:`MAX_LINE` bytes, is cut to fit, with a note through ``out``.
    """
    if release:
        message: dict[str, Any] = {"op": "release"}
    else:
        cut = fit_reason(reason)
        if cut != reason:
            out(f"note: the reason was cut to {len(cut)} of its {len(reason)} characters to fit the request")
        message = {"op": "estop", "reason": cut}
    try:
        reply = request(path, message)
    except (FileNotFoundError, ConnectionRefusedError):
        out(f"no agent is running (nothing listens on {path}; for scripts/run-sim.sh use "
            f"--status-file logs/status.json, or set {SOCKET_ENV})")
        return EXIT_NO_AGENT
    except PermissionError:
        out(f"permission denied on {path}: run it as root (sudo robot-agent estop) or as a member of the "
            "service's group (robot-agent)")
        return EXIT_DENIED
    except OSError as err:
        out(f"no answer from the agent on {path}: {err}")
        return EXIT_NO_AGENT
    if not reply.get("ok"):
        out(f"refused: {reply.get('message', reply)}")
        return EXIT_REFUSED
    if release:
        released = reply.get("released") or {}
        out(f"emergency stop released (it was {released.get('text', 'set')}); nothing moves until a fresh command")
    else:
        estop = reply.get("estop") or {}
        out(f"{'EMERGENCY STOP set' if reply.get('new') else 'already set'}: {estop.get('text', '')}")
    return EXIT_DONE
