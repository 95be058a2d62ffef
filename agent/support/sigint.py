"""Ctrl-C in the ``robot-agent`` command: exit 130 with one line, never a traceback, whenever it comes.

Python's own SIGINT handler raises KeyboardInterrupt wherever the main thread is. The command line
(agent/__main__.py) catches it around the command and exits 130, but two windows were left: a Ctrl-C
before the command's ``try`` (the module's imports, the argument parsing) and a second Ctrl-C while the
first one unwinds (devices being closed, the motors commanded to zero, the "interrupted" line, the
interpreter's exit). Either raised an uncaught KeyboardInterrupt: a traceback, and Python then kills
itself with SIGINT (exit status -2, not 130). A loaded machine widens both windows, and a user who
sees no prompt come back presses Ctrl-C again.

:data:`GUARD` (installed by the command's entry point, first thing) handles SIGINT instead:

- before the command's ``try`` (:meth:`SigintGuard.catching` not yet called): nothing is open and
  nothing was driven, so it writes ``interrupted`` and exits 130 at once;
- the first Ctrl-C after that raises KeyboardInterrupt, as Python's handler does (the command's
  handler closes what it opened and exits 130);
- a later Ctrl-C is ignored, with one line saying so: the first one's unwinding finishes (devices
  closed, motors zeroed). SIGQUIT (Ctrl-\\) and SIGKILL still end a process that hangs there;
- once the command has its exit status (:meth:`SigintGuard.done`), SIGINT is ignored: the
  interpreter's exit sets SIGINT back to its default action (kill) before the process ends, and a
  Ctrl-C in that window ended the process with status -2 instead of the command's 130 (or 0).

Only a process's own command line installs it (``robot-agent``, ``python -m agent``); a program
that calls ``agent.__main__.main(argv)`` keeps its own SIGINT handling. ``robot-agent run`` hands
SIGINT to its event loop (agent/ops/service.py) while the agent runs.
"""

from __future__ import annotations

import contextlib
import os
import signal
from types import FrameType

#: Exit status of a command ended by Ctrl-C: 128 + SIGINT, as a shell reports it.
EXIT_INTERRUPTED = 130


class SigintGuard:
    """The command line's SIGINT handler; see the module docstring. One per process (:data:`GUARD`)."""

    def __init__(self) -> None:
        self.installed = False
        self._catching = False      # the command's try is entered: a KeyboardInterrupt reaches its handler
        self._seen = 0              # SIGINTs handled so far

    def install(self) -> None:
        """Handle SIGINT from now on, unless something else already does (a shell started the
        process with SIGINT ignored, as for a background job: it stays ignored). Idempotent."""
        if self.installed or signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
            return
        signal.signal(signal.SIGINT, self._on_sigint)
        self.installed = True

    def catching(self) -> None:
        """The command's ``try ... except KeyboardInterrupt`` is entered (called first thing inside it)."""
        self._catching = True

    def done(self) -> None:
        """The command has its exit status: SIGINT ignored from now on, if this guard handles it.
        The interpreter's exit restores SIGINT's default action (CPython's signal module, at
        finalization) before the process ends: a Ctrl-C then killed it (status -2), the exit status
        already decided lost; an ignored SIGINT is left ignored."""
        handler = signal.getsignal(signal.SIGINT)     # Python's own again after `run`'s event loop
        if self.installed and (handler == self._on_sigint or handler is signal.default_int_handler):
            signal.signal(signal.SIGINT, signal.SIG_IGN)

    def _on_sigint(self, signum: int, frame: FrameType | None) -> None:
        self._seen += 1
        if self._seen > 1:
            if self._seen == 2:
                _say(b"\ninterrupted: finishing the clean-up first (devices closed, motors zeroed)\n")
            return
        if not self._catching:
            _say(b"\ninterrupted\n")
            os._exit(EXIT_INTERRUPTED)
        raise KeyboardInterrupt


def _say(line: bytes) -> None:
    """``line`` to stderr's descriptor, straight (a signal handler: no buffered stream); never raises."""
    with contextlib.suppress(OSError):
        os.write(2, line)


#: The process's one guard.
GUARD = SigintGuard()
