"""The hardware suite (tests/hardware/) runs, and passes, when pointed at emulators: a motor
controller emulator's pty and emulated I2C chips behind ``sim://`` (the simulated tank's opener).
So the same tests run on real devices when the variables name real ones; without
``ROBOT_AGENT_HW=1`` the suite is skipped cleanly."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from drivers.config import LineMotorConfig, RoboclawConfig
from drivers.emulators.tank import TankPhysics
from drivers.registry import emulator_class
from tests.conftest import ROOT

SUITE = [sys.executable, "-m", "pytest", "tests/hardware", "-p", "no:cacheprovider", "-q", "-rs"]


def _run(env: dict[str, str]) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("ROBOT_AGENT_HW")}
    return subprocess.run(SUITE, cwd=ROOT, env={**clean, **env}, capture_output=True, text=True, timeout=300)


def _counts(out: str) -> dict[str, int]:
    return {word: int(n) for n, word in re.findall(r"(\d+) (passed|failed|skipped|error)", out)}


@pytest.mark.slow                                             # a pytest subprocess on emulators, ~4 s
@pytest.mark.parametrize("motor, chips", [
    (RoboclawConfig(kind="roboclaw", port="unset"),
     {"IMU": "mpu6050", "POWER": "ina219", "SERVO": "pca9685", "ESTOP": "gpio"}),
    (LineMotorConfig(kind="line", port="unset", ready_timeout_s=0.5), {"IMU": "bno055", "POWER": "ina226"}),
])
def test_the_hardware_suite_passes_against_emulators(motor, chips):
    emu = emulator_class(motor).from_config(motor, TankPhysics())
    emu.start()
    try:
        # the emulator answers from this process's thread: on a loaded machine it may take longer
        # than a real controller's 50 ms reply timeout
        options = {"reply_timeout_s": 0.5, **({"ready_timeout_s": 0.5} if motor.kind == "line" else {})}
        env = {"ROBOT_AGENT_HW": "1", "ROBOT_AGENT_HW_MOTOR": emu.port, "ROBOT_AGENT_HW_MOTOR_KIND": motor.kind,
               "ROBOT_AGENT_HW_MOTOR_OPTIONS": json.dumps(options),
               "ROBOT_AGENT_HW_I2C_BUS": "sim://", "ROBOT_AGENT_HW_CAMERA": "sim://pattern",
               "ROBOT_AGENT_HW_POWER_OPTIONS": json.dumps({"address": "0x41"}),   # the PCA9685 has 0x40
               **{f"ROBOT_AGENT_HW_{k}_KIND": v for k, v in chips.items()}}
        if "ESTOP" in chips:                                   # the GPIO chip emulator, switch released
            env.update({"ROBOT_AGENT_HW_GPIO_CHIP": "sim://",
                        "ROBOT_AGENT_HW_ESTOP_OPTIONS": json.dumps({"line": "GPIO17"})})
        res = _run(env)
    finally:
        emu.close()
    devices = 2 + len(chips)                                  # motor, camera and the chips
    assert res.returncode == 0, res.stdout + res.stderr
    assert _counts(res.stdout) == {"passed": 2 * devices}, res.stdout   # two contract checks each, none skipped


@pytest.mark.slow                                             # a pytest subprocess, ~2 s
def test_without_the_request_the_hardware_suite_is_skipped():
    res = _run({"ROBOT_AGENT_HW_MOTOR": "/dev/ttyACM0", "ROBOT_AGENT_HW_MOTOR_KIND": "roboclaw"})
    assert res.returncode == 0, res.stdout + res.stderr
    counts = _counts(res.stdout)
    assert counts.get("skipped", 0) >= 1 and "passed" not in counts and "failed" not in counts
    assert "ROBOT_AGENT_HW=1" in res.stdout
