"""The console's incidents page in a real headless Chromium against the real agent on the simulated tank.

ARTEX (as a source) drives, robot_msg stops the moving tank: the page lists the incident, and its
timeline, read back from the exported MCAP file, shows the commanded and applied duty and speed, who
drove, the stop with its reason, and the camera frame at the stop. Run as a script to take the
screenshot in docs/recorder.md::

    .venv/bin/python -m tests.recorder.test_incidents_browser docs/recorder.png
"""

from __future__ import annotations

import asyncio
import os
import sys

import pytest

from agent.commands import BaseVelocity, Stop
from agent.testing.ports import free_port
from agent.testing.running_agent import running_agent, sim_config, wait_for
from tests.console.browser import available, chromium, text, wait_until

REQUIRED = os.environ.get("ROBOT_AGENT_REQUIRE_BROWSER") == "1"
pytestmark = [
    pytest.mark.skipif(not available() and not REQUIRED,
                       reason="needs Debian chromium + chromium-driver (scripts/bootstrap.sh installs them)"),
    pytest.mark.timeout(180),
]


async def stopped_tank(agent) -> None:
    """ARTEX drives until the tank moves, then robot_msg stops it: one ``stop`` incident."""
    for _ in range(200):
        agent.control.submit("artex", BaseVelocity(0.5, 0.2))
        if agent.physics.vx_mps > 0.3:
            break
        await asyncio.sleep(0.05)
    for _ in range(10):          # a little more of the drive on record
        agent.control.submit("artex", BaseVelocity(0.5, 0.2))
        await asyncio.sleep(0.05)
    agent.control.submit("robot_msg", Stop())
    assert await wait_for(lambda: any(i.kind == "stop" for i in agent.recorder.incidents), 5)
    for _ in range(20):          # ARTEX streams on into the stop: refused, on record
        try:
            agent.control.submit("artex", BaseVelocity(0.5, 0.2))
        except ValueError:
            pass
        await asyncio.sleep(0.05)


def check_page(driver, port: int, shot: str | None = None) -> None:
    from selenium.webdriver.common.by import By

    driver.get(f"http://127.0.0.1:{port}/incidents")
    assert wait_until(lambda: len(driver.find_elements(By.CSS_SELECTOR, "#list li")) >= 1, 15.0)
    item = driver.find_element(By.CSS_SELECTOR, "#list li")
    assert "stop" in item.text and "robot_msg" in item.text and "stop from robot_msg while moving" in item.text
    assert wait_until(lambda: "stop at" in text(driver, "title"), 15.0), text(driver, "title")
    assert "stop from robot_msg while moving" in text(driver, "reason")
    assert wait_until(lambda: driver.execute_script("return document.getElementById('frame').naturalWidth") > 0, 10)
    assert "artex" in text(driver, "owners")
    cmds = text(driver, "cmds")
    assert "Stop" in cmds and "robot_msg" in cmds and "refused" in cmds, cmds
    # the chart has been drawn: some pixels differ from the background
    painted = driver.execute_script(
        "const c=document.getElementById('chart'), d=c.getContext('2d').getImageData(0,0,c.width,c.height).data;"
        "let n=0; for (let i=0;i<d.length;i+=4) if (d[i]||d[i+1]||d[i+2]) n++; return n;")
    assert painted > 2000, painted
    href = driver.find_element(By.ID, "download").get_attribute("href")
    assert href.endswith(".mcap")
    if shot:
        driver.save_screenshot(shot)


async def run(tmp_dir: str, shot: str | None = None) -> None:
    port = free_port()
    cfg = sim_config(console={"enabled": True, "port": port},
                     recorder={"enabled": True, "dir": tmp_dir, "incident_after_s": 1.0, "incident_before_s": 6.0})
    async with running_agent(cfg) as agent:
        await agent.adapters["console"].ready.wait()
        await stopped_tank(agent)

        def browse() -> None:
            with chromium() as driver:
                check_page(driver, port, shot)
        await asyncio.to_thread(browse)
        # the page's download is the incident's MCAP file
        import io

        import aiohttp
        from mcap.reader import make_reader
        incident = next(i for i in agent.recorder.incidents if i.kind == "stop")
        async with aiohttp.ClientSession() as http:
            async with http.get(f"http://127.0.0.1:{port}/api/incidents/{incident.id}.mcap") as resp:
                assert resp.status == 200
                assert incident.id in resp.headers["Content-Disposition"]
                data = await resp.read()
            async with http.get(f"http://127.0.0.1:{port}/api/incidents/no-such-id.mcap") as resp:
                assert resp.status == 404
        topics = {ch.topic for _, ch, _ in make_reader(io.BytesIO(data)).iter_messages()}
        assert {"/drive", "/commands", "/incidents", "/camera/front"} <= topics, topics


async def test_incident_timeline_in_the_browser(tmp_path) -> None:
    await run(str(tmp_path / "rec"), str(tmp_path / "incidents.png"))
    assert (tmp_path / "incidents.png").stat().st_size > 10_000


if __name__ == "__main__":
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        asyncio.run(run(d, sys.argv[1] if len(sys.argv) > 1 else "docs/recorder.png"))
