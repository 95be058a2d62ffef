"""Two console tabs in one real headless Chromium against the real agent on the simulated
tank: only the tab in control drives (duty at the motor emulator), the other shows who
drives; taking control moves it and tells the previous tab; closing the watching tab changes
nothing; the STOP button's e-stop shows a banner on both tabs and the release (with its
confirm step) ends it without moving anything.

Selenium calls block, so they run in a worker thread while the agent's event loop serves
the pages. Bounds are loose (a loaded 2-core machine).
"""

from __future__ import annotations

import asyncio
import re
import time

import pytest

from tests.console.browser import available, chromium, open_console, text, wait_until
from tests.console.test_console_browser import REQUIRED, duty
from tests.conftest import free_port
from tests.console.peers import console_agent

pytestmark = [
    pytest.mark.skipif(not available() and not REQUIRED,
                       reason="needs Debian chromium + chromium-driver (scripts/bootstrap.sh installs them)"),
    pytest.mark.timeout(180),
]

SINCE = r"since \d\d:\d\d:\d\d"


def visible(driver, element_id: str) -> bool:
    return driver.find_element("id", element_id).is_displayed()


def in_view(driver, element_id: str) -> bool:
    """The element's box lies inside the viewport (no scrolling needed to see it)."""
    return driver.execute_script(
        "const r = document.getElementById(arguments[0]).getBoundingClientRect();"
        "return r.height > 0 && r.top >= 0 && r.bottom <= window.innerHeight;", element_id)


def press(driver, key: str) -> None:
    from selenium.webdriver.common.action_chains import ActionChains
    ActionChains(driver).key_down(key).perform()


def let_go(driver, key: str) -> None:
    from selenium.webdriver.common.action_chains import ActionChains
    ActionChains(driver).key_up(key).perform()


def moves(agent) -> bool:
    return duty(agent)[0] > 0.0 and duty(agent)[1] > 0.0


def still_for(agent, seconds: float) -> bool:
    """The tracks stay at zero duty for ``seconds`` (sampled)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if duty(agent) != [0.0, 0.0]:
            return False
        time.sleep(0.02)
    return True


def two_tabs(driver, agent, port: int) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    url = f"http://127.0.0.1:{port}/"
    open_console(driver, url)
    tab_a = driver.current_window_handle
    assert wait_until(lambda: text(driver, "control") == "this tab", 5.0), text(driver, "control")
    driver.switch_to.new_window("tab")
    open_console(driver, url)
    tab_b = driver.current_window_handle
    assert wait_until(lambda: re.fullmatch(rf"another tab \(#1, 127\.0\.0\.1\), {SINCE}", text(driver, "control")),
                      5.0), text(driver, "control")
    assert visible(driver, "take") and in_view(driver, "control") and in_view(driver, "take")

    # B watches: its keys move nothing and it says why
    press(driver, Keys.ARROW_UP)
    assert wait_until(lambda: text(driver, "error").startswith("this tab watches"), 5.0), text(driver, "error")
    assert in_view(driver, "error")
    assert still_for(agent, 0.3)                     # 3 of the watching tab's repeats (100 ms) move nothing
    let_go(driver, Keys.ARROW_UP)

    # A drives
    driver.switch_to.window(tab_a)
    press(driver, Keys.ARROW_UP)
    assert wait_until(lambda: moves(agent), 10.0), duty(agent)
    let_go(driver, Keys.ARROW_UP)
    assert wait_until(lambda: duty(agent) == [0.0, 0.0], 2.0)

    # B takes control; A is told and its keys move nothing
    driver.switch_to.window(tab_b)
    assert wait_until(lambda: text(driver, "source") == "none", 5.0)
    driver.find_element(By.ID, "take").click()
    assert wait_until(lambda: text(driver, "control") == "this tab", 5.0), text(driver, "control")
    assert not visible(driver, "take")
    driver.switch_to.window(tab_a)
    assert wait_until(lambda: re.fullmatch(rf"another tab \(#2, 127\.0\.0\.1\), {SINCE}", text(driver, "control")),
                      5.0), text(driver, "control")
    assert "tab 2 (127.0.0.1) took control at" in text(driver, "error")
    press(driver, Keys.ARROW_UP)
    assert wait_until(lambda: text(driver, "error").startswith("this tab watches"), 5.0), text(driver, "error")
    assert still_for(agent, 0.3)                     # 3 of its repeats (100 ms) move nothing
    let_go(driver, Keys.ARROW_UP)

    # B drives; closing the watching tab A meanwhile changes nothing
    driver.switch_to.window(tab_b)
    press(driver, Keys.ARROW_UP)
    assert wait_until(lambda: moves(agent), 10.0), duty(agent)
    assert wait_until(lambda: text(driver, "source") == "console", 5.0)
    driver.execute_cdp_cmd("Target.closeTarget", {"targetId": tab_a})   # B stays the focused tab
    assert wait_until(lambda: len(driver.window_handles) == 1, 5.0)
    assert wait_until(lambda: agent.adapters["console"].status()["open"] == 1, 5.0)
    start = agent.control.snapshot().odom.distance_m
    time.sleep(0.6)  # real time held on purpose: longer than the 0.5 s watchdog, only B's repeats drive on
    assert moves(agent)
    # and it travels (odometry follows the motor line's feedback, which a loaded machine may delay)
    assert wait_until(lambda: moves(agent) and agent.control.snapshot().odom.distance_m > start + 0.02, 3.0), \
        (duty(agent), agent.control.snapshot().odom)
    assert text(driver, "control") == "this tab"

    # the STOP button: e-stop banner, in view; release with a confirm step; nothing moves after
    driver.find_element(By.ID, "stop").click()
    assert wait_until(lambda: duty(agent) == [0.0, 0.0], 2.0)
    assert wait_until(lambda: visible(driver, "halts"), 5.0)
    banner = text(driver, "halt-list")
    assert re.search(r"EMERGENCY STOP · set by console at \d\d:\d\d:\d\d · STOP button on console tab 2", banner), banner
    assert in_view(driver, "halts") and in_view(driver, "release")
    let_go(driver, Keys.ARROW_UP)
    driver.find_element(By.ID, "release").click()
    assert visible(driver, "release-confirm") and agent.control.snapshot().safety.estop is not None
    driver.find_element(By.ID, "release-confirm").click()
    assert wait_until(lambda: agent.control.snapshot().safety.estop is None, 5.0)
    assert wait_until(lambda: not visible(driver, "halts"), 5.0)
    assert still_for(agent, 0.3)                     # release moves nothing (~15 ticks)
    press(driver, Keys.ARROW_UP)                     # a fresh press drives
    assert wait_until(lambda: moves(agent), 10.0), (duty(agent), text(driver, "error"))
    let_go(driver, Keys.ARROW_UP)


async def test_two_tabs_one_drives_the_other_watches() -> None:
    port = free_port()
    async with console_agent(port) as agent:

        def run() -> None:
            with chromium() as driver:
                two_tabs(driver, agent, port)

        await asyncio.to_thread(run)
        assert agent.adapters["console"].status()["rejected"] == 0


def phone(driver, agent, port: int) -> None:
    from selenium.webdriver.common.by import By

    driver.set_window_size(390, 844)
    open_console(driver, f"http://127.0.0.1:{port}/")
    driver.find_element(By.ID, "stop").click()       # the STOP button is below the video on a phone
    assert wait_until(lambda: visible(driver, "halts"), 5.0)
    driver.execute_script("window.scrollTo(0, 0)")
    for element in ("control", "source", "halts", "release", "error"):
        assert in_view(driver, element), element
    driver.execute_script("window.scrollTo(0, document.body.scrollHeight)")   # the top bar stays
    assert in_view(driver, "halts") and in_view(driver, "control")
    # the robot's own failsafes and the speed cap show in the same place
    with agent.control.locked():
        agent.control.safety.trip("tilt", "roll 41 deg over the 35 deg limit for 0.30 s", time.time())
        agent.control.safety.set_speed_cap(0.2, "battery 6.9 V below low 7.0 V for 10.0 s")
    assert wait_until(lambda: "TILT FAILSAFE" in text(driver, "halt-list"), 5.0), text(driver, "halt-list")
    assert "roll 41 deg over the 35 deg limit" in text(driver, "halt-list")
    assert wait_until(lambda: visible(driver, "cap"), 5.0)
    assert text(driver, "cap") == "speed limited to 0.20 m/s: battery 6.9 V below low 7.0 V for 10.0 s"
    assert in_view(driver, "cap") and in_view(driver, "halts")


async def test_who_drives_and_the_banner_are_in_view_on_a_phone() -> None:
    port = free_port()
    async with console_agent(port) as agent:

        def run() -> None:
            with chromium() as driver:
                phone(driver, agent, port)

        await asyncio.to_thread(run)
