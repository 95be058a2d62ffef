"""A field engineer's keys at the command line: Ctrl-C at `robot-agent selftest`'s question ends the
command with exit 130 and one line, Ctrl-D answers it "no" (the motion test is skipped, the other checks
run); neither prints a traceback (both did: KeyboardInterrupt / EOFError from ``input``). The real
command on a pseudo-terminal, on the simulated tank."""

from __future__ import annotations

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


def _selftest_answering(tmp_path, key: bytes) -> tuple[int, str]:
    """Run ``python -m agent selftest`` on a pty, type ``key`` at its question; (exit code, output)."""
    import json

    params = tmp_path / "params.json"
    params.write_text(json.dumps(sim_config()))
    pid, fd = pty.fork()
    if pid == 0:                                     # the child: the command as typed in a terminal
        os.chdir(ROOT)
        signal.signal(signal.SIGINT, signal.SIG_DFL)   # a runner started in the background ignores it
        os.execv(sys.executable, [sys.executable, "-m", "agent", "selftest", "--config", str(params)])
    out, typed = b"", False
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([fd], [], [], 0.2)
            if ready:
                try:
                    data = os.read(fd, 4096)
                except OSError:                      # the child closed the terminal: it exited
                    break
                if not data:
                    break
                out += data
            if not typed and QUESTION in out:
                os.write(fd, key)
                typed = True
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


def test_ctrl_d_at_the_selftest_question_is_a_no(tmp_path):
    code, out = _selftest_answering(tmp_path, b"\x04")
    assert "Traceback" not in out and "EOFError" not in out, out
    assert "motion test not confirmed" in out, out
    assert code == 0, out                           # the simulated tank passes every other check
