"""The console page in a real headless Chromium when its socket is down: the STOP button's e-stop is
shown NOT SENT in red at once and is sent when the socket is back (said on the page); drives are
never queued. And the e-stop banner gives the date when the e-stop is not from today.

The agent runs on the simulated tank with its own console off; the test runs a real
:class:`agent.console.server.Console` on the agent's control loop and stops and restarts it on the
same port (the page's socket drops and reconnects). Selenium calls block, so they run in worker
threads while the event loop serves the page.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time

import pytest

from agent.config import AgentConfig
from agent.console.server import Console
from agent.model import Halt
from tests.conftest import free_port, running_agent, sim_config, wait_for
from tests.console.browser import available, chromium, open_console, text, wait_until
from tests.console.peers import console_params
from tests.console.test_console_browser import REQUIRED, duty

pytestmark = [
    pytest.mark.skipif(not available() and not REQUIRED,
                       reason="needs Debian chromium + chromium-driver (scripts/bootstrap.sh installs them)"),
    pytest.mark.timeout(180),
]

RED = "rgb(122, 32, 32)"       # console.css: #7a2020, the "bad" notice


@contextlib.asynccontextmanager
async def console_on(agent, cfg: AgentConfig):
    """A Console serving ``cfg.console.port`` on the agent's control loop until the block ends."""
    console = Console(cfg, agent.control, agent.video)
    task = asyncio.create_task(console.run())
    try:
        await asyncio.wait_for(console.ready.wait(), 10.0)
        yield console
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def notice(driver) -> tuple[str, str]:
    return driver.execute_script(
        "const e = document.getElementById('link-notice');"
        "return [e.hidden ? '' : e.textContent, getComputedStyle(e).backgroundColor];")


async def test_stop_pressed_while_disconnected_is_shown_not_sent_and_sent_on_reconnect() -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys

    port = free_port()
    cfg = AgentConfig.model_validate(console_params(port))
    async with running_agent(sim_config()) as agent:
        with chromium() as driver:
            async with console_on(agent, cfg):
                await asyncio.to_thread(open_console, driver, f"http://127.0.0.1:{port}/")
            # the console is gone: the page's socket closed, its reconnects are refused

            def press_while_down() -> None:
                assert wait_until(lambda: text(driver, "link") == "disconnected", 10.0), text(driver, "link")
                ActionChains(driver).key_down(Keys.ARROW_UP).perform()         # a drive: dropped, said so
                assert wait_until(lambda: text(driver, "cmd") == "not sent: disconnected", 5.0), text(driver, "cmd")
                ActionChains(driver).key_up(Keys.ARROW_UP).perform()
                driver.find_element(By.ID, "stop").click()
                said, colour = notice(driver)                                  # at once, no waiting
                assert said.startswith("EMERGENCY STOP NOT SENT: disconnected") and colour == RED, (said, colour)
                assert text(driver, "cmd") == "EMERGENCY STOP NOT SENT: disconnected"

            await asyncio.to_thread(press_while_down)
            assert agent.control.snapshot().safety.estop is None
            async with console_on(agent, cfg) as console:                      # the link is back
                assert await wait_for(lambda: agent.control.snapshot().safety.estop is not None, 15.0)
                halt = agent.control.snapshot().safety.estop
                assert halt.by == "console" and "STOP button on console tab" in halt.reason

                def sent_on_reconnect() -> None:
                    assert wait_until(lambda: notice(driver)[0].startswith("EMERGENCY STOP sent on reconnect"),
                                      10.0), notice(driver)
                    assert notice(driver)[1] != RED
                    assert wait_until(lambda: re.search(r"EMERGENCY STOP · set by console at \d\d:\d\d:\d\d ·",
                                                        text(driver, "halt-list")), 10.0), text(driver, "halt-list")

                await asyncio.to_thread(sent_on_reconnect)
                assert console.counters["executed"] == 1        # the e-stop alone: the drive was never queued
                assert duty(agent) == [0.0, 0.0]

                # an e-stop from another day (kept across a restart): the banner gives its date
                agent.control.release_estop("console")
                old = time.time() - 3 * 86400
                agent.control.restore_estop(Halt("estop", "kept", "cli", old))
                day = time.strftime("%Y-%m-%d", time.localtime(old))

                def dated() -> None:
                    assert wait_until(lambda: re.search(rf"set by cli at {day} \d\d:\d\d:\d\d · kept",
                                                        text(driver, "halt-list")), 10.0), text(driver, "halt-list")

                await asyncio.to_thread(dated)
