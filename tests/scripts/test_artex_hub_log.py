"""scripts/artex_hub.py's console log: each telemetry line leads with the e-stop and halts when set (a process
running the script, the agent on the simulated tank connected to it)."""

from __future__ import annotations

import importlib.util

import pytest

from agent.testing.artex_hub import hub_script
from agent.testing.ports import free_port
from agent.testing.running_agent import ROOT, running_agent, sim_config, wait_for

pytestmark = pytest.mark.timeout(90)


def _script():
    spec = importlib.util.spec_from_file_location("artex_hub_script", ROOT / "scripts" / "artex_hub.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def test_the_hub_log_leads_each_telemetry_line_with_the_estop():
    port = free_port()
    async with hub_script(port) as (proc, lines):
        async with running_agent(sim_config(server="http://127.0.0.1", port=port)) as agent:
            assert await wait_for(lambda: any(x.startswith("telem motors at zero") and " | estop off | {" in x
                                              for x in lines), 15), lines[-3:]
            agent.control.estop("console", "operator pressed STOP " + "x" * 400)   # far past the 300-char cut
            assert await wait_for(lambda: any(x.startswith("telem E-STOP SET: emergency stop set by console since ")
                                              and "operator pressed STOP" in x and " | motors at zero" in x
                                              for x in lines), 15), lines[-3:]
            n = len(lines)
            agent.control.release_estop("console")
            assert await wait_for(lambda: any(x.startswith("telem motors ") and " | estop off | {" in x
                                              for x in lines[n:]), 15)
        assert max(len(x) for x in lines) < 5000  # still bounded


def test_a_failsafe_halt_and_the_speed_cap_lead_too():
    safety = _script().safety
    halt = "tilt failsafe set by robot since 2026-12-01 18:07:45 UTC: pitch 52.0 deg over 40.0 deg for 0.3 s"
    assert safety({"estop": False, "halted": True, "halt": halt}) == f"HALTED: {halt}"
    assert safety({"estop": False, "halted": False, "speed_cap_mps": 0.5}) == "estop off · speed cap 0.50 m/s"
    assert safety({"t": 1}) == "" and safety([1]) == ""
