"""The event loop thread's CPU split by who it ran for: each adapter, the console, video, the recorder.

scripts/bench_side.py's agent child installs :class:`LoopSplit` before the agent starts. Every
callback the loop runs (``asyncio.events.Handle._run``: a task's step, a transport's read or write,
a timer's callback) is timed on the thread's CPU clock (``time.thread_time``) and charged to a part
by the code it runs:

- a task's step: the file of the task's coroutine (an ARTEX task is in agent/adapters/artex*.py or in
  python-socketio / python-engineio, which only ARTEX uses);
- a transport's read or write: the module of the transport's protocol (aiohttp's client protocol is
  ARTEX's engine.io connection, aiohttp's web protocol the console's server, ``websockets`` the
  Sim2Bot client);
- a ``functools.partial`` or a timer that queues a callback with ``call_soon``: that callback;
- any other callback: the file of its function (asyncio's own, e.g. a shield's or a gather's done
  callback, a ``Queue.get`` task: "asyncio plumbing", charged to nobody in particular).

What no callback took, the rest of the thread's CPU, is the loop's own work between callbacks
(``epoll_wait``, the timer heap, ``_run_once``): "asyncio (select, timers)". Two ``thread_time`` calls
per callback (about 1 us each here, some 300 callbacks a second all on) is the meter's own cost; it
is charged to the callbacks it brackets.
"""

from __future__ import annotations

import asyncio.events
import functools
import threading
import time

__all__ = ["LoopSplit", "part_of_file"]

#: (path fragment, part), first match wins; paths use "/" (site-packages and agent/ alike)
RULES = (
    ("/agent/adapters/artex", "ARTEX"), ("/agent/compat/socketio", "ARTEX"), ("/socketio/", "ARTEX"), ("/engineio/", "ARTEX"),
    ("aiohttp/client", "ARTEX"), ("aiohttp.client", "ARTEX"),
    ("/agent/adapters/sim2bot", "Sim2Bot"), ("/websockets/", "Sim2Bot"), ("websockets.", "Sim2Bot"),
    ("/agent/adapters/robotmsg", "robot_msg"), ("/zmq/", "robot_msg"), ("zmq.", "robot_msg"),
    ("/agent/video/", "video (shared)"),
    ("/agent/console/", "console"), ("aiohttp/web", "console"), ("aiohttp.web", "console"),
    ("/agent/recorder/", "recorder"),
    ("/agent/support/beat", "beat timers"),
    ("/asyncio/", "asyncio plumbing (futures, shields, queues)"),
)
ASYNCIO = "asyncio (select, timers)"
OTHER = "other callbacks"


def part_of_file(path: str) -> str:
    """The part a file or module name belongs to (:data:`RULES`), or :data:`OTHER`."""
    for fragment, part in RULES:
        if fragment in path:
            return part
    return OTHER


def _code_file(fn: object) -> str | None:
    fn = getattr(fn, "__func__", fn)
    code = getattr(fn, "__code__", None)
    return code.co_filename if code is not None else None


def owner(callback: object, args: tuple = ()) -> str:
    """The part a loop callback (called with ``args``) runs for."""
    if isinstance(callback, functools.partial):
        return owner(callback.func, callback.args)
    if getattr(callback, "__name__", "") in ("call_soon", "call_soon_threadsafe") and args:
        return owner(args[0], args[1:])       # a timer that queues the real callback for the next pass
    target = getattr(callback, "__self__", None)
    if isinstance(target, asyncio.Task):
        coro = target.get_coro()
        code = getattr(coro, "cr_code", None) or getattr(coro, "gi_code", None)
        return part_of_file(code.co_filename) if code is not None else OTHER
    if isinstance(target, asyncio.BaseTransport):
        proto = getattr(target, "_protocol", None)
        return part_of_file(type(proto).__module__) if proto is not None else OTHER
    path = _code_file(callback)
    if path is None and target is not None:
        path = type(target).__module__
    return part_of_file(path) if path else OTHER


class LoopSplit:
    """Charges the CPU of each callback run on one thread's event loop to a part (:func:`owner`).

    Install on the loop's thread before the loop runs the work to split; :meth:`take` gives the CPU
    seconds per part so far. Callbacks of other threads' loops are run as before, not counted.
    """

    def __init__(self) -> None:
        self.cpu: dict[str, float] = {}
        self._thread = threading.get_ident()
        self._orig = asyncio.events.Handle._run
        split = self

        def _run(handle: asyncio.events.Handle) -> None:
            if threading.get_ident() != split._thread:
                return split._orig(handle)
            cb, args = handle._callback, handle._args     # before the run: a callback may cancel its handle
            t0 = time.thread_time()
            try:
                return split._orig(handle)
            finally:
                part = owner(cb, args or ())
                split.cpu[part] = split.cpu.get(part, 0.0) + time.thread_time() - t0

        asyncio.events.Handle._run = _run       # type: ignore[method-assign]

    def take(self) -> dict[str, float]:
        """CPU seconds per part so far (a copy)."""
        return dict(self.cpu)

    def remove(self) -> None:
        """Put asyncio's own ``Handle._run`` back."""
        asyncio.events.Handle._run = self._orig     # type: ignore[method-assign]
