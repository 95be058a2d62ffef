"""Health reporting: STATUS= to a real NOTIFY_SOCKET as a device is lost and found, the status
file and ``robot-agent status`` (agent.ops.status, agent.ops.service)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agent.ops.status import (EXIT_DEGRADED, EXIT_NO_AGENT, EXIT_OK, EXIT_STALE, STALE_S, StatusReporter, gather,
                          read, summary, write_atomically)
from drivers.emulators.roboclaw import RoboclawEmulator
from tests.conftest import ROOT, running_agent, sim_config, wait_for, wait_until

pytestmark = pytest.mark.timeout(90)


class NotifySocket:
    """A unix datagram socket standing in for systemd's notify socket."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(self.path)
        self.states: list[str] = []

    def wait(self, predicate, timeout_s: float) -> str | None:
        """The first state line (received from now on) for which ``predicate`` holds, or None."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                data = self.sock.recv(65536)
            except socket.timeout:
                return None
            for line in data.decode().splitlines():
                self.states.append(line)
                if predicate(line):
                    return line
        return None

    def close(self) -> None:
        self.sock.close()


def status_cli(status_file: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "agent", "status", "--status-file", str(status_file)],
                          cwd=ROOT, capture_output=True, text=True, timeout=30)


def test_status_follows_a_motor_controller_unplugged_and_plugged_back(tmp_path):
    pytest.importorskip("systemd.daemon", reason="systemd-python (robot-agent[systemd]) is not installed")
    notify = NotifySocket(tmp_path / "notify.sock")
    link = tmp_path / "roboclaw"                      # like /dev/robot/roboclaw: a udev-style symlink
    emulator = RoboclawEmulator(link=str(link))
    emulator.start()
    cfg = sim_config(drivers={"cameras": [], "motor": {"port": str(link)}}, control={"rate_hz": 20})
    params = tmp_path / "params.json"
    params.write_text(json.dumps(cfg))
    status_file = tmp_path / "status.json"
    env = dict(os.environ, NOTIFY_SOCKET=notify.path)
    for name in ("WATCHDOG_USEC", "WATCHDOG_PID", "JOURNAL_STREAM", "ROBOT_AGENT_STATUS_FILE"):
        env.pop(name, None)
    proc = subprocess.Popen([sys.executable, "-m", "agent", "run", "--config", str(params),
                             "--status-file", str(status_file)],
                            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        assert notify.wait(lambda s: s == "READY=1", 30), notify.states
        healthy = notify.wait(lambda s: s.startswith("STATUS=ok;") and "motor=ok" in s, 15)
        assert healthy, notify.states
        assert "imu=ok" in healthy and "source -" in healthy and "loop ok" in healthy, healthy
        assert wait_until(lambda: status_cli(status_file).returncode == EXIT_OK, 10, 0.1)
        ok = status_cli(status_file)
        assert any(l.split()[:3] == ["device", "motor", "ok"] for l in ok.stdout.splitlines()), ok.stdout

        emulator.unplug()
        lost = notify.wait(lambda s: s.startswith("STATUS=degraded;") and "motor=lost" in s, 20)
        assert lost, notify.states
        assert wait_until(lambda: status_cli(status_file).returncode == EXIT_DEGRADED, 10, 0.1)
        degraded = status_cli(status_file)
        rows = [l.split() for l in degraded.stdout.splitlines()]
        assert ["device", "motor", "lost"] in [r[:3] for r in rows], degraded.stdout
        assert ["device", "imu", "ok"] in [r[:3] for r in rows], degraded.stdout
        assert any(r[0] == "fault" and r[1].startswith("motor") for r in rows), degraded.stdout

        emulator.replug()
        found = notify.wait(lambda s: s.startswith("STATUS=ok;") and "motor=ok" in s, 20)
        assert found, notify.states
        assert wait_until(lambda: status_cli(status_file).returncode == EXIT_OK, 10, 0.1)

        proc.send_signal(signal.SIGTERM)
        assert notify.wait(lambda s: s == "STOPPING=1", 15), notify.states
        _, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        notify.close()
        emulator.close()
    assert proc.returncode == 0, err
    assert not status_file.exists()                   # removed at stop: no agent now
    gone = status_cli(status_file)
    assert gone.returncode == EXIT_NO_AGENT and "no agent is running" in gone.stdout




async def test_status_is_sent_on_change_at_most_once_a_second(tmp_path):
    now = [0.0]
    sent: list[str] = []
    cfg = sim_config(drivers={"cameras": []}, control={"rate_hz": 20})
    async with running_agent(cfg) as agent:
        reporter = StatusReporter(agent, sent.append, tmp_path / "status.json", clock=lambda: now[0])
        assert await wait_for(lambda: gather(agent)["state"] == "ok", 10)
        await reporter.step()
        assert len(sent) == 1 and sent[0].startswith("STATUS=ok;") and "motor=ok" in sent[0]
        await reporter.step()                          # unchanged: nothing new
        assert len(sent) == 1
        agent.sim.motor_emulator.unplug()
        assert await wait_for(lambda: "motor=lost" in gather(agent)["summary"], 10)
        now[0] = 0.5
        await reporter.step()                          # changed, but within the second: held back
        assert len(sent) == 1
        now[0] = 1.0
        await reporter.step()
        assert len(sent) == 2 and sent[1].startswith("STATUS=degraded;") and "motor=lost" in sent[1]
        written = json.loads((tmp_path / "status.json").read_text())
        assert written["state"] == "degraded" and written["pid"] == os.getpid()
        assert {"name": "motor", "state": "lost"}.items() <= written["devices"][0].items()
        assert written["summary"] == summary(written)


async def test_read_tells_healthy_degraded_stale_and_missing_apart(tmp_path):
    path = tmp_path / "status.json"
    assert read(path)[0] == EXIT_NO_AGENT
    path.write_text("{not json")
    assert read(path)[0] == EXIT_NO_AGENT
    async with running_agent(sim_config(drivers={"cameras": []}, control={"rate_hz": 20})) as agent:
        assert await wait_for(lambda: gather(agent)["state"] == "ok", 10)
        health = gather(agent)
    write_atomically(path, health)
    assert read(path)[0] == EXIT_OK
    write_atomically(path, {**health, "state": "degraded"})
    assert read(path)[0] == EXIT_DEGRADED
    write_atomically(path, {**health, "t_unix": time.time() - STALE_S - 1})
    code, _, message = read(path)
    assert code == EXIT_STALE and "not answering" in message
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    write_atomically(path, {**health, "pid": int(dead.stdout)})
    code, _, message = read(path)
    assert code == EXIT_STALE and "is not running" in message
    write_atomically(path, {key: value for key, value in health.items() if key != "pid"})
    assert read(path)[0] == EXIT_NO_AGENT
    assert oct(path.stat().st_mode & 0o777) == oct(0o644)


def test_a_killed_agent_not_yet_reaped_is_stale_at_once(tmp_path):
    """After ``kill -9`` the process is a zombie until its parent reaps it: kill(pid, 0) still
    succeeds then, but the agent is gone and status must say so at once."""
    from agent.ops.status import _alive

    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert _alive(proc.pid)
        os.kill(proc.pid, signal.SIGKILL)
        deadline = time.monotonic() + 5
        while _alive(proc.pid) and time.monotonic() < deadline:   # the kill lands; nobody reaps it yet
            time.sleep(0.01)
        assert not _alive(proc.pid)
    finally:
        proc.kill()
        proc.wait()


def test_summary_and_table_lead_with_the_halts():
    from agent.model import Halt, SafetyState
    from agent.ops.status import format_table

    health = {"state": "ok", "devices": [{"name": "motor", "state": "ok"}], "links": {}, "active_source": "",
              "watchdog": "idle", "stopped": False, "loop": {"keeps_rate": True}, "faults": [],
              "safety": SafetyState().as_dict()}
    assert summary(health).startswith("ok; devices motor=ok")
    health["safety"] = SafetyState((Halt("estop", "hands on the tracks", "cli", 1_764_612_000.0),
                                    Halt("tilt", "roll 40 deg", "robot", 1_764_612_005.0, cleared=True)),
                                   0.3, "battery low").as_dict()
    line = summary(health)
    assert line.startswith("HALTED: emergency stop set by cli since 2025-12-01 18:00:00 UTC: hands on the tracks; "
                           "tilt failsafe set by robot since 2025-12-01 18:00:05 UTC: roll 40 deg (condition cleared")
    assert "speed capped at 0.3 m/s: battery low; ok; devices motor=ok" in line
    rows = format_table({**health, "name": "tank", "pid": 1}).splitlines()
    assert any(r.split()[:3] == ["EMERGENCY", "STOP", "SET"] and "by cli since 2025-12-01T18:00:00Z: hands on" in r
               for r in rows), rows
    assert any(r.split()[:3] == ["failsafe", "tilt", "cleared"] for r in rows), rows
    assert any(r.split()[:4] == ["speed", "cap", "0.3", "m/s"] for r in rows), rows


async def test_status_shows_the_duty_and_track_speed_at_a_glance(tmp_path):
    from agent.commands import BaseVelocity
    from agent.ops.status import format_table

    cfg = sim_config(drivers={"cameras": []})
    async with running_agent(cfg) as agent:
        at_rest = gather(agent)
        assert at_rest["tracks"]["at_zero"]
        row = next(l for l in format_table(at_rest).splitlines() if l.startswith("motors"))
        assert row.split()[1:6] == ["at", "zero", "duty", "L", "+0.00"]

        def driving() -> bool:
            agent.control.submit("robot_msg", BaseVelocity(0.4, 0.0))
            return gather(agent)["tracks"]["left_mps"] > 0.1

        assert await wait_for(driving, 5)
        moving = gather(agent)
        assert not moving["tracks"]["at_zero"] and moving["tracks"]["duty_left"] > 0.0
        assert "motors" not in moving["summary"]                    # STATUS= changes with the health only
        row = next(l for l in format_table(moving).splitlines() if l.startswith("motors"))
        assert "DRIVING" in row and "duty L +0." in row and "m/s" in row
        write_atomically(tmp_path / "status.json", moving)
        assert json.loads((tmp_path / "status.json").read_text())["tracks"]["duty_right"] > 0.0
