"""Peers shared by the adapter tests: the ARTEX hub (per test) and the sim2bot bridge (per module)."""

from __future__ import annotations

import pytest

from agent.testing.artex_hub import ArtexHub


@pytest.fixture
async def hub():
    """An :class:`ArtexHub` on a free loopback port, Ready sent 50 ms after each connect."""
    h = ArtexHub(ready_delay_s=0.05)
    await h.start()
    yield h
    await h.stop()
