"""``robot-agent estop``: the local control channel to the running agent (the e-stop kept across
restarts is in agent/ops/estopstore.py).

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
``{"ok": false, "error": "bad_request", "message": ...}`` and change nothing (a key given twice,
``{"op": "estop", "op": "release"}``, included).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import logging
import os
import socket
import struct
from pathlib import Path
from typing import Any

from agent.errors import CommandError
from agent.support.jsonkeys import RepeatedKey, unique_keys
from agent.support.ratelimit import safe

log = logging.getLogger(__name__)

#: the socket's file name, next to the status file
SOCKET_NAME = "control.sock"
#: environment variable naming the control socket instead
SOCKET_ENV = "ROBOT_AGENT_CONTROL_SOCKET"
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



# ----------------------------------------------------------------------------- the kept e-stop
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
                async with asyncio.timeout(1.0):
                    await self._server.wait_closed()
            self._server = None
            with contextlib.suppress(OSError):
                self.path.unlink(missing_ok=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = _peer(writer)
        try:
            try:
                async with asyncio.timeout(IO_TIMEOUT_S):
                    line = await reader.readline()
                reply = self.handle(line, peer)
            except (ValueError, asyncio.LimitOverrunError):
                reply = _bad(peer, f"request longer than {MAX_LINE} bytes")
            except asyncio.TimeoutError:
                reply = _bad(peer, f"no request line within {IO_TIMEOUT_S:.0f} s")
            writer.write(json.dumps(reply).encode() + b"\n")
            async with asyncio.timeout(IO_TIMEOUT_S):
                await writer.drain()
        except (OSError, asyncio.TimeoutError) as err:
            log.info("control socket: %s left early (%s)", peer, err)
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    def handle(self, line: bytes, peer: str = "") -> dict[str, Any]:
        """One request line -> the reply dict (never raises)."""
        try:
            request = json.loads(line, object_pairs_hook=unique_keys)
        except RepeatedKey as err:
            return _bad(peer, str(err))
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
