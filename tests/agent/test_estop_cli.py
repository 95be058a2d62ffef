"""``robot-agent estop`` against a running agent process: the control socket, the e-stop kept across
a restart, STATUS= / the status file / ``robot-agent status`` while it holds, and the CLI's errors
(agent.ops.estopctl, agent.ops.service)."""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from agent.ops.estopctl import EXIT_DENIED, EXIT_DONE, EXIT_NO_AGENT, EXIT_REFUSED, command
from agent.ops.estopstore import EstopStore
from agent.model import Halt
from tests.agent.test_status import NotifySocket, status_cli, wait_until
from tests.conftest import ROOT, sim_config

pytestmark = pytest.mark.timeout(120)

ENV_DROP = ("WATCHDOG_USEC", "WATCHDOG_PID", "JOURNAL_STREAM", "ROBOT_AGENT_STATUS_FILE", "STATE_DIRECTORY",
            "ROBOT_AGENT_CONTROL_SOCKET", "ROBOT_AGENT_ESTOP_FILE", "RUNTIME_DIRECTORY")


def estop_cli(status_file: Path, *args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "agent", "estop", "--status-file", str(status_file), *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=30, **kw)


class Agent:
    """``python -m agent run`` on the simulated tank with a status file and a stand-in notify socket."""

    def __init__(self, tmp_path: Path, name: str) -> None:
        cfg = sim_config(drivers={"cameras": []})
        params = tmp_path / "params.json"
        params.write_text(json.dumps(cfg))
        self.status_file = tmp_path / "status.json"
        self.notify = NotifySocket(tmp_path / f"notify-{name}.sock")
        env = {k: v for k, v in os.environ.items() if k not in ENV_DROP}
        env["NOTIFY_SOCKET"] = self.notify.path
        self.proc = subprocess.Popen([sys.executable, "-m", "agent", "run", "--config", str(params),
                                      "--status-file", str(self.status_file)],
                                     cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        assert self.notify.wait(lambda s: s == "READY=1", 40), self.notify.states

    def health(self) -> dict:
        try:
            return json.loads(self.status_file.read_text())
        except (OSError, ValueError):
            return {}

    def stop(self) -> str:
        self.proc.send_signal(signal.SIGTERM)
        try:
            _, err = self.proc.communicate(timeout=20)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.communicate()
            self.notify.close()
        assert self.proc.returncode == 0, err
        return err


def test_estop_set_shown_kept_across_a_restart_and_released(tmp_path):
    agent = Agent(tmp_path, "a")
    try:
        sock = tmp_path / "control.sock"
        assert stat.S_ISSOCK(sock.stat().st_mode) and stat.S_IMODE(sock.stat().st_mode) == 0o660

        none = estop_cli(agent.status_file, "--release")            # release without an e-stop
        assert none.returncode == EXIT_REFUSED and "no emergency stop is set" in none.stdout, none

        done = estop_cli(agent.status_file, "--reason", "hands on the tracks")
        assert done.returncode == EXIT_DONE, done
        assert "EMERGENCY STOP set: emergency stop set by cli since" in done.stdout
        again = estop_cli(agent.status_file)
        assert again.returncode == EXIT_DONE and "already set" in again.stdout and "hands on the tracks" in again.stdout

        line = agent.notify.wait(lambda s: s.startswith("STATUS=HALTED: emergency stop set by cli"), 10)
        assert line and "hands on the tracks" in line, agent.notify.states
        assert wait_until(lambda: agent.health().get("safety", {}).get("estop") is True, 10)
        (halt,) = agent.health()["safety"]["halts"]
        assert (halt["kind"], halt["by"], halt["reason"]) == ("estop", "cli", "hands on the tracks")
        table = status_cli(agent.status_file).stdout
        row = next(l for l in table.splitlines() if l.startswith("EMERGENCY STOP"))
        assert "SET" in row and "by cli since" in row and "hands on the tracks" in row, table
        kept = json.loads((tmp_path / "estop.json").read_text())
        assert kept["estop"]["by"] == "cli" and kept["estop"]["since_unix_s"] == pytest.approx(halt["since_unix_s"],
                                                                                                abs=1e-3)
        # the state request and bad requests on the socket: answered, nothing changes
        for raw, ok in ((b'{"op": "state"}\n', True), (b"garbage\n", False), (b'{"op": "fly"}\n', False),
                        (b'{"op": "estop", "reason": 5}\n', False), (b"x" * 5000 + b"\n", False)):
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.settimeout(10)
                s.connect(str(sock))
                s.sendall(raw)
                reply = json.loads(s.makefile("rb").readline())
            assert reply["ok"] is ok, (raw[:40], reply)
            if ok:
                assert reply["safety"]["estop"] is True
            else:
                assert reply["error"] == "bad_request" and reply["message"]
    finally:
        err = agent.stop()
    assert "control socket: bad request from uid" in err
    assert not sock.exists()

    # restarted (as systemd's Restart= or the watchdog would): it comes back e-stopped, same setter and time
    agent = Agent(tmp_path, "b")
    try:
        line = agent.notify.wait(lambda s: s.startswith("STATUS=HALTED: emergency stop set by cli"), 10)
        assert line and "hands on the tracks" in line, agent.notify.states
        assert wait_until(lambda: agent.health().get("safety", {}).get("estop") is True, 10)
        assert agent.health()["safety"]["halts"][0]["since_unix_s"] == pytest.approx(halt["since_unix_s"], abs=1e-3)

        released = estop_cli(agent.status_file, "--release")
        assert released.returncode == EXIT_DONE and "emergency stop released" in released.stdout, released
        assert wait_until(lambda: agent.health().get("safety", {}).get("estop") is False, 10)
        assert agent.notify.wait(lambda s: s.startswith("STATUS=") and "HALTED" not in s, 10), agent.notify.states
        assert wait_until(lambda: json.loads((tmp_path / "estop.json").read_text())["estop"] is None, 10)
    finally:
        agent.stop()

    gone = estop_cli(agent.status_file)                               # no agent running
    assert gone.returncode == EXIT_NO_AGENT and "no agent is running" in gone.stdout, gone


def test_cli_with_no_agent_names_the_socket(tmp_path):
    res = estop_cli(tmp_path / "status.json", "--release")
    assert res.returncode == EXIT_NO_AGENT
    assert f"nothing listens on {tmp_path / 'control.sock'}" in res.stdout
    stale = tmp_path / "control.sock"                                # left behind by a killed agent
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(stale))
    s.close()
    res = estop_cli(tmp_path / "status.json")
    assert res.returncode == EXIT_NO_AGENT and "no agent is running" in res.stdout


def test_cli_permission_denied(tmp_path):
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    path = tmp_path / "control.sock"
    listener.bind(str(path))
    listener.listen()
    os.chmod(path, 0o660)
    try:
        if os.geteuid() == 0:   # root passes every permission check: ask as user nobody in a forked child
            os.chmod(tmp_path, 0o755)
            code, text = _as_nobody(lambda out: command(path, False, "", out))
        else:
            os.chmod(path, 0o000)
            res = estop_cli(tmp_path / "status.json")
            code, text = res.returncode, res.stdout
    finally:
        listener.close()
    assert code == EXIT_DENIED, text
    assert f"permission denied on {path}" in text and "sudo robot-agent estop" in text


def _as_nobody(fn) -> tuple[int, str]:
    """Run ``fn(out)`` in a child process as uid/gid 65534; returns (its result, what it printed)."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:                                      # child: no pytest machinery from here on
        try:
            os.close(read_fd)
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            lines: list[str] = []
            code = fn(lines.append)
            os.write(write_fd, json.dumps([code, "\n".join(lines)]).encode())
        finally:
            os._exit(0)
    os.close(write_fd)
    with os.fdopen(read_fd, "rb") as f:
        data = f.read()
    os.waitpid(pid, 0)
    code, text = json.loads(data)
    return code, text


def test_an_unreadable_kept_estop_starts_the_robot_halted(tmp_path):
    path = tmp_path / "estop.json"
    path.write_text("{not json")
    halt = EstopStore(path).load(now_unix_s=1e9)
    assert halt is not None and halt.kind == "estop" and halt.by == "robot" and "unknown" in halt.reason
    path.write_text(json.dumps({"version": 1, "estop": {"by": "cli", "reason": "r", "since_unix_s": 5.0}}))
    assert EstopStore(path).load().since_unix_s == 5.0
    path.write_text(json.dumps({"version": 1, "estop": None}))
    assert EstopStore(path).load() is None
    assert EstopStore(tmp_path / "missing.json").load() is None
    path.write_text('{"version":1,"estop":{"by":"cli","reason":"r","since_unix_s":5},"estop":null}')
    twice = EstopStore(path).load()         # set or released? unknown: the robot halted
    assert twice is not None and twice.by == "robot" and "'estop' given twice" in twice.reason
    fifo = tmp_path / "fifo.json"           # its open would block for ever: refused, the robot halted
    os.mkfifo(fifo)
    halt_fifo = EstopStore(fifo).load()
    assert halt_fifo is not None and halt_fifo.by == "robot" and "a FIFO, not a regular file" in halt_fifo.reason
    store = EstopStore(tmp_path / "kept.json")
    store.save(halt).result(5)
    assert EstopStore(tmp_path / "kept.json").load().reason == halt.reason
    store.save(None).result(5)
    assert EstopStore(tmp_path / "kept.json").load() is None
    missing_dir = EstopStore(tmp_path / "no-such-dir" / "estop.json")
    missing_dir.save(halt).result(5)               # logged, not raised: the e-stop itself still holds
    assert not (tmp_path / "no-such-dir").exists()
    store.close()
    missing_dir.close()


BAD_KEPT = {   # content of estop.json -> a word its problem names
    '{"version":1,"estop":{"by":"cli","reason":"x","since_unix_s":NaN}}': "since_unix_s",
    '{"version":1,"estop":{"by":"cli","reason":"x","since_unix_s":Infinity}}': "since_unix_s",
    '{"version":1,"estop":{"by":"cli","reason":"x","since_unix_s":-1}}': "since_unix_s",
    '{"version":1,"estop":{"by":"cli","reason":"x","since_unix_s":1e300}}': "since_unix_s",
    '{"version":1,"estop":{"by":"cli","reason":"x","since_unix_s":1' + "0" * 400 + '}}': "since_unix_s",
    '{"version":1,"estop":{"by":"cli","reason":"x","since_unix_s":"5"}}': "since_unix_s",
    '{"version":1,"estop":{"by":"cli","reason":"x","since_unix_s":true}}': "since_unix_s",
    '{"version":1,"estop":{"by":"artex","reason":"x","since_unix_s":5}}': "artex",
    '{"version":1,"estop":{"by":5,"reason":"x","since_unix_s":5}}': "estop.by",
    '{"version":1,"estop":{"by":"cli","reason":["x"],"since_unix_s":5}}': "estop.reason",
    '{"version":1,"estop":{"by":"cli","since_unix_s":5}}': "reason",
    '{"version":1,"estop":["cli","x",5]}': "list",
    '{"version":1}': "version",
    '[1]': "version",
    "[" * 100000: "longer than",
    "[" * 60000: "nested 60000 deep",
    '{"version":1,"estop":' + "[" * 5 + "]" * 5 + "}": "list",
    " " * 70000: "longer than",
}


def test_an_invalid_kept_estop_starts_the_robot_estopped_by_robot_naming_file_and_problem(tmp_path):
    path = tmp_path / "estop.json"
    for text, problem in BAD_KEPT.items():
        path.write_text(text)
        halt = EstopStore(path).load(now_unix_s=1e9)             # never raises
        assert halt is not None and (halt.kind, halt.by, halt.since_unix_s) == ("estop", "robot", 1e9), text[:80]
        assert str(path) in halt.reason and problem in halt.reason, (text[:80], halt.reason)
        halt.describe(), halt.as_dict()                            # shown everywhere without an error
    path.write_bytes(b'{"version":1,"estop":{"by":"cli","reason":"\xff","since_unix_s":5}}')
    assert EstopStore(path).load(now_unix_s=1e9).by == "robot"
    # valid ones keep their setter and time, "robot" included (an unknown e-stop kept, then restarted)
    for by in ("console", "cli", "input", "robot"):
        path.write_text(json.dumps({"version": 1, "estop": {"by": by, "reason": "r [x]", "since_unix_s": 5}}))
        assert EstopStore(path).load() == Halt("estop", "r [x]", by, 5.0)


def test_long_reasons_set_the_estop_hostile_requests_are_answered_and_a_nan_kept_estop_starts_halted(tmp_path):
    (tmp_path / "estop.json").write_text('{"version":1,"estop":{"by":"cli","reason":"x","since_unix_s":NaN}}')
    agent = Agent(tmp_path, "c")                                 # started, not crashed
    try:
        assert wait_until(lambda: agent.health().get("safety", {}).get("estop") is True, 10)
        (halt,) = agent.health()["safety"]["halts"]
        assert halt["by"] == "robot" and "estop.json" in halt["reason"] and "since_unix_s" in halt["reason"], halt
        assert estop_cli(agent.status_file, "--release").returncode == EXIT_DONE

        sock = tmp_path / "control.sock"
        for raw in (b'{"op":"state","x":' + b"[" * 3000 + b"\n",
                    b'{"op":"state","x":' + b"[" * 2000 + b"]" * 2000 + b"}\n"):
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.settimeout(10)
                s.connect(str(sock))
                s.sendall(raw)
                reply = json.loads(s.makefile("rb").readline())
            assert reply["ok"] is False and reply["error"] == "bad_request" and "deep" in reply["message"], reply
        assert estop_cli(agent.status_file).returncode == EXIT_DONE
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:    # which op? neither: refused
            s.settimeout(10)
            s.connect(str(sock))
            s.sendall(b'{"op":"estop","op":"release"}\n')
            reply = json.loads(s.makefile("rb").readline())
        assert reply["ok"] is False and "'op' given twice" in reply["message"], reply
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:    # asked now, not the status file's last write
            s.settimeout(10)
            s.connect(str(sock))
            s.sendall(b'{"op":"state"}\n')
            reply = json.loads(s.makefile("rb").readline())
        assert reply["ok"] is True and reply["safety"]["estop"] is True, reply
        assert estop_cli(agent.status_file, "--release").returncode == EXIT_DONE

        for reason in ("x" * 5000, "é" * 700, "\U0001f6d1" * 700):
            done = estop_cli(agent.status_file, "--reason", reason)
            assert done.returncode == EXIT_DONE and "EMERGENCY STOP set" in done.stdout, done
            assert "the reason was cut to 200 of its" in done.stdout, done.stdout
            halts = lambda: agent.health().get("safety", {}).get("halts") or [{}]    # noqa: E731
            assert wait_until(lambda: halts()[0].get("reason", "").startswith(reason[:100]), 10), halts()
            assert halts()[0]["by"] == "cli"
            released = estop_cli(agent.status_file, "--release")
            assert released.returncode == EXIT_DONE, released
    finally:
        agent.stop()
