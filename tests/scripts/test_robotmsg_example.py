"""docs/examples/robot_msg_client.py: the file docs/robot_msg.md shows verbatim, run against a running agent."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys

import pytest

from tests.conftest import ROOT, running_agent, sim_config, wait_for

pytestmark = pytest.mark.timeout(60)

EXAMPLE = ROOT / "docs" / "examples" / "robot_msg_client.py"
DOC = ROOT / "docs" / "robot_msg.md"


def test_the_doc_shows_the_example_file_verbatim():
    doc = DOC.read_text()
    match = re.search(r"<!-- example: docs/examples/robot_msg_client.py -->\n```python\n(.*?)```\n", doc, re.S)
    assert match, "docs/robot_msg.md lost its example block"
    assert match.group(1) == EXAMPLE.read_text()


async def test_the_example_drives_the_tank_and_reads_its_state():
    cfg = sim_config(drivers={"cameras": []}, robot_msg={
        "enabled": True, "state_hz": 20,
        "state": {"address": "tcp://127.0.0.1:*"}, "action": {"address": "tcp://127.0.0.1:*"},
        "command": {"address": "tcp://127.0.0.1:*"}})
    async with running_agent(cfg) as agent:
        adapter = agent.adapters["robot_msg"]
        assert await wait_for(lambda: all(adapter.status()["endpoints"].values()), 10)
        endpoints = adapter.status()["endpoints"]
        proc = await asyncio.create_subprocess_exec(
            sys.executable, str(EXAMPLE), "--state", endpoints["state"], "--action", endpoints["action"],
            "--vx", "0.3", "--seconds", "1.5", stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(proc.communicate(), 40)
        status = adapter.status()
        snap = agent.control.snapshot()
    text = out.decode()
    assert proc.returncode == 0, text + err.decode()
    assert text.startswith("robot: 2 joint(s)"), text
    assert status["applied"] >= 5, status                       # the u_rt stream reached the robot
    assert snap.odom.distance_m > 0.1, snap.odom                # ~0.3 m/s for 1.5 s, ramped
    reported = float(re.search(r"after driving: odom_distance=\[([0-9.e-]+)\]", text).group(1))
    assert 0.1 < reported <= snap.odom.distance_m + 1e-9, text
    counts = [[float(v) for v in m.split(",")] for m in re.findall(r"track_counts=\[([^\]]*)\]", text)]
    assert len(counts) == 2 and all(after > before for before, after in zip(*counts)), text  # both tracks forward
