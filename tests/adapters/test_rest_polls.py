"""Telemetry polls that follow the control loop's rest (agent.support.beat.RestPolls; docs/sim2bot.md
"Telemetry", docs/artex.md "telem"): a still tank's ARTEX telem and Sim2Bot telemetry pollers read its
snapshots at the rest ticks' rate, not at their own, keep their keepalives, and a tick woken at rest
(ControlLoop.on_rouse) has its telemetry read at once. Run with production pauses (the shared grid) on
agent.testing.clock.VirtualTimeLoop: polls and wake-ups are counted, no wall-clock waits; then the real
control loop's hook on a running agent."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections import Counter
from collections.abc import Callable

import pytest

from agent.adapters.artex_streams import ArtexStreams
from agent.adapters.artex_telem import SETTLE_POLLS, TelemGate, telemetry
from agent.adapters.sim2bot import Sim2botAdapter
from agent.config import AgentConfig
from agent.model import Snapshot
from agent.support import beat
from agent.testing.clock import VirtualTimeLoop
from agent.testing.running_agent import sim_config
from tests.adapters.test_sim2bot_telemetry import DESC, snap

START = 7000.0
REST_S = 0.15


class RestingTank:
    """The robot port's reads a poller makes, fed by :meth:`run`: a resting snapshot every ``REST_S`` (the
    rest ticks), or one every 20 ms once :meth:`rouse` was called (a command woke a tick: it moves).
    Counts the reads at each distinct time (one per poll)."""

    description = DESC
    rest_period_s = REST_S

    def __init__(self, loop: VirtualTimeLoop) -> None:
        self.loop = loop
        self.snap = dataclasses.replace(snap(1, loop.time()), resting=True)
        self.reads: dict[str, list[float]] = {}
        self.listeners: list[Callable[[], None]] = []
        self.moving_at: float | None = None
        self.reader = ""

    def on_rouse(self, listener: Callable[[], None]) -> None:
        self.listeners.append(listener)

    def snapshot(self) -> Snapshot:
        times = self.reads.setdefault(self.reader, [])
        if not times or times[-1] != self.loop.time():
            times.append(self.loop.time())
        return self.snap

    def samples_since(self, seq: int, limit: int = 256) -> list[Snapshot]:
        return [self.snap] if self.snap.seq > seq else []

    def _tick(self, resting: bool, vx: float = 0.0) -> None:
        s = self.snap
        self.snap = dataclasses.replace(snap(s.seq + 1, self.loop.time(), vx=vx, x=s.odom.x_m + vx * 0.02),
                                        resting=resting)

    async def run(self, rouse_at: float | None = None) -> None:
        """Rest ticks; at ``rouse_at`` a woken tick (moving), then ticks at 50 Hz."""
        while True:
            nxt = self.snap.t_mono_s + (REST_S if self.snap.resting else 0.02)
            if rouse_at is not None and self.snap.resting and nxt > rouse_at:
                await asyncio.sleep(rouse_at - self.loop.time())
                self._tick(False, vx=0.4)
                self.moving_at = self.loop.time()
                for listener in self.listeners:     # as the control thread does after the woken tick
                    listener()
                continue
            await asyncio.sleep(nxt - self.loop.time())
            self._tick(self.snap.resting, vx=0.0 if self.snap.resting else 0.4)


class Reader:
    """Tags the tank's reads with the poller that makes them."""

    def __init__(self, tank: RestingTank, name: str) -> None:
        self._tank, self._name = tank, name
        self.description, self.rest_period_s = tank.description, tank.rest_period_s

    def on_rouse(self, listener: Callable[[], None]) -> None:
        self._tank.on_rouse(listener)

    def snapshot(self) -> Snapshot:
        self._tank.reader = self._name
        return self._tank.snapshot()

    def samples_since(self, seq: int, limit: int = 256) -> list[Snapshot]:
        return self._tank.samples_since(seq, limit)


class Socket:
    def __init__(self, loop: VirtualTimeLoop) -> None:
        self.loop = loop
        self.sent: list[tuple[float, dict]] = []

    async def send(self, text: str) -> None:
        self.sent.append((self.loop.time(), json.loads(text)))


def run(seconds: float, rouse_at: float | None = None, keepalive_s: float = 1.0):
    loop = VirtualTimeLoop(START)
    tank = RestingTank(loop)
    ws = Socket(loop)
    telem: list[tuple[float, dict]] = []

    async def emit(event: str, data: dict) -> bool:
        telem.append((loop.time(), data["payload"]))
        return True

    cfg = AgentConfig.model_validate(sim_config(max_send_freq=0.1, telem_can=True, video_can=False,
                                                artex={"telem_keepalive_s": keepalive_s}))
    streams = ArtexStreams(cfg, Reader(tank, "artex"), None, emit, lambda: None, Counter(), clock=loop.time)
    s2b_cfg = AgentConfig.model_validate(sim_config(sim2bot={"enabled": True, "telemetry_hz": 30.0,
                                                             "telemetry_keepalive_s": keepalive_s}))
    try:
        room = Sim2botAdapter(s2b_cfg, Reader(tank, "sim2bot"), None, clock=loop.time).rooms[0]
        loop.run_for(seconds, tank.run(None if rouse_at is None else START + rouse_at),
                     streams._telem_loop(), room._telemetry(ws))
    finally:
        loop.close()
    return loop, tank, telem, ws


def test_a_still_tanks_pollers_read_at_the_rest_ticks_rate_and_keep_their_keepalives():
    seconds = 6.0
    loop, tank, telem, ws = run(seconds)
    rest_hz = 1 / REST_S
    artex, s2b = tank.reads["artex"], tank.reads["sim2bot"]
    # at most one poll per rest tick (plus the first), against 10 and 30 polls a second on their own schedules
    assert len(artex) <= seconds * rest_hz + 2, len(artex)
    assert len(s2b) <= seconds * rest_hz + 2, len(s2b)
    assert len(artex) >= seconds * rest_hz * 0.8 and len(s2b) >= seconds * rest_hz * 0.8     # each rest tick read
    # the loop wakes for the rest ticks (the tank's own timer here) and once for both pollers' polls that
    # follow them (the same slot), the keepalives' polls of each apart
    assert loop.wakeups <= 2 * seconds * rest_hz + 2 * seconds + 2, loop.wakeups
    # every poll reads a snapshot newer than the last poll's (none found nothing new), on the grid
    for times in (artex, s2b):
        for t in times[1:]:
            assert t == pytest.approx(beat.nearest_slot(t), abs=1e-6)
    # the keepalives: at least one a second, as when every poll was made (keepalive + one period + half a slot)
    for times, period in (([t for t, _ in telem], 0.1), ([t for t, _ in ws.sent], 1 / 30)):
        assert len(times) >= seconds - 1
        gaps = [b - a for a, b in zip(times, times[1:])]
        assert max(gaps) <= 1.0 + period + beat.SLOT_S / 2 + 1e-6, gaps


def test_a_rouse_at_rest_has_the_moving_tanks_telemetry_read_and_sent_at_once():
    rouse_at = 3.05
    loop, tank, telem, ws = run(5.0, rouse_at=rouse_at)
    woke = tank.moving_at
    assert woke == pytest.approx(START + rouse_at)
    for times in (tank.reads["artex"], tank.reads["sim2bot"]):
        after = [t for t in times if t >= woke]
        assert after and after[0] - woke <= beat.SLOT_S, (woke, after[:3])    # within one beat of the rouse
    moving_telem = [t for t, d in telem if d["speed"] != 0.0]
    moving_packets = [t for t, m in ws.sent if m["sensors"][0]["vx_mps"] != 0.0]
    assert moving_telem[0] - woke <= beat.SLOT_S and moving_packets[0] - woke <= beat.SLOT_S
    # moving: the pollers are back on their own rates
    s2b_after = [t for t in tank.reads["sim2bot"] if t > woke + 0.5]
    assert len(s2b_after) >= 1.4 * 30 * 0.9


def test_the_polls_skipped_at_rest_count_towards_a_settled_value():
    """TelemGate.skip: a value within its deadband of the sent one is sent after SETTLE_POLLS polls, made or
    skipped, as if each were made (quiet_polls says how many may be skipped)."""
    sent = telemetry(snap(1, 0.0))
    crept = telemetry(dataclasses.replace(snap(1, 0.0), gripper=0.752))     # 0.002 below the 0.005 deadband
    made, skipping = TelemGate(), TelemGate()
    for gate in (made, skipping):
        assert gate.due(sent)
        gate.mark_sent(sent)
    polls_made = [made.due(crept) for _ in range(SETTLE_POLLS + 1)]
    assert polls_made.index(True) == SETTLE_POLLS
    assert not skipping.due(crept)
    quiet = skipping.quiet_polls()
    assert quiet == SETTLE_POLLS - 1        # polls 1 .. SETTLE_POLLS - 1 (0 was made) answer False
    skipping.skip(quiet)
    assert skipping.due(crept)              # the poll the made polls sent at
    skipping.mark_sent(crept)
    assert skipping.quiet_polls() is None   # the sent dict: any number of polls is quiet


@pytest.fixture(scope="module")
def bridge():
    from agent.testing.sim2bot_bridge import Bridge
    with Bridge() as b:
        yield b


@pytest.mark.filterwarnings("ignore:connect\\(\\) must be used as a context manager")
async def test_on_a_running_agent_the_polls_rest_and_a_command_at_rest_is_in_the_next_telemetry(bridge):
    """The real control loop: while it rests the Sim2Bot poller skips its polls; a base_velocity at rest
    wakes a tick, whose hook (ControlLoop.on_rouse) has the poller read it at once; the controller sees
    the tank move (a loose bound: the tank needs a few ticks to ramp)."""
    from agent.testing.running_agent import running_agent, wait_for
    from agent.testing.sim2bot_bridge import agent_params, controller

    async with running_agent(agent_params(bridge, telemetry_hz=30)) as agent, controller(bridge) as robot:
        seen = []
        robot.on_telemetry(seen.append)
        room = agent.adapters["sim2bot"].rooms[0]
        assert await wait_for(lambda: agent.control.tick_stats().resting and room._rest.skipped > 30, 20), \
            "the standing tank's loop never rested, or its telemetry polls never followed"
        assert room._rest.roused == 0
        robot.base_velocity(vx=0.3)
        assert await wait_for(lambda: room._rest.roused >= 1, 5), "the command at rest woke no telemetry poll"

        def moving() -> bool:
            odometry = next(s for s in seen[-1].sensors if s["name"] == "odometry")
            return odometry["vx_mps"] > 0.0
        assert await wait_for(moving, 5)


def test_a_rouse_between_a_polls_read_and_its_wait_keeps_the_next_poll_on_the_schedule():
    """The woken tick's snapshot may have come after the poll read the resting one: nothing is skipped then."""
    loop = VirtualTimeLoop(START)
    try:
        tank = RestingTank(loop)
        rest = beat.RestPolls(tank)
        assert tank.listeners == [rest.fire]
        resting = tank.snap
        rest.note()
        # rests: the schedule's poll at +0.1 skipped, the next one in the grid's slot after the rest tick + margin
        assert rest.skip_to(START + 0.1, 0.1, resting) == (pytest.approx(START + 0.18), 1)     # 0.15 + 0.02 -> its slot
        # a keepalive's poll (the schedule's first at or after the limit) comes first: kept
        assert rest.skip_to(START + 0.04, 0.05, resting, limit=START + 0.13) == (pytest.approx(START + 0.14), 2)
        rest.note()
        tank.listeners[0]()                 # the control thread's call, no wait pending
        assert rest.skip_to(START + 0.1, 0.1, resting) == (START + 0.1, 0)
        rest.note()                         # the next poll read after the rouse: skips again
        assert rest.skip_to(START + 0.1, 0.1, resting)[1] == 1
        assert beat.RestPolls(Reader(tank, "x")).rest_s == REST_S and beat.RestPolls(object()).rest_s is None
    finally:
        loop.close()


class FullPath:
    """A transport whose write buffer holds ``size`` bytes from ``since`` to ``until`` (loop time): the path is
    slow then."""

    def __init__(self, loop: VirtualTimeLoop, since: float, until: float, size: int = 1 << 20) -> None:
        self.loop, self.since, self.until, self.size = loop, since, until, size

    def is_closing(self) -> bool:
        return False

    def get_write_buffer_size(self) -> int:
        return self.size if self.since <= self.loop.time() < self.until else 0

    def get_extra_info(self, name: str, default=None):
        return default


def test_a_packet_the_full_path_held_back_at_rest_goes_out_at_the_next_poll_not_the_next_rest_tick():
    loop = VirtualTimeLoop(START)
    tank = RestingTank(loop)
    ws = Socket(loop)
    ws.transport = path = FullPath(loop, float("inf"), float("inf"))
    cfg = AgentConfig.model_validate(sim_config(sim2bot={"enabled": True, "telemetry_hz": 30.0}))
    changed: list[float] = []

    async def ticks() -> None:
        """Rest ticks; the one after 2 s carries a stop, and the path is full for 0.2 s from it: the poll
        after that tick (0.17-0.19 s on) finds it full."""
        while True:
            await asyncio.sleep(tank.snap.t_mono_s + REST_S - loop.time())
            now = loop.time()
            stop = now >= START + 2.0
            if stop and not changed:
                changed.append(now)
                path.since, path.until = now, now + 0.2
            tank.snap = dataclasses.replace(tank.snap, seq=tank.snap.seq + 1, t_mono_s=now, stopped=stop)

    try:
        room = Sim2botAdapter(cfg, tank, None, clock=loop.time).rooms[0]
        loop.run_for(3.0, ticks(), room._telemetry(ws))
    finally:
        loop.close()
    assert room.telemetry_skipped >= 1
    stopped = [t for t, m in ws.sent if next(s for s in m["sensors"] if s["name"] == "control")["stopped"]]
    # the path clears 0.2 s after the tick: the held packet goes at the schedule's next poll (1/30 s), not
    # after the next rest tick (0.15 + 0.17 s on)
    assert stopped and stopped[0] <= changed[0] + 0.2 + 1 / 30 + beat.SLOT_S, (changed, stopped[:2])
