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
from agent.support.ratelimit import RateLimitedLog, backoff_s
from agent.devices.simtank import SimTank, serves

if TYPE_CHECKING:
    from agent.ports import Adapter
    from agent.video.hub import VideoHub

log = logging.getLogger(__name__)

#: how long close() waits for the cancelled adapters (their links' closes are bounded shorter), s
ADAPTER_STOP_S = 1.0
#: how long close() waits for the zero duty to be confirmed, s
ZERO_CONFIRM_S = 0.5
#: first and largest pause before an ended adapter is started again, s
RESTART_FIRST_S, RESTART_MAX_S = 1.0, 30.0
#: an adapter's failure is logged with its traceback at most this often, s
BUG_LOG_S = 10.0
#: the startup objects are frozen out of the garbage collector this long after start() (after the
#: adapters' first connects, which a full collection on the event loop would delay), s
GC_FREEZE_AFTER_S = 1.0


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


def _freeze_startup_objects() -> None:
    """What startup built lives as long as the agent: keep it out of every later collection, so a
    full one scans only newer objects (scripts/bench_pi.py: gc pauses)."""
    gc.collect()
    gc.freeze()


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
        self.video: VideoHub | None = None       # the VideoHub, built by start() (its OpenCV loads while the devices open)
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

    def _build_adapters(self) -> None:
        """One adapter per enabled protocol: each an agent.ports.Adapter on the RobotPort (the
        control loop) and the VideoPort (the video hub, or None)."""
        from agent.ports import Adapter, RobotPort, VideoPort

        cfg = self.cfg
        robot: RobotPort = self.control
        video: VideoPort | None = self.video
        built: dict[str, Adapter] = {}
        if cfg.artex_enabled:
            from agent.adapters.artex import ArtexAdapter
            built["artex"] = ArtexAdapter(cfg, robot, video, config_path=self.config_path, logs=self.logs)
        if cfg.sim2bot.enabled:
            from agent.adapters.sim2bot import Sim2botAdapter
            built["sim2bot"] = Sim2botAdapter(cfg, robot, video, config_path=self.config_path)
        if cfg.robot_msg.enabled:
            from agent.adapters.robotmsg import RobotMsgAdapter
            built["robot_msg"] = RobotMsgAdapter(cfg, robot, video, config_path=self.config_path)
        if cfg.console.enabled:
            from agent.console import build_console
            console = build_console(cfg, robot, video)  # None (logged) without a needed token
            if console is not None:
                from agent.recorder.web import RecorderRoutes
                console.routes.extend(RecorderRoutes(self).routes())     # /metrics, /incidents
                built["console"] = console
                links = [a for a in built.values() if a is not console]
                console.link_warnings = lambda: [w for a in links for w in a.warnings()]
        self.adapters.update(built)

    async def start(self) -> None:
        """Open the devices (off the event loop), start the control loop, video and adapters.

        The adapters' modules load on a second thread while the devices open (opening is mostly
        waiting on device delays; loading is CPU): the hub connection is not behind both."""
        modules = adapter_modules(self.cfg) + (["agent.video.hub"] if self.cfg.drivers.cameras else [])
        await asyncio.gather(asyncio.to_thread(self.hardware.start), asyncio.to_thread(_import_all, modules))
        if self.cfg.drivers.cameras and self.video is None:
            from agent.video import hub_from_config
            self.video = hub_from_config(self.cfg)
            self.hardware.add_health_source(self.video.health)
        if self.video is not None:
            self.video.start()
        self.control.start()
        self._started = True
        if self.config_path:    # what a settings write killed mid-way (power cut, kill -9) left
            from agent.adapters.artex_settings import remove_stale_temp_files
            await asyncio.to_thread(remove_stale_temp_files, self.config_path)
        self._build_adapters()
        for name, adapter in self.adapters.items():
            self._tasks.append(asyncio.create_task(self._supervise(name, adapter), name=f"adapter-{name}"))
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
        for task in self._recorder_tasks:   # before the links close: a shutdown is no lost link
            task.cancel()
        await asyncio.gather(*self._recorder_tasks, return_exceptions=True)
        self._recorder_tasks = []
        for task in self._tasks:
            task.cancel()
        if self._tasks:
            # bounded: an adapter stuck in its peer library must not keep the motors from stopping
            done, pending = await asyncio.wait(self._tasks, timeout=ADAPTER_STOP_S)
            for task in pending:
                log.error("adapter task %s did not stop within %.0f s of cancellation; shutting down without it",
                          task.get_name(), ADAPTER_STOP_S)
            for task in done:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    task.result()
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
