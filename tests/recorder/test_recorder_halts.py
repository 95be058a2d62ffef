"""E-stops and failsafes are incidents too: the console's e-stop and a tilt of the simulated tank (the
MPU-6050 emulator behind the real driver) are listed with their kind, reason and setter, counted for
/metrics, and the e-stop's window holds its /safety change."""

from __future__ import annotations

import asyncio
import io
import json
import logging

import pytest

from agent.recorder.export import export, timeline
from agent.recorder.writer import read_messages
from agent.testing.running_agent import running_agent, sim_config, wait_for

pytestmark = pytest.mark.timeout(120)


def kinds(agent) -> dict:
    return {i.kind: i for i in agent.recorder.incidents}


async def test_an_estop_and_a_tilt_failsafe_are_incidents(tmp_path):
    cfg = sim_config(recorder={"enabled": True, "dir": str(tmp_path / "rec")})
    cfg["drivers"]["cameras"] = []
    async with running_agent(cfg) as agent:
        agent.control.estop("console", "operator pressed STOP")
        assert await wait_for(lambda: "estop" in kinds(agent), 5), list(agent.recorder.incidents)
        e = kinds(agent)["estop"]
        assert (e.source, e.reason) == ("console", "operator pressed STOP")
        agent.control.release_estop("console")

        agent.sim.tilt(roll_deg=70.0)
        assert await wait_for(lambda: "failsafe" in kinds(agent), 10), list(agent.recorder.incidents)
        f = kinds(agent)["failsafe"]
        assert f.source == "robot" and f.reason.startswith("tilt: ") and " deg" in f.reason, f
        assert agent.recorder.counts.estops["console"] == 1 and agent.recorder.counts.failsafes["tilt"] == 1
        agent.sim.tilt(0.0)
        assert await asyncio.to_thread(agent.recorder.flush)
        data = await asyncio.to_thread(export, agent.recorder.directory, e, 5.0, 5.0)
    safety = [json.loads(m.data) for m in read_messages(io.BytesIO(data)) if m.topic == "/safety"]
    assert any(s["halts"] and s["halts"][0]["kind"] == "estop" and s["halts"][0]["reason"] == "operator pressed STOP"
               for s in safety)
    line = timeline(data, e)
    assert any("emergency stop" in row[3] for row in line["safety"])
    assert [i["kind"] for i in line["incidents"]][:1] == ["estop"]


@pytest.mark.parametrize("recording", [True, False], ids=["recording", "recorder off"])
async def test_an_incident_is_logged_as_recorded_only_when_it_is(tmp_path, caplog, recording):
    """With ``recorder.enabled`` false an incident is still counted (/metrics) but no INFO line
    "recorder: incident ..." claims it was recorded (docs/recorder.md)."""
    cfg = sim_config(recorder={"enabled": recording, "dir": str(tmp_path / "rec")})
    cfg["drivers"]["cameras"] = []
    with caplog.at_level(logging.DEBUG, logger="agent.recorder"):
        async with running_agent(cfg) as agent:
            agent.control.estop("console", "operator pressed STOP")
            assert await wait_for(lambda: agent.recorder.counts.incidents["estop"] == 1, 5)
            assert await asyncio.to_thread(agent.recorder.flush)
    lines = [r for r in caplog.records if r.getMessage().startswith("recorder: incident ")]
    assert len(lines) == 1, [r.getMessage() for r in lines]
    if recording:
        assert lines[0].levelno == logging.INFO and "operator pressed STOP (console)" in lines[0].getMessage()
        assert "operator pressed STOP" in (tmp_path / "rec" / "incidents.jsonl").read_text()
    else:
        assert lines[0].levelno == logging.DEBUG and "counted, not recorded" in lines[0].getMessage()
        assert not (tmp_path / "rec").exists()
