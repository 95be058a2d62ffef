"""The agent: hardware, control loop, video hub and the protocol adapters, wired once.

Composition, not globals: ``Agent(cfg)`` builds every part from the config and
owns their lifecycle. Used as::

    async with Agent(cfg, config_path="config/params.json") as agent:
        await stop_event.wait()

On exit the control loop first commands zero to the motors and confirms the
write (tracks zero, trajectories stopped) before any adapter closes; then the
adapters are cancelled, each close bounded (:data:`ADAPTER_STOP_S`), then the
video hub and the devices close.

Every adapter runs under a supervisor (:meth:`Agent._supervise`): a ``run()`` that
ends by itself (a bug: they run until cancelled) or raises is logged (with its
traceback, at most every :data:`BUG_LOG_S`), its source is released at once, and
it is started again after :func:`agent.support.ratelimit.backoff_s` (1 s doubling to
30 s), forever; the rest of the agent keeps running.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import importlib
import logging
from typing import TYPE_CHECKING, Any

from agent.config import AgentConfig
from agent.control import ControlLoop
from agent.devices.estopinput import LoopEstop
from agent.devices.hardware import Hardware
from agent.support.lazy import deferred_imports
from agent.support.ratelimit import RateLimitedLog, backoff_s
from agent.devices.simtank import SimTank, serves

if TYPE_CHECKING:
    from agent.ports import Adapter
    from agent.video.hub import VideoHub
    from agent.video.late import LateVideo

log = logging.getLogger(__name__)

#: how long close() waits for the cancelled adapters (their links' closes are bounded shorter), s
ADAPTER_STOP_S = 1.0
#: how long close() waits for the zero duty to be confirmed, s
ZERO_CONFIRM_S = 0.5
#: first and largest pause before an ended adapter is started again, s
RESTART_FIRST_S, RESTART_MAX_S = 1.0, 30.0
#: an adapter's failure is logged with its traceback at most this often, s
BUG_LOG_S = 10.0
#: how long start() waits for ARTEX's first connect to end before the optional work (the other
#: adapters' modules, OpenCV and the video hub) loads anyway, s; and how often it looks, s
FIRST_CONNECT_S, FIRST_CONNECT_POLL_S = 0.5, 0.005
#: the startup objects are frozen out of the garbage collector this long after start() (after the
#: adapters' first connects), s
GC_FREEZE_AFTER_S = 1.0
#: libraries python-socketio loads for its sync client only (python-engineio's engineio.client imports
#: them at the top): the ARTEX adapter uses the asyncio client, so they load unexecuted
#: (agent.support.lazy.deferred_imports), ~50 ms of a start's CPU less before the hub connect
SYNC_CLIENT_ONLY = ("requests", "websocket")
#: the adapters, in the order they are built (= command sources; ARTEX starts first: Agent.start)
ADAPTERS = ("artex", "sim2bot", "robot_msg", "console")


def adapter_modules(cfg: AgentConfig) -> list[str]:
    """The modules the adapters ``cfg`` enables are built from (each loads its peer library:
    python-socketio, websockets, pyzmq, aiohttp), none for a disabled one."""
    mods = []
    if cfg.artex_enabled:
        mods.append("agent.adapters.artex")
    if cfg.sim2bot.enabled:
        mods.append("agent.adapters.sim2bot")
    if cfg.robot_msg.enabled:
        mods.append("agent.adapters.robotmsg")
    if cfg.console.enabled:
        mods.append("agent.console")
    return mods


def _import_all(names: list[str]) -> None:
    for name in names:
        importlib.import_module(name)


async def _cancel_bounded(tasks: list[asyncio.Task]) -> None:
    """Cancel ``tasks`` and wait for them at most :data:`ADAPTER_STOP_S`; one that does not end is
    logged and left behind (the shutdown goes on without it)."""
    for task in tasks:
        task.cancel()
    if not tasks:
        return
    done, pending = await asyncio.wait(tasks, timeout=ADAPTER_STOP_S)
    for task in pending:
        log.error("task %s did not stop within %.0f s of cancellation; shutting down without it",
                  task.get_name(), ADAPTER_STOP_S)
    for task in done:
        with contextlib.suppress(asyncio.CancelledError, Exception):
            task.result()


async def _outwait(future: asyncio.Future) -> None:
    """Wait until ``future`` is done even when cancelled meanwhile (the devices opening on a thread: a
    SIGTERM during the start must not let Agent.close run beside it, the devices then opened after the
    close); a cancellation that came is raised once it is done."""
    cancelled = False
    while not future.done():
        try:
            await asyncio.wait([future])
        except asyncio.CancelledError:
            cancelled = True
    if cancelled:
        raise asyncio.CancelledError


def _freeze_startup_objects() -> None:
    """What startup built lives as long as the agent: keep it out of every later collection, so a
    full one scans only newer objects (scripts/bench_pi.py: gc pauses). Then the collector runs
    again (``robot-agent run`` starts with it off: agent.__main__.cmd_run).

    No collection first: with the collector off since start every object is in generation 0, so
    ``gc.collect()`` here was a full scan of ~80 000 objects that held the GIL for 66-103 ms (the
    control thread's ticks waited behind it) to free ~2 150 cyclic objects, a few hundred KB kept
    instead (gc callbacks in a `scripts/run-sim.sh` agent). ``gc.freeze()`` alone moves the lists.
    The cost: cyclic garbage of the first second (a failed first connect's exception and what it
    holds) is kept for the agent's life instead of freed; RSS after 15 s was the same either way."""
    gc.freeze()
    gc.enable()


class Agent:
    """One robot: see the module docstring.

    Attributes:
        cfg: the validated configuration.
        sim: the simulated tank (agent.devices.simtank.SimTank) when any device is ``sim://``, else None.
        physics: the simulated tank's TankPhysics, or None on real hardware.
        hardware, control, video: the parts (``video``: the VideoHub once started, None without
            cameras); ``adapters``: name -> running adapter.
    """

    def __init__(self, cfg: AgentConfig, *, config_path: str | None = None, logs: Any = None) -> None:
        self.cfg = cfg
        self.config_path = config_path
        self.logs = logs
        self.sim = SimTank(cfg) if serves(cfg) else None
        self.physics = self.sim.physics if self.sim is not None else None
        self.hardware = Hardware.from_config(cfg, self.sim)
        self.video: VideoHub | None = None       # the VideoHub, built by start() after ARTEX's first connect
        self.control = ControlLoop(cfg, self.hardware)
        self.hardware.watch_estop(LoopEstop(self.control))   # the e-stop input, if configured
        from agent.recorder.recorder import Recorder
        self.recorder = Recorder(cfg, self.control)     # the flight recorder (docs/recorder.md)
        self.adapters: dict[str, Adapter] = {}
        self._tasks: list[asyncio.Task] = []
        self._recorder_tasks: list[asyncio.Task] = []
        self._started = False
        self._bugs = RateLimitedLog(log, BUG_LOG_S)
        self.restarts: dict[str, int] = {}
        self._gc_freeze: asyncio.TimerHandle | None = None
        self._late_video: LateVideo | None = None   # ARTEX's VideoPort until the video hub is built

    def _build_adapters(self, names: tuple[str, ...] = ADAPTERS) -> dict[str, Adapter]:
        """Build the enabled adapters among ``names`` into :attr:`adapters` (not started); returns them.

        Each is an agent.ports.Adapter on the RobotPort (the control loop) and the VideoPort: the video
        hub; for ARTEX, which starts before the hub exists, a LateVideo the hub is attached to once
        built (agent.video.late); None without cameras."""
        from agent.ports import Adapter, RobotPort, VideoPort

        cfg = self.cfg
        robot: RobotPort = self.control
        video: VideoPort | None = self.video
        built: dict[str, Adapter] = {}
        if "artex" in names and cfg.artex_enabled:
            from agent.adapters.artex import ArtexAdapter
            if cfg.drivers.cameras and video is None:
                from agent.video.late import LateVideo
                self._late_video = LateVideo(tuple(c.id for c in cfg.drivers.cameras))
                video = self._late_video
            built["artex"] = ArtexAdapter(cfg, robot, video, config_path=self.config_path, logs=self.logs)
            video = self.video
        if "sim2bot" in names and cfg.sim2bot.enabled:
            from agent.adapters.sim2bot import Sim2botAdapter
            built["sim2bot"] = Sim2botAdapter(cfg, robot, video, config_path=self.config_path)
        if "robot_msg" in names and cfg.robot_msg.enabled:
            from agent.adapters.robotmsg import RobotMsgAdapter
            built["robot_msg"] = RobotMsgAdapter(cfg, robot, video, config_path=self.config_path)
        if "console" in names and cfg.console.enabled:
            from agent.console import build_console
            console = build_console(cfg, robot, video)  # None (logged) without a needed token
            if console is not None:
                from agent.recorder.web import RecorderRoutes
                console.routes.extend(RecorderRoutes(self).routes())     # /metrics, /incidents
                built["console"] = console
                links = [a for a in {**self.adapters, **built}.values() if a is not console]
                console.link_warnings = lambda: [w for a in links for w in a.warnings()]
        self.adapters.update(built)
        return built

    def _run_adapters(self, built: dict[str, Adapter]) -> None:
        """Start each adapter under its supervisor (:meth:`_supervise`)."""
        for name, adapter in built.items():
            self._tasks.append(asyncio.create_task(self._supervise(name, adapter), name=f"adapter-{name}"))

    def _first_modules(self) -> None:
        """The ARTEX adapter's modules (python-socketio, aiohttp) when ARTEX is on, and the settings
        temp files a killed write left removed (before anything writes the settings). Blocking.

        The libraries only python-socketio's sync client uses load unexecuted (:data:`SYNC_CLIENT_ONLY`)."""
        if self.cfg.artex_enabled:
            with deferred_imports(SYNC_CLIENT_ONLY):
                _import_all(["agent.adapters.artex"])
        if self.config_path:    # what a settings write killed mid-way (power cut, kill -9) left
            from agent.adapters.artex_settings import remove_stale_temp_files
            remove_stale_temp_files(self.config_path)

    async def _first_connect(self, timeout_s: float) -> None:
        """Wait until ARTEX's first connection attempt has ended (up or failed), at most ``timeout_s``."""
        from agent.ports import LinkState

        artex = self.adapters.get("artex")
        deadline = asyncio.get_running_loop().time() + timeout_s
        while (artex is not None and artex.status().state is LinkState.CONNECTING
               and asyncio.get_running_loop().time() < deadline):
            await asyncio.sleep(FIRST_CONNECT_POLL_S)

    async def start(self) -> None:
        """Open the devices (off the event loop), start the control loop, the adapters and video.

        In this order, so the ARTEX hub connection is behind neither the devices nor optional work:

        1. the devices open on a thread (mostly datasheet waits) while the ARTEX adapter's modules load
           on another; the ARTEX adapter then starts and connects while the devices finish opening
           (a command it takes is queued for the control loop's first tick, as any command is);
        2. once the devices are open, the control loop starts;
        3. once ARTEX's first connect has ended (up or failed; at most :data:`FIRST_CONNECT_S`), the
           optional work: the other adapters' modules and, with cameras, OpenCV and the video hub
           (attached to ARTEX's LateVideo) load on a thread; the hub starts, the other adapters
           (Sim2Bot, robot_msg, the console) start, then the flight recorder.

        On return the devices, the control loop and every adapter are up (``READY=1``)."""
        opening = asyncio.ensure_future(asyncio.to_thread(self.hardware.start))
        try:
            await asyncio.to_thread(self._first_modules)
            self._run_adapters(self._build_adapters(("artex",)))   # connects while the devices open
        finally:
            await _outwait(opening)     # never leave the devices opening on a thread, even when cancelled
        opening.result()
        self.control.start()
        self._started = True
        modules = [m for m in adapter_modules(self.cfg) if m != "agent.adapters.artex"]
        modules += ["agent.video.hub"] if self.cfg.drivers.cameras and self.video is None else []
        modules += ["agent.recorder.writer"] if self.recorder.directory is not None else []   # MCAP: off the loop
        if modules:     # CPU the connect would wait behind (the GIL)
            await self._first_connect(FIRST_CONNECT_S)
            await asyncio.to_thread(_import_all, modules)
        if self.cfg.drivers.cameras and self.video is None:
            from agent.video import hub_from_config
            self.video = hub_from_config(self.cfg)
            self.hardware.add_health_source(self.video.health)
        if self.video is not None:
            self.video.start()
            if self._late_video is not None:
                self._late_video.attach(self.video)
        self._run_adapters(self._build_adapters(("sim2bot", "robot_msg", "console")))
        self.recorder.start()
        self._recorder_tasks = [asyncio.create_task(self.recorder.watch_links(self.adapters), name="recorder-links")]
        if self.video is not None and self.recorder.directory is not None:
            self._recorder_tasks += [asyncio.create_task(self.recorder.watch_camera(self.video, cam),
                                                         name=f"recorder-camera-{cam}")
                                     for cam in self.video.camera_ids]
        self._gc_freeze = asyncio.get_running_loop().call_later(GC_FREEZE_AFTER_S, _freeze_startup_objects)
        log.info("agent %r up: devices %s; adapters %s", self.cfg.name,
                 ", ".join(f"{h.name}={h.state}" for h in self.hardware.health()) or "none",
                 ", ".join(self.adapters) or "none")

    async def _supervise(self, name: str, adapter: Adapter) -> None:
        """Run ``adapter.run()`` forever: when it ends other than by cancellation (a bug: adapters run
        until cancelled) log it, release its source (adapter name = source name) so whatever it drove
        stops now, and start it again after a jittered, capped backoff. Ends only by cancellation."""
        attempt = 0
        while True:
            try:
                await adapter.run()
                err: BaseException | None = None
            except Exception as exc:  # any failure: the supervisor's whole point
                err = exc
            self.restarts[name] = self.restarts.get(name, 0) + 1
            self.control.release(name, f"adapter {name} stopped")
            pause = backoff_s(attempt, RESTART_FIRST_S, RESTART_MAX_S)
            attempt += 1
            self._bugs.log(logging.ERROR, name, "adapter %s stopped unexpectedly (%s); source %s released, "
                           "restarting it in %.1f s; the other adapters keep running", name,
                           "returned" if err is None else f"{type(err).__name__}: {err}", name, pause,
                           exc_info=err is not None)
            await asyncio.sleep(pause)

    async def close(self) -> None:
        """Stop everything: the motors are commanded to zero and the write confirmed first (before any
        adapter closes), then the adapters (bounded), the video hub and the devices."""
        if self._gc_freeze is not None:
            self._gc_freeze.cancel()
        if self._started:
            await asyncio.to_thread(self.control.close, ZERO_CONFIRM_S)
        await _cancel_bounded(self._recorder_tasks)   # before the links close: a shutdown is no lost link
        self._recorder_tasks = []
        await _cancel_bounded(self._tasks)   # an adapter stuck in its peer library must not hold the exit
        self._tasks.clear()
        await asyncio.to_thread(self.recorder.close)
        if self.video is not None:
            await asyncio.to_thread(self.video.close)
        await asyncio.to_thread(self.hardware.close)
        if self.sim is not None:
            await asyncio.to_thread(self.sim.close)
        self._started = False

    async def __aenter__(self) -> "Agent":
        try:
            await self.start()
        except BaseException:
            await self.close()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
