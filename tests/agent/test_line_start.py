"""The line firmware's own watchdog at the agent's start (docs/line-protocol.md, "Host behaviour"):
the zero written at the open and kept fed by the motor's thread until the control loop's first tick,
so the firmware never trips while the other devices open and the loop starts. Real driver, the
line firmware emulator on a pty, the agent's Hardware and ControlLoop."""

from __future__ import annotations

import time

from agent.config import AgentConfig
from agent.control import ControlLoop
from agent.devices.hardware import Hardware
from agent.devices.simtank import SimTank
from drivers import linemotor as lp
from tests.conftest import sim_config, wait_until

WATCHDOG_S = 0.4


def test_the_firmware_watchdog_is_fed_from_the_open_on_and_never_trips_at_start(caplog):
    cfg = sim_config()
    cfg["drivers"]["cameras"] = []
    cfg["drivers"]["motor"] = {"kind": "line", "port": "sim://", "firmware_timeout_s": WATCHDOG_S,
                               "reply_timeout_s": 0.2}
    cfg = AgentConfig.model_validate(cfg)
    sim = SimTank(cfg)
    hw = Hardware.from_config(cfg, sim)
    loop = None
    caplog.set_level("DEBUG", logger="drivers.linemotor")
    try:
        hw.start()
        assert wait_until(lambda: hw.motor.state == "ok", 10.0)
        emu, drv = sim.motor_emulator, hw.motor.driver
        assert emu.watchdog_ms == WATCHDOG_S * 1000
        # a slow start: no control loop yet for 2.5 watchdog intervals (the claim: no trip meanwhile)
        time.sleep(2.5 * WATCHDOG_S)
        words = [lp.parse_line(r).words for r in emu.received()]
        assert ("P", "0", "0") in words and ("S",) not in words, words    # fed with duty writes, never S
        assert emu.stats["timeouts"] == 0 and emu.flags == 0
        loop = ControlLoop(cfg, hw)
        loop.start()
        assert wait_until(lambda: loop.snapshot().seq > 10, 10.0)
        assert wait_until(lambda: hw.read_motor() is not None, 5.0) and hw.read_motor().status == 0
        assert emu.stats["timeouts"] == 0 and drv.watchdog_trips == 0
        assert not [r for r in caplog.records if "watchdog tripped" in r.getMessage()]
    finally:
        if loop is not None:
            loop.close(timeout_s=1.0)
        hw.close()
        sim.close()
