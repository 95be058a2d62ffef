"""On the running agent with a real ARTEX hub on loopback: a command that comes while the tank rests, right
after a telem keepalive, shows in the hub's telem as soon as the woken tick ran (docs/artex.md "telem": "A
tick woken at rest ... ends the wait at once"), not at the next poll of the telem schedule. The poll after a
keepalive is a poll of the schedule's own (none skipped), and its wait did not end at the rouse: the
moving tank's telem came up to a period (0.1 s) later (38-88 ms measured)."""

from __future__ import annotations

import asyncio

from agent.testing.artex_hub import ArtexHub, agent_on
from agent.testing.running_agent import wait_for

PERIOD_S = 0.1      # max_send_freq


async def test_a_command_right_after_a_keepalive_at_rest_is_in_the_next_telem():
    hub = ArtexHub(ready_delay_s=0.05)
    await hub.start()
    try:
        async with agent_on(hub, max_send_freq=PERIOD_S, drivers={"cameras": []}) as agent:
            rest = agent.adapters["artex"]._streams._rest
            snap = agent.control.snapshot
            late = []
            for _ in range(3):
                assert await wait_for(lambda: snap().resting and snap().tracks.duty_left == 0.0, 10), "never rested"
                n = len(hub.telem)
                assert await wait_for(lambda: len(hub.telem) > n, 3, period_s=0.001), "no keepalive at rest"
                keepalive_t = hub.telem[-1][0]
                roused = rest.roused
                n = len(hub.telem)
                await hub.command({"com": "forward"})           # the telem loop now waits for its next poll
                assert await wait_for(lambda: any(p["tracks"]["duty_left"] > 0 for _, p in list(hub.telem)[n:]), 3)
                shown = next(t for t, p in list(hub.telem)[n:] if p["tracks"]["duty_left"] > 0)
                late.append(round(shown - keepalive_t, 3))
                assert rest.roused == roused + 1, f"the rouse did not end the telem wait; telem {late[-1]} s after the keepalive"
                await hub.command({"com": "stop"})
            # the rouse ends the wait: well before the schedule's next poll (a loose bound: a loaded machine)
            assert min(late) < PERIOD_S * 0.8, late
    finally:
        await hub.stop()
