"""scripts/artex_hub.py prints each telemetry message with the motors' duty and track speed first,
and the whole dict (duty_left included), from a real agent's telemetry on the test hub."""

from __future__ import annotations

import importlib.util

from agent.testing.artex_hub import ArtexHub, agent_on, drive
from tests.conftest import ROOT, wait_for


def _script():
    spec = importlib.util.spec_from_file_location("artex_hub_script", ROOT / "scripts" / "artex_hub.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def test_the_hub_log_shows_the_duty_at_a_glance(capsys):
    script = _script()
    async with ArtexHub() as hub, agent_on(hub, telem_can=True):
        assert await wait_for(lambda: hub.telem, 10), "no telemetry"
        script.printer("telem", "sid", hub.telem[-1][1])
        at_rest = capsys.readouterr().out
        await drive(hub, {"com": "forward"}, 0.6)
        moving = next(p for _, p in reversed(hub.telem) if p.get("tracks", {}).get("duty_left", 0) > 0)
        script.printer("telem", "sid", moving)
        driving = capsys.readouterr().out
    assert at_rest.startswith("telem motors at zero · duty L +0.00 R +0.00 · speed L ")
    assert driving.startswith("telem motors DRIVING · duty L +0.") and '"duty_left":' in driving
    assert "chars)" not in driving                                   # the dict is not cut
