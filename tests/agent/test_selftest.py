"""``robot-agent selftest`` on the simulated tank: every device checked, the motion test moves
the emulated tracks (their encoder counts change), failures and skips reported, exit codes."""

from __future__ import annotations

import json

import pytest

from agent.__main__ import main
from agent.config import loads
from agent.devices.selftest import FAIL, PASS, SKIP, run_checks
from agent.devices.simtank import SimTank
from tests.conftest import PARAMS, sim_config

pytestmark = pytest.mark.usefixtures("root_handlers")  # the command sets up logging: undo it


def test_every_device_passes_and_the_pulse_moves_each_emulated_track():
    cfg = loads(json.dumps(sim_config()))
    tank = SimTank(cfg)
    try:
        assert tank.physics.encoder_counts() == (0, 0)
        checks = run_checks(cfg, motion=True, sim=tank, duty=0.15, pulse_s=0.3)
        left, right = tank.physics.encoder_counts()
        speeds = tank.physics.encoder_cps()
    finally:
        tank.close()
    assert left > 0 and right > 0                                   # both tracks moved forward
    rows = {(c.device, c.what): c for c in checks}
    assert all(c.result == PASS for c in checks), checks
    assert {d for d, _ in rows} == {"motor", "imu", "power", "servo", "estop", "camera.front"}
    for track, total in (("left", left), ("right", right)):           # counted during the pulse, then coasted
        moved = int(rows[("motor", f"pulse {track} track")].detail.split("(", 1)[1].split(")", 1)[0])
        assert 0 < moved <= total
    assert rows[("motor", "zero duty")].result == PASS
    assert max(abs(v) for v in speeds) < 1.0                         # stopped at the end (counts/s)


def test_the_command_skips_motion_without_a_terminal_or_yes(capsys, monkeypatch):
    monkeypatch.setattr("sys.stdin", None)
    assert main(["selftest", "--config", str(PARAMS)]) == 0
    out = capsys.readouterr().out
    assert "motion test skipped: no terminal to confirm on and no --yes" in out
    assert "pulse tracks" in out and SKIP in out and "selftest: no failures; NOT tested: motor pulse tracks" in out
    assert "all passed" not in out


def test_the_command_with_yes_pulses_and_prints_the_table(capsys):
    assert main(["selftest", "--config", str(PARAMS), "--yes", "--pulse-s", "0.2"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split() == ["device", "check", "result", "detail"]
    assert "pulse left track   PASS" in out and "zero duty" in out


def test_a_missing_device_fails_with_its_reason_and_exit_1(tmp_path, capsys):
    doc = sim_config(drivers={"motor": {"kind": "roboclaw", "port": "/dev/ttyNOPE9"}})
    path = tmp_path / "params.json"
    path.write_text(json.dumps(doc))
    assert main(["selftest", "--config", str(path), "--yes"]) == 1
    out = capsys.readouterr().out
    motor = next(line for line in out.splitlines() if line.startswith("motor"))
    assert FAIL in motor and "/dev/ttyNOPE9" in motor
    imu = next(line for line in out.splitlines() if line.startswith("imu"))
    assert PASS in imu and "selftest: 1 failed" in out


def test_a_config_error_is_exit_2(tmp_path, capsys):
    path = tmp_path / "params.json"
    path.write_text('{"drivers": {"motor": {"kind": "stepper"}}}')
    assert main(["selftest", "--config", str(path)]) == 2


@pytest.mark.parametrize("fault", ["motor_reversed", "encoder_swapped"])
def test_a_side_wired_backwards_fails_and_names_the_fix(fault):
    cfg = loads(json.dumps(sim_config()))
    tank = SimTank(cfg)
    try:
        tank.physics.set_wiring("right", **{fault: True})
        checks = run_checks(cfg, motion=True, sim=tank, duty=0.15, pulse_s=0.3)
    finally:
        tank.close()
    rows = {(c.device, c.what): c for c in checks}
    assert rows[("motor", "pulse left track")].result == PASS            # the other side is wired right
    right = rows[("motor", "pulse right track")]
    assert right.result == FAIL, right
    assert "counts ran against the duty" in right.detail and "(-" in right.detail
    assert "swap its encoder's A and B wires" in right.detail and "invert_right" in right.detail
    assert rows[("motor", "zero duty")].result == PASS


def test_the_command_exits_1_for_a_motor_wired_backwards(monkeypatch, capsys):
    real = SimTank.__init__

    def backwards(self, *args, **kwargs):                                 # the emulated robot, wired wrong
        real(self, *args, **kwargs)
        self.physics.set_wiring("left", motor_reversed=True)

    monkeypatch.setattr(SimTank, "__init__", backwards)
    assert main(["selftest", "--config", str(PARAMS), "--yes", "--pulse-s", "0.2"]) == 1
    out = capsys.readouterr().out
    left = next(line for line in out.splitlines() if "pulse left track" in line)
    assert FAIL in left and "invert_left" in left and "selftest: 1 failed" in out
