"""Health of a running agent: systemd ``STATUS=``, a status file, and ``robot-agent status``.

The agent gathers its health from existing views (``ControlLoop.snapshot()``,
``tick_stats()``, ``keeps_rate()``, ``Hardware.health()``, each adapter's
``status()``) into one plain dict (:func:`gather`). :class:`StatusReporter`, a
task on the event loop, then

- sends ``STATUS=<one line>`` (:func:`summary`) to systemd whenever that line
  changes, at most once per :data:`MIN_PERIOD_S`;
- writes the dict as JSON to the status file (:func:`status_path`; default
  ``/run/robot-agent/status.json``, the unit's ``RuntimeDirectory=``) atomically
  (temporary file + rename), at most once per :data:`MIN_PERIOD_S`, off the event
  loop, and removes it when the agent stops.

``robot-agent status`` (:func:`report`) reads that file and prints a table. Its
exit status: 0 healthy (or starting), 1 degraded, 2 no status file (no agent running, or it
writes elsewhere), 3 the file is stale (its agent died or has not written it for
:data:`STALE_S`).

A state is ``degraded`` when a device is not ``ok`` (nor ``starting``: not opened
yet, no failure), a protocol link is down, the control loop misses its rate, or a
fault is active; ``starting`` (exit 0) while nothing is wrong but a device is
still starting or the loop is in its first second. The one-line summary
holds only discrete states (no rates or counters), so it changes only when the
health does.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from pathlib import Path
from typing import Any, Callable

from agent.support.atomicfile import write_text_atomically

log = logging.getLogger(__name__)

#: environment variable naming the status file (both for the agent and for ``robot-agent status``)
STATUS_ENV = "ROBOT_AGENT_STATUS_FILE"
#: the status file under systemd (the unit's RuntimeDirectory=robot-agent)
SYSTEM_STATUS_FILE = "/run/robot-agent/status.json"
#: STATUS= and the status file are refreshed at most this often, s
MIN_PERIOD_S = 1.0
#: how often the reporter looks at the health, s
POLL_S = 0.25
#: a status file older than this is stale (its agent is gone or hung), s
STALE_S = 5.0
#: exit statuses of ``robot-agent status``
EXIT_OK, EXIT_DEGRADED, EXIT_NO_AGENT, EXIT_STALE = 0, 1, 2, 3


def status_path(explicit: str | os.PathLike | None = None) -> Path:
    """The status file: ``explicit``, else ``$ROBOT_AGENT_STATUS_FILE``, else
    ``$RUNTIME_DIRECTORY/status.json`` (set by systemd), else ``/run/robot-agent/status.json``."""
    if explicit:
        return Path(explicit)
    if os.environ.get(STATUS_ENV):
        return Path(os.environ[STATUS_ENV])
    runtime = os.environ.get("RUNTIME_DIRECTORY", "").split(":")[0]
    return Path(runtime) / "status.json" if runtime else Path(SYSTEM_STATUS_FILE)


# ----------------------------------------------------------------------------- gather


def _link(name: str, status: dict[str, Any]) -> dict[str, Any]:
    link = {"connected": bool(status.get("connected"))}
    if name == "robot_msg":
        link["peers"] = sum((status.get("peers") or {}).values())
    warnings = status.get("warnings")
    if warnings:   # e.g. another simulator in the Sim2Bot room takes the commands
        link["warnings"] = list(warnings)
    return link


def _tracks(t: Any) -> dict[str, Any]:
    """Duty sent (-1..1), commanded and measured speed (m/s) per track, and whether both duties are 0."""
    r = lambda v, d: round(float(v), d) + 0.0   # noqa: E731 - "+ 0.0" turns -0.0 into 0.0
    return {"at_zero": t.duty_left == 0.0 and t.duty_right == 0.0,
            "duty_left": r(t.duty_left, 3), "duty_right": r(t.duty_right, 3),
            "cmd_left_mps": r(t.cmd_left_mps, 3), "cmd_right_mps": r(t.cmd_right_mps, 3),
            "left_mps": r(t.left_mps, 3), "right_mps": r(t.right_mps, 3)}


def gather(agent: Any, now: float | None = None) -> dict[str, Any]:
    """The agent's health as a JSON-ready dict (see the module docstring for ``state``).

    Keys: ``version``, ``pid``, ``name``, ``t_unix`` (s), ``state`` (``ok`` / ``degraded``),
    ``summary`` (the STATUS= line), ``devices`` (name, state, last_error, errors), ``links``
    (adapter -> connected, robot_msg peers, ``warnings`` when the link has trouble: degraded), ``active_source``, ``watchdog``, ``stopped``,
    ``faults``, ``tracks`` (``at_zero``, ``duty_left/right`` -1..1, ``cmd_left/right_mps`` and measured
    ``left/right_mps``, m/s), ``loop`` (keeps_rate, rate_hz, achieved_hz, ticks, late_ticks, max_tick_ms),
    ``safety`` (the halts and speed cap: ``agent.model.SafetyState.as_dict``; docs/safety.md),
    ``recorder`` (the flight recorder: ``agent.recorder.recorder.Recorder.status``; docs/recorder.md).
    """
    control = agent.control
    snap = control.snapshot()
    stats = control.tick_stats()
    devices = [{"name": d.name, "state": d.state, "last_error": d.last_error, "errors": d.errors}
               for d in agent.hardware.health()]
    links = {name: _link(name, adapter.status()) for name, adapter in agent.adapters.items()}
    keeps = control.keeps_rate()
    health = {
        "version": 1, "pid": os.getpid(), "name": agent.cfg.name,
        "t_unix": time.time() if now is None else now,
        "devices": devices, "links": links,
        "active_source": snap.active_source, "watchdog": snap.watchdog, "stopped": snap.stopped,
        "faults": list(snap.faults),
        "tracks": _tracks(snap.tracks),
        "safety": snap.safety.as_dict(),
        "recorder": _recorder(agent),
        "loop": {"keeps_rate": keeps, "rate_hz": agent.cfg.control.rate_hz,
                 "achieved_hz": round(stats.achieved_hz, 1), "ticks": stats.ticks,
                 "late_ticks": stats.late_ticks, "max_tick_ms": round(stats.max_tick_s * 1e3, 2),
                 "resting": stats.resting},
    }
    # the first second (the loop's rate window) and devices not opened yet are starting, not faults
    # (a loop that never ticks stays "starting" here; systemd's WatchdogSec restarts it within 2 s)
    warming = not keeps and stats.ticks < agent.cfg.control.rate_hz
    health["loop"]["starting"] = warming
    bad = (any(d["state"] not in ("ok", "starting") for d in devices) or not all(l["connected"] for l in links.values())
           or any(l.get("warnings") for l in links.values())
           or not (keeps or warming) or bool(snap.faults))
    starting = warming or any(d["state"] == "starting" for d in devices)
    health["state"] = "degraded" if bad else "starting" if starting else "ok"
    health["summary"] = summary(health)
    return health


def _recorder(agent: Any) -> dict[str, Any] | None:
    """The flight recorder's status (agent.recorder: recording, dir, degraded...), or None."""
    rec = getattr(agent, "recorder", None)
    return rec.status() if rec is not None else None


def summary(health: dict[str, Any]) -> str:
    """One line for systemd's STATUS=: the halts and speed cap first (``HALTED: emergency stop set by
    console since ...``), then state, devices, links, active source, watchdog, loop."""
    devices = " ".join(f"{d['name']}={d['state']}" for d in health["devices"]) or "none"
    links = " ".join(f"{n}={'up' if l['connected'] else 'down'}" + ("(WARNING)" if l.get("warnings") else "")
                     for n, l in health["links"].items()) or "none"
    loop = "ok" if health["loop"]["keeps_rate"] else "starting" if health["loop"].get("starting") else "slow"
    safety = health.get("safety") or {}
    halt = f"HALTED: {safety['halt']}; " if safety.get("halt") else ""
    if safety.get("speed_cap_mps") is not None:
        halt += f"speed capped at {safety['speed_cap_mps']:g} m/s: {safety.get('speed_cap_reason', '')}; "
    # the motors are not in this line: it changes only with the health (STATUS=, one INFO line per change)
    return (f"{halt}{health['state']}; devices {devices}; links {links}; source {health['active_source'] or '-'}; "
            f"watchdog {health['watchdog']}{' (stopped)' if health['stopped'] else ''}; loop {loop}")


# ----------------------------------------------------------------------------- write


def write_atomically(path: Path, health: dict[str, Any]) -> None:
    """Write ``health`` as JSON to ``path`` via a temporary file and rename (readers never see half a file).

    Raises:
        OSError: the directory is missing or not writable.
    """
    write_text_atomically(path, json.dumps(health), prefix=".status-", mode=0o644)


class StatusReporter:
    """Sends STATUS= on change and refreshes the status file; see the module docstring.

    Args:
        agent: the running agent.app.Agent.
        notify: ``systemd.daemon.notify`` or a stand-in taking one ``KEY=value`` string.
        path: the status file, or None to write none.
        clock: monotonic clock, s.
    """

    def __init__(self, agent: Any, notify: Callable[[str], Any], path: Path | None, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.agent = agent
        self.path = path
        self._notify = notify
        self._clock = clock
        self._sent = ""
        self._sent_at = -MIN_PERIOD_S
        self._written_at = -MIN_PERIOD_S
        self._write_failed = False

    async def step(self) -> None:
        """Look at the health once: send STATUS= if it changed (rate-limited), refresh the file if due."""
        now = self._clock()
        health = gather(self.agent)
        line = health["summary"]
        if line != self._sent and now - self._sent_at >= MIN_PERIOD_S:
            self._notify("STATUS=" + line)
            if self._sent:
                log.info("health: %s", line)
            self._sent, self._sent_at = line, now
        if self.path is not None and now - self._written_at >= MIN_PERIOD_S:
            self._written_at = now
            await asyncio.to_thread(self._write, health)

    def _write(self, health: dict[str, Any]) -> None:
        try:
            write_atomically(self.path, health)
        except OSError as err:
            if not self._write_failed:
                log.warning("cannot write the status file %s (%s): robot-agent status will not see this agent; "
                            "set --status-file or %s", self.path, err, STATUS_ENV)
            self._write_failed = True
        else:
            if self._write_failed:
                log.info("status file %s written again", self.path)
            self._write_failed = False

    async def run(self) -> None:
        """Report until cancelled. A failing health view is logged once and retried."""
        failing = False
        while True:
            try:
                await self.step()
                failing = False
            except Exception:  # noqa: BLE001 - a bug in one health view must not end the reporting
                if not failing:
                    log.exception("gathering the health failed; STATUS= and the status file are not updated")
                failing = True
            await asyncio.sleep(POLL_S)

    def remove(self) -> None:
        """Remove the status file (the agent is stopping)."""
        if self.path is not None:
            try:
                self.path.unlink(missing_ok=True)
            except OSError as err:
                log.warning("cannot remove the status file %s: %s", self.path, err)


# ----------------------------------------------------------------------------- read


def _alive(pid: int) -> bool:
    """True while process ``pid`` runs; a zombie (killed, not yet reaped by its parent) is not running."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process (robot-agent vs the caller)
        pass
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except FileNotFoundError:  # it went just now; without /proc (not Linux) kill() had the answer
        return not os.path.isdir("/proc/self")
    except (OSError, IndexError):
        return True


def read(path: Path, now: float | None = None) -> tuple[int, dict[str, Any] | None, str]:
    """Read a status file. Returns (exit status, health or None, a message for the user)."""
    try:
        health = json.loads(path.read_text())
    except FileNotFoundError:
        return EXIT_NO_AGENT, None, f"no agent is running (no status file {path}; set --status-file or {STATUS_ENV})"
    except (OSError, ValueError) as err:
        return EXIT_NO_AGENT, None, f"cannot read the status file {path}: {err}"
    try:
        if not isinstance(health, dict) or health.get("version") != 1:
            raise ValueError("no version 1")
        pid, written = int(health["pid"]), float(health["t_unix"])
    except (KeyError, TypeError, ValueError):
        return EXIT_NO_AGENT, None, f"{path} is not a robot-agent status file"
    age = (time.time() if now is None else now) - written
    if pid <= 0 or not _alive(pid):
        return EXIT_STALE, health, f"stale: the agent (pid {pid}) is not running"
    if age > STALE_S:
        return EXIT_STALE, health, f"stale: written {age:.0f} s ago; the agent (pid {pid}) is not answering"
    return (EXIT_OK if health.get("state") in ("ok", "starting") else EXIT_DEGRADED), health, ""


def format_table(health: dict[str, Any]) -> str:
    """The health as an aligned text table (one row per device and link, then the control state)."""
    rows = [("agent", health.get("name", ""), f"pid {health.get('pid')}, {health.get('state')}")]
    rows += [(f"device {d['name']}", d["state"], d.get("last_error", "")) for d in health.get("devices", [])]
    for name, link in health.get("links", {}).items():
        extra = f"{link['peers']} peer(s)" if "peers" in link else ""
        rows.append((f"link {name}", "up" if link["connected"] else "down", extra))
        rows += [(f"link {name}", "WARNING", w) for w in link.get("warnings", [])]
    loop = health.get("loop", {})
    rows.append(("control loop", "ok" if loop.get("keeps_rate") else "starting" if loop.get("starting") else "slow",
                 f"{loop.get('achieved_hz')} / {loop.get('rate_hz')} Hz{' (at rest)' if loop.get('resting') else ''}, "
                 f"{loop.get('late_ticks')} late ticks"))
    rows.append(("active source", health.get("active_source") or "-", ""))
    t = health.get("tracks")
    if t is not None:
        rows.append(("motors", "at zero" if t["at_zero"] else "DRIVING",
                     f"duty L {t['duty_left']:+.2f} R {t['duty_right']:+.2f}; speed L {t['left_mps']:+.2f} "
                     f"R {t['right_mps']:+.2f} m/s (commanded {t['cmd_left_mps']:+.2f}/{t['cmd_right_mps']:+.2f})"))
    rows.append(("watchdog", health.get("watchdog", ""), "stop latched" if health.get("stopped") else ""))
    rows += [("fault", f, "") for f in health.get("faults", [])]
    safety = health.get("safety") or {}
    for halt in safety.get("halts", []):
        what = "EMERGENCY STOP" if halt.get("kind") == "estop" else f"failsafe {halt.get('kind')}"
        rows.append((what, "cleared" if halt.get("cleared") else "SET",
                     f"by {halt.get('by')} since {halt.get('since')}: {halt.get('reason')}"))
    if safety.get("speed_cap_mps") is not None:
        rows.append(("speed cap", f"{safety['speed_cap_mps']:g} m/s", safety.get("speed_cap_reason", "")))
    rec = health.get("recorder")
    if rec:
        state = "degraded" if rec.get("degraded") else "recording" if rec.get("recording") else "off"
        rows.append(("recorder", state, rec.get("degraded") or rec.get("dir") or ""))
    w0 = max(len(r[0]) for r in rows)
    w1 = max(len(str(r[1])) for r in rows)
    return "\n".join(f"{a:<{w0}}  {b!s:<{w1}}  {c}".rstrip() for a, b, c in rows)


def report(path: Path, out: Callable[[str], Any]) -> int:
    """``robot-agent status``: print the table (or why there is none) through ``out``; return the exit status."""
    code, health, message = read(path)
    if health is not None:
        out(format_table(health))
    if message:
        out(message)
    return code
