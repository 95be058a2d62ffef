"""A rouse that comes after a poller decided to skip its polls at rest but before its wait began
(agent.support.beat.RestPolls: ``skip_to`` then ``wait``) must end that wait at once: the control thread
calls ``fire`` whenever its woken tick is done, whatever the event loop is doing then. Lost, the moving
tank's telemetry waits for the next rest tick's slot (up to a rest period and a slot, ~0.17 s)."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from collections import Counter
from collections.abc import Callable

import pytest

from agent.support import beat
from agent.adapters.artex_streams import ArtexStreams
from agent.adapters.sim2bot import Sim2botAdapter
from agent.config import AgentConfig
from agent.testing.clock import VirtualTimeLoop
from agent.testing.running_agent import sim_config
from tests.adapters.test_rest_polls import START, Reader, RestingTank, Socket
from tests.adapters.test_sim2bot_telemetry import snap

REST_S = 0.15


class Tank:
    """The robot port's rest hooks: the rest period and the rouse listener (the control loop's ``on_rouse``)."""

    rest_period_s = REST_S

    def __init__(self) -> None:
        self.listeners: list[Callable[[], None]] = []

    def on_rouse(self, listener: Callable[[], None]) -> None:
        self.listeners.append(listener)

    def rouse_from_another_thread(self) -> None:
        """What the control thread does after a tick woken at rest published its snapshot."""
        caller = threading.Thread(target=lambda: [listener() for listener in self.listeners])
        caller.start()
        caller.join()


async def test_a_rouse_after_the_skip_was_decided_and_before_the_wait_ends_the_wait_at_once():
    loop = asyncio.get_running_loop()
    tank = Tank()
    rest = beat.RestPolls(tank)
    now = loop.time()
    resting = dataclasses.replace(snap(1, now), resting=True)
    rest.note()                                     # the poll reads the resting snapshot
    period = 0.1
    at, skipped = rest.skip_to(now + period, period, resting)
    assert skipped >= 1 and at > now + REST_S       # the loop rests: the next poll after the next rest tick
    tank.rouse_from_another_thread()                # a command woke a tick: it moves now
    started = loop.time()
    roused = await rest.wait(at - loop.time())
    waited = loop.time() - started
    assert roused, f"the rouse was lost: the poll came at the rest tick's slot, {waited * 1000:.0f} ms later"
    assert rest.roused == 1



class StillTank(RestingTank):
    """tests.adapters.test_rest_polls.RestingTank whose rest ticks read what a still tank reads: the same
    values every time (its encoder counts do not grow), so at rest only the keepalives send telemetry."""

    def _tick(self, resting: bool, vx: float = 0.0) -> None:
        counts = self.snap.tracks.left_counts
        super()._tick(resting, vx)
        if resting:
            tracks = dataclasses.replace(self.snap.tracks, left_counts=counts, right_counts=counts)
            self.snap = dataclasses.replace(self.snap, tracks=tracks)


def run_phased(seconds: float, rouse_at: float, phase_s: float):
    """tests.adapters.test_rest_polls.run on a :class:`StillTank` whose rest ticks are ``phase_s`` off the event
    loop's 20 ms grid, as the real control thread's are (its clock has nothing to do with the grid)."""
    loop = VirtualTimeLoop(START)
    tank = StillTank(loop)
    tank.snap = dataclasses.replace(tank.snap, t_mono_s=START - phase_s)      # rest ticks at START - phase + k * 0.15
    ws = Socket(loop)
    telem: list[tuple[float, dict]] = []

    async def emit(event: str, data: dict) -> bool:
        telem.append((loop.time(), data["payload"]))
        return True

    cfg = AgentConfig.model_validate(sim_config(max_send_freq=0.1, telem_can=True, video_can=False))
    streams = ArtexStreams(cfg, Reader(tank, "artex"), None, emit, lambda: None, Counter(), clock=loop.time)
    s2b_cfg = AgentConfig.model_validate(sim_config(sim2bot={"enabled": True, "telemetry_hz": 30.0}))
    try:
        room = Sim2botAdapter(s2b_cfg, Reader(tank, "sim2bot"), None, clock=loop.time).rooms[0]
        loop.run_for(seconds, tank.run(START + rouse_at), streams._telem_loop(), room._telemetry(ws))
    finally:
        loop.close()
    return tank, telem, ws


@pytest.mark.parametrize("phase_s", [0.0, 0.007, 0.013])
@pytest.mark.parametrize("rouse_at", [round(2.9 + 0.013 * k, 3) for k in range(24)])
def test_a_rouse_at_rest_is_read_at_once_whatever_the_pollers_phase(rouse_at, phase_s):
    """A still tank (rest ticks every 0.15 s, ``phase_s`` off the grid), both pollers on the production grid in
    virtual time, roused at moments spread over two keepalives' neighbourhood: the woken tick's snapshot is read
    by both pollers within one grid slot, and its telemetry sent (docs/artex.md "telem": "A tick woken at rest
    ... ends the wait at once: its telemetry is read right after that tick"), whether the poller was skipping
    polls then or waiting for a poll of its own schedule that comes before the next rest tick (ARTEX's 10 Hz
    polls between 0.15 s rest ticks). On the running agent a command at rest showed in ARTEX telem after
    38-88 ms in 2 of 5 trials, 2-4 ms otherwise."""
    tank, telem, ws = run_phased(4.0, rouse_at, phase_s)
    woke = tank.moving_at
    assert woke == pytest.approx(START + rouse_at)
    for name in ("artex", "sim2bot"):
        after = [t for t in tank.reads[name] if t >= woke]
        assert after and after[0] - woke <= beat.SLOT_S, (name, round(after[0] - woke, 3) if after else None)
    moving_telem = [t for t, d in telem if d["speed"] != 0.0]
    moving_packets = [t for t, m in ws.sent if m["sensors"][0]["vx_mps"] != 0.0]
    assert moving_telem[0] - woke <= beat.SLOT_S, ("artex telem", round(moving_telem[0] - woke, 3))
    assert moving_packets[0] - woke <= beat.SLOT_S, ("sim2bot packet", round(moving_packets[0] - woke, 3))
