"""Headless Chromium for the console tests (Debian's ``chromium`` + ``chromium-driver``).

Selenium never downloads a browser here: the binary and the driver are the Debian ones
(installed by scripts/bootstrap.sh). Run as a script to take the README screenshot::

    .venv/bin/python -m tests.console.browser docs/console.png
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
FLAGS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--no-first-run", "--window-size=1280,900",
         # a tab in the background keeps its timers and socket at full rate (two-tab tests)
         "--disable-background-timer-throttling", "--disable-renderer-backgrounding",
         "--disable-backgrounding-occluded-windows")


def available() -> bool:
    """The Debian browser and driver are installed."""
    return Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()


@contextlib.contextmanager
def chromium() -> Iterator[object]:
    """A headless Chromium WebDriver with a throwaway profile; quit on exit."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="console-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def text(driver, element_id: str) -> str:
    """textContent of the element with ``element_id``."""
    return driver.execute_script("return document.getElementById(arguments[0]).textContent", element_id)


def wait_until(predicate, timeout_s: float = 10.0, period_s: float = 0.05) -> bool:
    """Poll ``predicate()`` (blocking) until true or ``timeout_s``; the last result."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(period_s)
    return bool(predicate())


def open_console(driver, url: str) -> None:
    """Load the page and wait until its socket is open and a frame and a state arrived."""
    driver.get(url)
    ok = wait_until(lambda: text(driver, "link") == "connected" and int(text(driver, "frames")) > 0
                    and text(driver, "battery-v") != "-", 20.0)
    if not ok:
        raise AssertionError(f"console page not live: link={text(driver, 'link')!r} frames={text(driver, 'frames')!r}")


async def _screenshot(path: str) -> None:
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys

    SCRIPT = [((Keys.ARROW_UP,), 4.0), ((), 2.0), ((Keys.ARROW_UP, Keys.ARROW_LEFT), 3.0), ((), 1.5),
              ((Keys.ARROW_DOWN,), 3.0), ((), 2.0), ((Keys.ARROW_RIGHT,), 2.0), ((), 1.0)]

    from tests.conftest import free_port
    from tests.console.peers import console_agent

    port = free_port()
    async with console_agent(port):

        def shoot() -> None:
            with chromium() as driver:
                open_console(driver, f"http://127.0.0.1:{port}/")
                for keys, seconds in SCRIPT:          # ~20 s of driving, so the plots have a shape
                    for key in keys:
                        ActionChains(driver).key_down(key).perform()
                    time.sleep(seconds)
                    for key in keys:
                        ActionChains(driver).key_up(key).perform()
                ActionChains(driver).key_down(Keys.ARROW_UP).perform()
                time.sleep(2.0)  # real time held on purpose: the screenshot script's plots fill (not a test)
                driver.save_screenshot(path)
                ActionChains(driver).key_up(Keys.ARROW_UP).perform()

        await asyncio.to_thread(shoot)


if __name__ == "__main__":
    asyncio.run(_screenshot(sys.argv[1] if len(sys.argv) > 1 else "docs/console.png"))
