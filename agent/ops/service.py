"""Service glue: systemd notifications, signals, and the run loop of ``robot-agent run``.

systemd (``Type=notify``, ``WatchdogSec=``) is told, through the well-kept
``systemd-python`` library (``systemd.daemon.notify``):

- ``READY=1`` once the devices have been opened and the control loop runs;
- ``WATCHDOG=1`` every ``WatchdogSec/3``, sent from the event loop and only while
  the control loop keeps its rate (``ControlLoop.keeps_rate()``), so a stalled
  event loop *or* a stalled control loop lets systemd restart the service;
- ``STATUS=<one-line health>`` whenever the health changes, at most once a second
  (agent.ops.status.StatusReporter, which also keeps the status file that
  ``robot-agent status`` reads);
- ``STOPPING=1`` when shutdown starts.

SIGTERM / SIGINT stop the agent: the motors are commanded to zero (trajectories
stopped) and the write confirmed first, before any link closes (one during the start cuts the start
short: ARTEX may already drive then); each link's close
is bounded, so the process exits within 2 s even with a hung peer
(agent.app.Agent.close; tests/agent/test_service.py measures it).
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from pathlib import Path
from typing import Callable

from agent.app import Agent
from agent.config import AgentConfig
from agent.ops.estopctl import ControlServer, socket_path
from agent.ops.estopstore import EstopStore, store_path
from agent.ops.status import StatusReporter

log = logging.getLogger(__name__)


def _systemd_notify() -> Callable[[str], bool]:
    """``systemd.daemon.notify`` when systemd-python is installed, else a no-op that reports why once."""
    try:
        from systemd import daemon  # type: ignore[import-not-found]
    except ImportError:
        if os.environ.get("NOTIFY_SOCKET"):
            log.error("NOTIFY_SOCKET is set but systemd-python is not installed: "
                      "install robot-agent[systemd] (scripts/install.sh does)")
        return lambda state: False
    return lambda state: bool(daemon.notify(state))


def watchdog_period_s() -> float | None:
    """A third of ``WATCHDOG_USEC`` (set by systemd for this PID), s; None when not watched."""
    usec = os.environ.get("WATCHDOG_USEC")
    pid = os.environ.get("WATCHDOG_PID")
    if not usec or (pid and pid != str(os.getpid())):
        return None
    try:
        return max(0.05, int(usec) / 1e6 / 3.0)
    except ValueError:
        log.error("WATCHDOG_USEC=%r is not a number; systemd watchdog pings disabled", usec)
        return None


async def _watchdog_pings(agent: Agent, notify: Callable[[str], bool], period_s: float) -> None:
    healthy = True
    while True:
        await asyncio.sleep(period_s)
        keeps = agent.control.keeps_rate()
        if keeps:
            notify("WATCHDOG=1")
        if keeps != healthy:
            healthy = keeps
            if keeps:
                log.info("control loop keeps its rate again; systemd watchdog fed")
            else:
                log.error("control loop is missing its rate; systemd watchdog not fed",
                          extra={"fault": "control loop rate"})


def _handle_signals(loop: asyncio.AbstractEventLoop, stop: asyncio.Event | None) -> None:
    """SIGTERM/SIGINT set ``stop``; with ``stop`` None, the handlers are removed."""
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            if stop is None:
                loop.remove_signal_handler(sig)
            else:
                loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError):
            log.debug("cannot change the handler of %s here", sig)


async def _start_unless_stopped(agent: Agent, stop: asyncio.Event) -> bool:
    """Start ``agent``, unless ``stop`` is set first: a SIGTERM during the start cuts it short (the start
    is cancelled) instead of waiting it out, when ARTEX may already drive the tank. Returns True when
    started; raises what the start raised. The caller closes the agent either way (Agent.close: the
    motors to zero first if the control loop runs)."""
    starting = asyncio.ensure_future(agent.start())
    stopping = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait([starting, stopping], return_when=asyncio.FIRST_COMPLETED)
    except BaseException:
        starting.cancel()
        await asyncio.wait([starting])
        raise
    finally:
        stopping.cancel()
    if not starting.done():
        starting.cancel()
        await asyncio.wait([starting])
        if starting.cancelled():
            return False
    starting.result()
    return True


async def run(cfg: AgentConfig, *, config_path: str | None = None, logs=None,
              stop: asyncio.Event | None = None, status_file: Path | None = None) -> int:
    """Run the agent until SIGTERM/SIGINT (or ``stop`` is set). Returns the exit status.

    Args:
        status_file: where the health is written for ``robot-agent status`` (None: none). The control
            socket of ``robot-agent estop`` sits beside it and the e-stop is kept across restarts in
            the state directory or beside it (agent.ops.estopstore); None: neither.
    """
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    _handle_signals(loop, stop)
    notify = _systemd_notify()
    agent = Agent(cfg, config_path=config_path, logs=logs)
    reporter = StatusReporter(agent, notify, status_file)
    store = EstopStore(store_path(status_file)) if status_file is not None else None
    server = ControlServer(agent.control, socket_path(status_file)) if status_file is not None else None
    tasks: list[asyncio.Task] = []
    try:
        if store is not None:   # before any adapter connects: a kept e-stop holds from the first tick
            kept = await asyncio.to_thread(store.load)
            if kept is not None:
                agent.control.restore_estop(kept)
            agent.control.on_estop_change(store.save)
        if await _start_unless_stopped(agent, stop):
            if server is not None:
                await server.start()
            notify("READY=1")
            tasks.append(asyncio.create_task(reporter.run(), name="status"))
            period = watchdog_period_s()
            if period is not None:
                tasks.append(asyncio.create_task(_watchdog_pings(agent, notify, period), name="watchdog-pings"))
            await stop.wait()
            log.info("stopping")
        else:
            log.info("stopping during start: the start is cut short")
    finally:
        notify("STOPPING=1")
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        reporter.remove()
        if server is not None:
            await server.close()
        await agent.close()
        if store is not None:
            await asyncio.to_thread(store.close)
        _handle_signals(loop, None)
    log.info("stopped")
    return 0
