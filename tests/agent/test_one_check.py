"""One check per command (docs/architecture.md, "One check per command"): a ``base_velocity``
crosses one finite check at the edge (agent.commands.finite_number, in the model constructor), one
over-limit refusal (agent.commands.Reach.check), one clamp policy (agent.control.kinematics.scale_to_limit)
and the motor driver's one device guard (drivers/serialport.py ``track_duty``).

Two views: the source (every finite check in the walk's modules is one the docs name) and the
walk itself (a real Sim2Bot message through the parser, the control loop and the real RoboClaw
driver on its emulator, every check counted as it runs, with a profile hook: nothing is replaced).
"""

from __future__ import annotations

import ast
import json
import math
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from agent.adapters.sim2bot_commands import ParseContext, decode, parse
from agent.config import AgentConfig
from agent.control import ControlLoop
from agent.control import kinematics
from agent.devices.hardware import Hardware
from agent.devices.simtank import SimTank
from agent.errors import CommandRejected, NonFiniteValue
from agent.commands import Reach, finite_number
from drivers.serialport import SerialMotorController
from tests.conftest import sim_config

ROOT = Path(__file__).resolve().parents[2]
CHECKS = ("isfinite", "isnan", "isinf")

#: The modules a base_velocity walks through, wire to serial write, for every protocol.
WALK = ("agent/commands.py", "agent/adapters/sim2bot.py", "agent/adapters/sim2bot_commands.py",
        "agent/adapters/sim2bot_room.py", "agent/adapters/artex_commands.py",
        "agent/adapters/robotmsg_inbound.py", "agent/console/messages.py",
        *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "agent" / "control").glob("*.py")),
        "agent/devices/hardware.py", "agent/devices/motorio.py", "agent/devices/worker.py",
        "agent/devices/supervisor.py",
        "drivers/base.py", "drivers/serialport.py", "drivers/roboclaw.py", "drivers/sabertooth.py",
        "drivers/linemotor.py")

#: Every function of the walk's modules that may call a finite check, and why (the docs' list).
FINITE_CHECKS = {
    "finite_number": "the edge: the one finite check of a command's numbers (agent.model)",
    "SerialMotorController.track_duty": "the motor driver's device guard on the duty it is handed",
    # off the command walk: other inputs with their own edge
    "_integer": "sim2bot wire integers (robot index, codec, sizes); never a model value",
    "_positive": "runtime base limits from ARTEX web_settings (Front.set_limits), not a command",
    "SafetyLatches.set_speed_cap": "the failsafes' speed cap, not a command",
    "BatteryDetector._average": "device readings (failsafes), not a command",
    "TiltDetector.update": "device readings (failsafes), not a command",
    "StallDetector.update": "device readings (failsafes), not a command",
}


def finite_check_sites(path: str) -> list[tuple[str, int]]:
    """(qualified function name, line) of every call of math.isfinite / isnan / isinf in ``path``."""
    found: list[tuple[str, int]] = []

    def visit(node: ast.AST, scope: tuple[str, ...]) -> None:
        for child in ast.iter_child_nodes(node):
            inner = scope
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                inner = (*scope, child.name)
            elif isinstance(child, ast.Call):
                f = child.func
                name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None)
                if name in CHECKS:
                    found.append((".".join(scope), child.lineno))
            visit(child, inner)

    visit(ast.parse((ROOT / path).read_text()), ())
    return found


def test_every_finite_check_on_the_walk_is_a_named_one():
    sites = {(path, fn, line) for path in WALK for fn, line in finite_check_sites(path)}
    unnamed = sorted(s for s in sites if s[1] not in FINITE_CHECKS)
    assert not unnamed, f"a finite check the docs do not name (one check per command): {unnamed}"
    # the two on the command walk are each in exactly one place
    assert {p for p, fn, _ in sites if fn == "finite_number"} == {"agent/commands.py"}
    assert {p for p, fn, _ in sites if fn == "SerialMotorController.track_duty"} == {"drivers/serialport.py"}
    # and the docs name the same places
    docs = (ROOT / "docs" / "architecture.md").read_text()
    section = docs[docs.index("## One check per command"):]
    for name in ("agent.commands.finite_number", "Reach.check", "scale_to_limit", "track_duty"):
        assert name in section, name


def test_the_over_limit_refusal_and_the_clamp_live_in_one_place_each():
    """OVER_LIMIT_FACTOR is used by Reach.check only; min/max clamps of a duty or speed are gone from
    kinematics (scale_to_limit is its one clamp) and from the drivers' encoders."""
    users = []
    for path in WALK:
        tree = ast.parse((ROOT / path).read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and node.id == "OVER_LIMIT_FACTOR" and isinstance(node.ctx, ast.Load):
                users.append(path)
    assert users == ["agent/commands.py"]
    kin = ast.parse((ROOT / "agent/control/kinematics.py").read_text())
    clamps = [n.lineno for n in ast.walk(kin) if isinstance(n, ast.Call) and getattr(n.func, "id", None) == "min"]
    assert not clamps, f"a min() clamp in kinematics besides scale_to_limit: lines {clamps}"
    for path, fn in (("drivers/roboclaw.py", "duty_value"), ("drivers/sabertooth.py", "motor_packet")):
        tree = ast.parse((ROOT / path).read_text())
        body = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == fn)
        assert not [n for n in ast.walk(body) if isinstance(n, ast.Call) and getattr(n.func, "id", None)
                    in ("min", "max")], f"{path} {fn} clamps again (the device guard is track_duty)"


# ---------------------------------------------------------------- the walk, counted as it runs

WATCHED = {finite_number.__code__: "finite_number", Reach.check.__code__: "Reach.check",
           kinematics.scale_to_limit.__code__: "scale_to_limit",
           SerialMotorController.track_duty.__code__: "track_duty"}
CHECK_FUNCS = {math.isfinite, math.isnan, math.isinf}
#: The walk's source files as the interpreter names them; the failsafes read devices, not the command.
ON_THE_WALK = {str((ROOT / p).resolve()) for p in WALK if not p.endswith("failsafes.py")}


class Counted:
    """A profile hook (sys.setprofile / threading.setprofile) counting, while ``on``, the watched
    functions' calls and every call of math.isfinite / isnan / isinf by its caller."""

    def __init__(self) -> None:
        self.on = False
        self.calls: Counter[str] = Counter()
        self.checks: Counter[str] = Counter()
        self.names: Counter[str] = Counter()       # finite_number's ``name`` argument

    def __call__(self, frame, event, arg) -> None:
        if not self.on:
            return
        if event == "c_call" and arg in CHECK_FUNCS:
            code = frame.f_code
            if code.co_filename in ON_THE_WALK:     # not the servos' I2C writes, the failsafes' readings
                self.checks[code.co_qualname] += 1
        elif event == "call" and frame.f_code in WATCHED:
            name = WATCHED[frame.f_code]
            self.calls[name] += 1
            if name == "finite_number":
                self.names[frame.f_locals["name"]] += 1

    def reset(self) -> None:
        self.calls.clear()
        self.checks.clear()
        self.names.clear()


@pytest.fixture
def walk():
    counted = Counted()
    threading.setprofile(counted)         # the motor worker thread writes the duty
    sys.setprofile(counted)
    cfg = sim_config()
    for key in ("cameras", "power"):
        cfg["drivers"].pop(key)
    cfg = AgentConfig.model_validate(cfg)
    sim = SimTank(cfg)
    hw = Hardware.from_config(cfg, sim)
    clock = [0.0]
    loop = ControlLoop(cfg, hw, clock=lambda: clock[0])
    try:
        hw.start()
        deadline = time.monotonic() + 10.0      # the emulated controller answers on real time
        while hw.motor is not None and hw.motor.state != "ok" and time.monotonic() < deadline:
            time.sleep(0.005)
        ctx = ParseContext(dof=2, has_gripper=True, cameras=())

        def send(message: dict) -> str:
            """One Sim2Bot message, wire text to one tick (its duty written): what happened."""
            counted.reset()
            counted.on = True
            try:
                submit = parse(decode(json.dumps(message), 65536), ctx)
                loop.submit("sim2bot", submit.command)
                outcome = "executed"
            except CommandRejected as err:
                outcome = f"rejected: {err}"
            clock[0] += 0.02
            loop.tick()
            counted.on = False
            return outcome

        yield send, counted, sim
    finally:
        counted.on = False
        sys.setprofile(None)
        threading.setprofile(None)
        loop.close(timeout_s=0.1)
        hw.close()
        sim.close()


def test_a_base_velocity_crosses_each_check_once(walk):
    send, counted, sim = walk
    message = {"type": "base_velocity", "vx": 1.5, "omega": 0.5, "vy": 0.0, "vz": 0.0}
    assert send(message) == "executed"
    # the edge: each number checked once, in the model's one finite check
    assert counted.names == {"vx": 1, "omega": 1, "vy": 1, "vz": 1}
    assert counted.calls["Reach.check"] == 1                 # the one over-limit refusal, run once
    assert counted.calls["scale_to_limit"] == 2              # the one clamp: speed limit, then duty range
    writes = counted.calls["track_duty"]
    assert writes >= 1                                       # the duty went to the serial line
    # and no other finite check ran anywhere on the way
    assert counted.checks == {"finite_number": 4, "SerialMotorController.track_duty": 2 * writes}


@pytest.mark.parametrize("twist, error", [
    ({"vx": math.nan}, NonFiniteValue), ({"omega": math.inf}, NonFiniteValue),
    ({"vx": 10.5}, "more than 10x"), ({"omega": -10.5 * 2.0 / 0.30}, "more than 10x"),
])
def test_a_refused_base_velocity_stops_at_its_one_check(walk, twist, error):
    send, counted, sim = walk
    outcome = send({"type": "base_velocity", **twist})
    assert outcome.startswith("rejected: ")
    if error is NonFiniteValue:     # refused where the wire value became a model value
        assert "must be finite" in outcome and counted.calls["Reach.check"] == 0
    else:                           # refused by the over-limit check at the port, once
        assert error in outcome and counted.calls["Reach.check"] == 1
    assert counted.calls["scale_to_limit"] == 1              # the tick ran on: no command, only the duty range
    assert set(counted.checks) <= {"finite_number", "SerialMotorController.track_duty"}
    assert list(sim.physics.duty) == [0.0, 0.0]
