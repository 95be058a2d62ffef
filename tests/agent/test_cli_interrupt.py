"""A field engineer's first steps at the command line: Ctrl-C at `robot-agent selftest`'s question ends the
command with exit 130 and one line, Ctrl-D answers it "no" (the motion test is skipped, the other checks
run); neither prints a traceback (both did: KeyboardInterrupt / EOFError from ``input``). The real
command on a pseudo-terminal, on the simulated tank."""

from __future__ import annotations

import contextlib
import os
import pty
import select
import signal
import sys
import time

import pytest

from tests.conftest import ROOT, sim_config

pytestmark = pytest.mark.timeout(90)

QUESTION = b"[y/N]"


def _selftest_answering(tmp_path, key: bytes, again_s: float = 0.5) -> tuple[int, str]:
    """Run ``python -m agent selftest`` on a pty, type ``key`` at its question (a Ctrl-C again every
    ``again_s`` until the command exits); (exit code, output)."""
    import json

    params = tmp_path / "params.json"
    params.write_text(json.dumps(sim_config()))
    pid, fd = pty.fork()
    if pid == 0:                                     # the child: the command as typed in a terminal
        try:
            os.chdir(ROOT)
            signal.signal(signal.SIGINT, signal.SIG_DFL)   # a runner started in the background ignores it
            os.execv(sys.executable, [sys.executable, "-m", "agent", "selftest", "--config", str(params)])
        finally:        # never back into the forked test runner (a second xdist worker on its channels)
            os._exit(127)
    out, typed, typed_at = b"", False, 0.0
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([fd], [], [], min(0.2, again_s))
            if ready:
                try:
                    data = os.read(fd, 4096)
                except OSError:                      # the child closed the terminal: it exited
                    break
                if not data:
                    break
                out += data
            if QUESTION in out and (not typed or (key == b"\x03" and time.monotonic() - typed_at > again_s)):
                # a Ctrl-C that lands while readline is still setting up waits for more input (CPython's
                # readline module checks its signals only when its select() is interrupted): again
                with contextlib.suppress(OSError):        # the child has just exited
                    os.write(fd, key)
                typed, typed_at = True, time.monotonic()
    finally:
        if time.monotonic() >= deadline:
            os.kill(pid, 9)
        _, status = os.waitpid(pid, 0)
        os.close(fd)
    assert typed, out.decode(errors="replace")
    return os.waitstatus_to_exitcode(status), out.decode(errors="replace")


def test_ctrl_c_at_the_selftest_question_exits_130_without_a_traceback(tmp_path):
    code, out = _selftest_answering(tmp_path, b"\x03")
    assert code == 130, out
    assert "interrupted" in out and "Traceback" not in out and "KeyboardInterrupt" not in out, out


def test_ctrl_c_hammered_at_the_selftest_question_exits_130_without_a_traceback(tmp_path):
    """Ctrl-C every 5 ms until the command exits (an impatient user; a loaded machine's slow exit made
    the test's own second Ctrl-C land there): one lands while the first one unwinds (it raised a
    second KeyboardInterrupt: a traceback and status -2), others during the interpreter's exit (SIGINT
    back at its default action: killed, status -2)."""
    code, out = _selftest_answering(tmp_path, b"\x03", again_s=0.005)
    assert code == 130, out
    assert "interrupted" in out and "Traceback" not in out and "KeyboardInterrupt" not in out, out


def test_ctrl_d_at_the_selftest_question_is_a_no(tmp_path):
    code, out = _selftest_answering(tmp_path, b"\x04")
    assert "Traceback" not in out and "EOFError" not in out, out
    assert "motion test not confirmed" in out, out
    assert code == 0, out                           # the simulated tank passes every other check


def test_run_with_a_status_file_in_a_directory_not_made_yet_makes_it(tmp_path):
    """README's `--status-file logs/status.json` in a fresh clone (no logs/ yet): the directory is made,
    so `robot-agent status` and `robot-agent estop` reach the agent (it logged an ERROR and neither did)."""
    import json
    import subprocess

    params = tmp_path / "params.json"
    cfg = sim_config()
    cfg["drivers"]["cameras"] = []
    params.write_text(json.dumps(cfg))
    status = tmp_path / "logs" / "new" / "status.json"
    env = {k: v for k, v in os.environ.items() if k not in ("NOTIFY_SOCKET", "WATCHDOG_USEC", "RUNTIME_DIRECTORY")}
    proc = subprocess.Popen([sys.executable, "-m", "agent", "run", "--config", str(params), "--status-file",
                             str(status)], cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while not status.exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        assert status.exists(), "no status file"
        got = subprocess.run([sys.executable, "-m", "agent", "status", "--status-file", str(status)], cwd=ROOT,
                             env=env, capture_output=True, text=True, timeout=30)
        assert got.returncode == 0, got.stdout + got.stderr
        got = subprocess.run([sys.executable, "-m", "agent", "estop", "--status-file", str(status)], cwd=ROOT,
                             env=env, capture_output=True, text=True, timeout=30)
        assert got.returncode == 0, got.stdout + got.stderr
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=15)
    assert proc.returncode == 0, err
    assert " ERROR " not in err, err


# ------------------------------------------------------------------ Ctrl-C outside the command's try
#: A command line as agent/__main__.py runs one, SIGINT sent to itself at a chosen moment (a real
#: signal, delivered at once: no timing): ``early`` before the command's try is entered (its imports),
#: ``twice`` a second Ctrl-C while the first one's KeyboardInterrupt unwinds (devices being closed).
_GUARDED = """
import os, signal, sys
from agent.support.sigint import EXIT_INTERRUPTED, GUARD
GUARD.install()
if sys.argv[1] == "early":
    os.kill(os.getpid(), signal.SIGINT)
    print("not reached")
GUARD.catching()
try:
    os.kill(os.getpid(), signal.SIGINT)
    print("not reached")
except KeyboardInterrupt:
    try:
        os.kill(os.getpid(), signal.SIGINT)     # the second Ctrl-C, during the clean-up
        print("clean-up finished", flush=True)
    finally:
        print("interrupted", file=sys.stderr)
    sys.exit(EXIT_INTERRUPTED)
"""


@pytest.mark.parametrize("when", ["early", "twice"])
def test_ctrl_c_before_the_commands_try_or_twice_exits_130_without_a_traceback(when):
    import subprocess

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    got = subprocess.run([sys.executable, "-c", _GUARDED, when], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=30)
    out = got.stdout + got.stderr
    assert got.returncode == 130, out
    assert "interrupted" in got.stderr and "Traceback" not in out and "KeyboardInterrupt" not in out, out
    assert "not reached" not in out, out
    if when == "twice":
        assert "clean-up finished" in got.stdout, out          # the second Ctrl-C did not cut it short
        assert "finishing the clean-up first" in got.stderr, out


def test_python_m_agent_installs_the_guard_first():
    """`python -m agent` handles SIGINT before its own imports (agent/__main__.py's first statements)."""
    import subprocess

    probe = ("import runpy, signal, sys\n"
             "sys.argv = ['agent', '--version']\n"
             "try:\n    runpy.run_module('agent', run_name='__main__')\nexcept SystemExit:\n    pass\n"
             "from agent.support.sigint import GUARD\n"
             "print(GUARD.installed, signal.getsignal(signal.SIGINT) is signal.default_int_handler)\n")
    got = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert got.stdout.split()[-2:] == ["True", "False"], got.stdout + got.stderr
