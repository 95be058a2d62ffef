"""RobotState while the control loop rests (docs/safety.md, "The control loop at rest"; docs/robot_msg.md
``state_hz``): the states keep coming at ``state_hz``, each repeating the last tick's sample, and a
command at rest drives the tank and brings the ticks back to ``rate_hz``. Real agent, real ZeroMQ peer."""

from __future__ import annotations

import asyncio
import time

import robot_msg as rm

from agent.testing.running_agent import wait_for
from tests.adapters.test_robotmsg import controlled, moving, rm_config, u_rt

STATES = 40


async def test_robotstate_keeps_state_hz_at_rest_repeating_the_last_ticks_sample():
    async with controlled(rm_config()) as (agent, peer):
        assert await wait_for(lambda: agent.control.tick_stats().resting, 15.0), "the standing tank never rested"
        sub = await peer.subscriber()
        rm.decode(await asyncio.wait_for(sub.recv(), 5))         # connected: the stream runs
        t0 = time.monotonic()
        states = [rm.decode(await asyncio.wait_for(sub.recv(), 5)) for _ in range(STATES)]
        elapsed = time.monotonic() - t0
        assert agent.control.tick_stats().resting
        seqs = [s.sequence for s in states]
        assert seqs == list(range(seqs[0], seqs[0] + STATES))   # one state per slot, none dropped
        samples = [s.metadata.sample_time.seconds for s in states]
        assert samples == sorted(samples)
        distinct = len(set(samples))
        # ticks every 0.15 s at rest against states every 20 ms: most states repeat their tick's sample
        assert distinct < STATES / 2, f"{distinct} distinct samples in {STATES} states: the loop did not rest"
        # state_hz kept: 40 states at 50 Hz take 0.8 s; at the rest ticks' ~7 Hz they would take 6 s
        assert elapsed < 4.0, f"{STATES} states took {elapsed:.2f} s"
        # a command at rest drives at once and ends the rest
        act = await peer.publisher("action")
        await peer.send(act, u_rt(0.3))
        assert await wait_for(lambda: moving(agent), 2.0)
        assert not agent.control.tick_stats().resting
