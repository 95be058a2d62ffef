"""The real agent on the simulated tank with the console on a free loopback port, for the console tests."""

from __future__ import annotations

import asyncio
import contextlib

from tests.conftest import deep_merge, running_agent, sim_config


def console_params(port: int, **console: object) -> dict:
    """The simulated tank's params with the console enabled on ``port`` (``console`` keys merged)."""
    return sim_config(console={"enabled": True, "port": port, **console})


@contextlib.asynccontextmanager
async def console_agent(port: int, extra: dict | None = None, **console: object):
    """A running agent whose console listens on ``port``; ``extra`` is deep-merged into the params."""
    params = console_params(port, **console)
    if extra:
        params = deep_merge(params, extra)
    async with running_agent(params) as agent:
        await asyncio.wait_for(agent.adapters["console"].ready.wait(), 10.0)
        yield agent
