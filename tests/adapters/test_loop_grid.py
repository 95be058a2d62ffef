"""The adapters' periodic senders on the event loop's shared wake-up grid (agent/support/beat.py).

ARTEX telem polls (every ``max_send_freq``) and Sim2Bot telemetry polls (``telemetry_hz``) run with
their production pauses (no injected sleep) beside a 50 Hz publisher on robot_msg's slots: each
keeps its rate, and the loop wakes only in the publisher's slots. On
agent.testing.clock.VirtualTimeLoop: a real asyncio loop on virtual time, no wall-clock waits.
"""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from agent.adapters.artex_streams import ArtexStreams
from agent.adapters.sim2bot import Sim2botAdapter
from agent.config import AgentConfig
from agent.model import Snapshot
from agent.support import beat
from agent.testing.clock import VirtualTimeLoop
from agent.testing.running_agent import sim_config
from tests.adapters.test_sim2bot_telemetry import SnapshotSource, Socket

START = 5000.003
SECONDS = 2.0


class Polls(SnapshotSource):
    """A robot that moves on at every read (every poll sends) and notes when it was read."""

    def __init__(self, loop: VirtualTimeLoop) -> None:
        super().__init__(loop)      # the loop's time() is the clock
        self.times: list[float] = []

    def snapshot(self) -> Snapshot:
        self.times.append(self._clock.time())
        return super().snapshot()


async def publisher(loop: asyncio.AbstractEventLoop, slots: list[float]) -> None:
    """robot_msg's RobotState schedule: the slots k / 50 Hz (agent/adapters/robotmsg.py)."""
    while True:
        fired = loop.create_future()
        loop.call_at(beat.slot_index(loop.time(), 0.02) * 0.02, fired.set_result, None)
        await fired
        slots.append(loop.time())


def run(max_send_freq: float, telemetry_hz: float) -> tuple[VirtualTimeLoop, Polls, Polls, Socket, list[float]]:
    loop = VirtualTimeLoop(START)
    artex_robot, s2b_robot = Polls(loop), Polls(loop)
    ws = Socket(loop)
    slots: list[float] = []
    sent: list[dict] = []

    async def emit(event: str, data: dict) -> bool:
        sent.append(data)
        return True

    cfg = AgentConfig.model_validate(sim_config(max_send_freq=max_send_freq, telem_can=True, video_can=False))
    streams = ArtexStreams(cfg, artex_robot, None, emit, lambda: None, Counter(), clock=loop.time)
    s2b_cfg = AgentConfig.model_validate(sim_config(sim2bot={"enabled": True, "telemetry_hz": telemetry_hz,
                                                             "telemetry_keepalive_s": 0.0}))
    try:
        room = Sim2botAdapter(s2b_cfg, s2b_robot, None, clock=loop.time).rooms[0]
        loop.run_for(SECONDS, streams._telem_loop(), room._telemetry(ws), publisher(loop, slots))
    finally:
        loop.close()
    return loop, artex_robot, s2b_robot, ws, slots


@pytest.mark.parametrize("max_send_freq, telemetry_hz", [(0.05, 30.0), (0.1, 30.0), (0.03, 20.0)])
def test_telemetry_polls_keep_their_rates_and_wake_the_loop_only_in_the_50_hz_slots(max_send_freq, telemetry_hz):
    loop, artex, s2b, ws, slots = run(max_send_freq, telemetry_hz)
    # the ARTEX telem poll reads the snapshot once; Sim2Bot's once at its start, then once to
    # compare and once to send per poll
    s2b_times = s2b.times[1:]
    artex_polls = len(artex.times)
    s2b_polls = len({round(t, 9) for t in s2b_times})
    assert artex_polls == pytest.approx(SECONDS / max_send_freq, abs=1)
    assert s2b_polls == pytest.approx(SECONDS * telemetry_hz, abs=1)
    assert len(ws.sent) == pytest.approx(SECONDS * telemetry_hz, abs=1)
    assert loop.wakeups <= len(slots) + 2, (loop.wakeups, len(slots))     # one per 50 Hz slot, nothing between
    for t in artex.times + s2b_times:
        assert t == pytest.approx(beat.nearest_slot(t), abs=1e-6)        # every poll in a slot
    for k, t in enumerate(artex.times, 1):                                 # each at most half a slot off its time
        assert abs(t - (START + k * max_send_freq)) <= beat.SLOT_S / 2 + 1e-6, (k, t)
