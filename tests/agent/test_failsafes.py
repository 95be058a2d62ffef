"""The failsafe detectors (agent/control/failsafes.py) on made-up readings and an injected time,
and the ``failsafe`` config section (agent/config/failsafe.py)."""

from __future__ import annotations

import json
import math

import pytest

from agent.config import AgentConfig, ConfigError, loads
from agent.control.failsafes import (BATTERY, STALL, TILT, BatteryDetector, BatterySettings, StallDetector,
                                     StallSettings, TiltDetector, resolve, tilt_deg)
from agent.model import ImuSample, PowerSample
from drivers.base import MotorFeedback

G = 9.80665


def power(t: float, v: float, i: float = 0.5) -> PowerSample:
    return PowerSample(t_mono_s=t, voltage_v=v, current_a=i, power_w=v * i)


def imu(t: float, pitch_deg: float = 0.0, roll_deg: float = 0.0) -> ImuSample:
    p, r = math.radians(pitch_deg), math.radians(roll_deg)
    accel = (-G * math.sin(p), G * math.cos(p) * math.sin(r), G * math.cos(p) * math.cos(r))
    return ImuSample(t_mono_s=t, accel_mps2=accel, gyro_radps=(0.0, 0.0, 0.0))


def battery(**kw) -> BatteryDetector:
    s = dict(low_v=10.5, critical_v=9.9, hysteresis_v=0.3, low_for_s=1.0, critical_for_s=0.5,
             average_s=0.0, sag_ohm=0.0, low_speed_mps=0.4)
    return BatteryDetector(BatterySettings(**{**s, **kw}))


# ---------------------------------------------------------------------------- battery


def test_battery_low_caps_after_its_time_and_recovers_above_hysteresis():
    b = battery()
    assert b.update(0.0, power(0.0, 11.0)) == (None, False) and not b.low
    b.update(0.1, power(0.1, 10.4))
    b.update(1.0, power(1.0, 10.4))
    assert not b.low                               # 0.9 s below: not yet
    b.update(1.1, power(1.1, 10.4))
    assert b.low and "10.40 V below low 10.50 V" in b.cap_reason() and "0.40 m/s" in b.cap_reason()
    b.update(2.0, power(2.0, 10.7))                 # above low, within the hysteresis: still low
    assert b.low
    b.update(2.1, power(2.1, 10.81))
    assert not b.low


def test_battery_low_timer_restarts_when_the_voltage_comes_back():
    b = battery()
    b.update(0.0, power(0.0, 10.4))
    b.update(0.9, power(0.9, 10.6))                 # back above before 1 s
    b.update(1.5, power(1.5, 10.4))
    b.update(2.4, power(2.4, 10.4))
    assert not b.low
    b.update(2.5, power(2.5, 10.4))
    assert b.low


def test_battery_critical_trips_once_with_figures_and_clears_above_hysteresis():
    b = battery()
    assert b.update(0.0, power(0.0, 9.8))[0] is None
    reason, cleared = b.update(0.5, power(0.5, 9.8))
    assert reason == "battery 9.80 V below critical 9.90 V for 0.5 s" and not cleared
    assert b.update(0.6, power(0.6, 9.7)) == (None, False)        # tripped once
    assert b.update(0.7, power(0.7, 10.1)) == (None, False)       # 9.9 + 0.3 not reached
    assert b.update(0.8, power(0.8, 10.25)) == (None, True)


def test_battery_average_rides_through_load_sag():
    b = battery(average_s=2.0, critical_for_s=0.5)
    t = 0.0
    for k in range(20):                             # 2 Hz samples: one 0.5 s sag dip in every 2 s
        t = k * 0.5
        assert b.update(t, power(t, 9.7 if k % 4 == 0 else 10.4))[0] is None
    assert b.volts == pytest.approx((9.7 + 3 * 10.4) / 4, abs=0.2)


def test_battery_sag_compensation_adds_i_times_r():
    b = battery(sag_ohm=0.1)
    b.update(0.0, power(0.0, 9.8, i=4.0))           # 9.8 + 0.4 = 10.2: not critical
    assert b.update(1.0, power(1.0, 9.8, i=4.0)) == (None, False) and b.volts == pytest.approx(10.2)


def test_battery_repeated_sample_counts_once_and_none_changes_nothing():
    b = battery(average_s=10.0)
    b.update(0.0, power(0.0, 11.0))
    b.update(0.1, power(0.0, 11.0))                 # same sample again
    b.update(0.2, power(0.2, 10.0))
    assert b.volts == pytest.approx(10.5)
    b.update(0.3, None)
    b.update(0.4, PowerSample(0.4, None, 0.0, 0.0))
    b.update(0.5, power(0.5, float("nan")))
    assert b.volts == pytest.approx(10.5)


# ---------------------------------------------------------------------------- tilt


def test_tilt_angles_from_the_gravity_vector():
    assert tilt_deg(imu(0, pitch_deg=30).accel_mps2) == pytest.approx((30.0, 0.0))
    assert tilt_deg(imu(0, roll_deg=-50).accel_mps2) == pytest.approx((0.0, -50.0))
    assert tilt_deg((0.0, 0.0, G)) == (0.0, 0.0)


def test_tilt_trips_after_the_debounce_and_clears_below_the_margin():
    d = TiltDetector(40.0, 0.3, 5.0)
    assert d.update(0.0, imu(0.0, pitch_deg=45)) == (None, False)
    assert d.update(0.2, imu(0.2, pitch_deg=45)) == (None, False)
    reason, _ = d.update(0.3, imu(0.3, pitch_deg=45))
    assert reason == "pitch 45.0 deg over 40.0 deg for 0.30 s"
    assert d.update(0.4, imu(0.4, pitch_deg=37)) == (None, False)   # under 40, not under 35
    assert d.update(0.5, imu(0.5, pitch_deg=34)) == (None, True)
    assert d.update(0.6, imu(0.6, roll_deg=-60)) == (None, False)   # a new tilt: debounce again
    assert d.update(0.9, imu(0.9, roll_deg=-60))[0] == "roll -60.0 deg over 40.0 deg for 0.30 s"


def test_tilt_bump_shorter_than_the_debounce_does_not_trip():
    d = TiltDetector(40.0, 0.3, 5.0)
    for k in range(50):
        t = k * 0.02
        over = k % 10 < 5                                          # 0.1 s over, 0.1 s under
        assert d.update(t, imu(t, pitch_deg=60 if over else 0))[0] is None


def test_tilt_without_a_sample_restarts_the_debounce():
    d = TiltDetector(40.0, 0.3, 5.0)
    d.update(0.0, imu(0.0, roll_deg=50))
    d.update(0.2, None)
    d.update(0.3, imu(0.3, roll_deg=50))
    assert d.update(0.5, imu(0.5, roll_deg=50))[0] is None
    assert d.update(0.6, imu(0.6, roll_deg=50))[0] is not None


# ---------------------------------------------------------------------------- stall


def stall(**kw) -> StallDetector:
    s = dict(duty=0.3, speed_mps=0.08, for_s=2.0, max_current_a=5.0, current_for_s=0.5, counts_per_m=4000.0)
    return StallDetector(StallSettings(**{**s, **kw}))


def fb(left_mps=0.0, right_mps=0.0, left_a=1.0, right_a=1.0) -> MotorFeedback:
    return MotorFeedback(left_cps=left_mps * 4000, right_cps=right_mps * 4000, left_a=left_a, right_a=right_a)


def test_stall_pushing_track_that_does_not_turn_trips_after_its_time():
    d = stall()
    for k in range(100):                                           # 2 s at 50 Hz, not yet
        assert d.update(k * 0.02, (0.6, 0.6), fb(0.6, 0.01)) == (None, False)
    reason, _ = d.update(2.0, (0.6, 0.6), fb(0.6, 0.01))
    assert reason == "right track at duty +0.60 moved 0.01 m/s (under 0.08 m/s) for 2.0 s"
    assert d.update(2.02, (0.0, 0.0), fb(0.0, 0.0)) == (None, True)  # zero duty: nothing pushes


def test_stall_low_duty_or_moving_track_is_no_stall():
    d = stall()
    for k in range(300):
        t = k * 0.02
        assert d.update(t, (0.25, -0.25), fb(0.0, 0.0))[0] is None    # under the duty threshold
        assert d.update(t, (0.9, 0.9), fb(0.5, 0.5))[0] is None
    assert d.update(10.0, (0.9, 0.9), None)[0] is None                # no feedback: no verdict


def test_stall_current_over_the_limit_trips_and_clears():
    d = stall()
    assert d.update(0.0, (0.5, 0.5), fb(0.5, 0.5, left_a=6.0))[0] is None
    assert d.update(0.25, (0.5, 0.5), fb(0.5, 0.5, left_a=6.1))[0] is None
    reason, _ = d.update(0.5, (0.5, 0.5), fb(0.5, 0.5, left_a=6.2))
    assert reason == "left motor 6.2 A over 5.0 A for 0.50 s"
    assert d.update(0.6, (0.0, 0.0), fb(0.0, 0.0, left_a=6.2)) == (None, False)   # current still over
    assert d.update(0.7, (0.0, 0.0), fb(0.0, 0.0, left_a=0.1)) == (None, True)


def test_stall_without_encoders_checks_current_only():
    d = stall(speed=False)
    for k in range(200):
        assert d.update(k * 0.02, (1.0, 1.0), fb(0.0, 0.0))[0] is None


# ---------------------------------------------------------------------------- all together, from config


def sim_cfg(**failsafe) -> AgentConfig:
    from tests.conftest import sim_config
    data = sim_config()
    data["failsafe"] = failsafe
    return AgentConfig.model_validate(data)


def test_resolve_builds_pack_thresholds_from_chemistry_and_cells():
    cfg = sim_cfg()
    fs = resolve(cfg)
    assert cfg.drivers.power.battery.chemistry == "lipo" and cfg.drivers.power.battery.cells == 3
    assert fs.battery.s.low_v == pytest.approx(10.5) and fs.battery.s.critical_v == pytest.approx(9.9)
    assert fs.battery.s.low_speed_mps == pytest.approx(cfg.base.max_speed_mps / 2)
    assert fs.tilt is not None and fs.stall is not None and fs.warnings == ()
    assert fs.stall.s.max_current_a is None


def test_update_reports_trips_clears_and_the_cap():
    fs = resolve(sim_cfg(battery={"low_for_s": 0.0, "critical_for_s": 0.0, "average_s": 0.5},
                         tilt={"for_s": 0.1}))     # the shortest debounces the config takes
    v = fs.update(-0.1, duty=(0.0, 0.0), feedback=None, imu=imu(-0.1, roll_deg=80), power=power(-0.1, 9.0))
    assert [k for k, _ in v.trips] == [BATTERY]                     # tilt: not yet over for 0.1 s
    v = fs.update(0.0, duty=(0.0, 0.0), feedback=None, imu=imu(0.0, roll_deg=80), power=power(0.0, 9.0))
    assert [k for k, _ in v.trips] == [TILT] and v.speed_cap_mps == pytest.approx(0.5)
    assert v.speed_cap_reason.startswith("battery 9.00 V below low 10.50 V")
    v = fs.update(1.0, duty=(0.0, 0.0), feedback=None, imu=imu(1.0), power=power(1.0, 12.0))
    assert v.trips == () and v.cleared == (BATTERY, TILT) and v.speed_cap_mps is None


def test_missing_devices_turn_failsafes_off_with_one_warning_each():
    from tests.conftest import sim_config
    data = sim_config()
    for k in ("power", "imu", "motor"):
        data["drivers"].pop(k, None)
    fs = resolve(AgentConfig.model_validate(data))
    assert (fs.battery, fs.tilt, fs.stall) == (None, None, None)
    assert len(fs.warnings) == 3 and "drivers.power" in fs.warnings[0] and "drivers.imu" in fs.warnings[1]


def test_sabertooth_without_feedback_has_no_stall_check():
    from tests.conftest import sim_config
    data = sim_config()
    data["drivers"]["motor"] = {"kind": "sabertooth", "port": "sim://"}
    fs = resolve(AgentConfig.model_validate(data))
    assert fs.stall is None and any("sabertooth controller reports neither" in w for w in fs.warnings)


@pytest.mark.parametrize("failsafe, path", [
    ({"tilt": {"max_deg": float("nan")}}, "$.failsafe.tilt.max_deg"),
    ({"battery": {"low_for_s": float("inf")}}, "$.failsafe.battery.low_for_s"),
    ({"battery": {"sag_ohm": -1}}, "$.failsafe.battery.sag_ohm"),
    ({"stall": {"duty": 1.5}}, "$.failsafe.stall.duty"),
    ({"stall": {"max_current_a": "9"}}, "$.failsafe.stall.max_current_a"),
    ({"stall": {"dutty": 0.3}}, "$.failsafe.stall.dutty"),
    ({"tilt": {"max_deg": 10, "clear_margin_deg": 10}}, "$.failsafe.tilt"),
    ({"battery": {"low_v_per_cell": 3.4, "critical_v_per_cell": 3.5}}, "$.failsafe"),
    ({"battery": {"low_v_per_cell": 3.2}}, "$.failsafe"),              # below the lipo critical default
    ({"battery": {"low_speed_mps": 1.0}}, "$.failsafe"),               # the base's maximum: limits nothing
    ({"brakes": {}}, "$.failsafe.brakes"),
    ({"battery": {"enabled": "false"}}, "$.failsafe.battery.enabled"),     # a JSON boolean only
    ({"tilt": {"enabled": 0}}, "$.failsafe.tilt.enabled"),
    ({"stall": {"enabled": "no"}}, "$.failsafe.stall.enabled"),
    ({"tilt": {"for_s": 0}}, "$.failsafe.tilt.for_s"),                     # a debounce is kept
    ({"battery": {"average_s": 0}}, "$.failsafe.battery.average_s"),
])
def test_bad_failsafe_settings_are_refused_with_their_path(failsafe, path):
    from tests.conftest import sim_config
    data = sim_config()
    data["failsafe"] = failsafe
    with pytest.raises(ConfigError) as err:
        loads(json.dumps(data))
    assert [p for p, _ in err.value.problems] == [path], err.value.problems


@pytest.mark.parametrize("battery, words", [
    ({"low_v_per_cell": 5.0, "critical_v_per_cell": 4.5}, "low 5.0 V per cell is at or above a full lipo cell (4.2 V"),
    ({"low_v_per_cell": 4.2}, "low 4.2 V per cell is at or above a full lipo cell (4.2 V"),
    ({"critical_v_per_cell": 4.3, "low_v_per_cell": 4.6}, "at or above a full lipo cell (4.2 V"),
])
def test_battery_thresholds_above_a_full_cell_are_refused_naming_the_full_cell_voltage(battery, words):
    from tests.conftest import sim_config
    data = sim_config()
    data["failsafe"] = {"battery": battery}
    with pytest.raises(ConfigError) as err:
        loads(json.dumps(data))
    (problem,) = err.value.problems
    assert problem[0] == "$.failsafe" and words in problem[1], problem
    data["drivers"]["power"]["battery"]["chemistry"] = "lifepo4"
    data["failsafe"] = {"battery": {"low_v_per_cell": 3.5, "critical_v_per_cell": 3.0}}
    with pytest.raises(ConfigError, match=r"full lifepo4 cell \(3.4 V"):
        loads(json.dumps(data))


def test_check_config_warns_when_a_protocol_source_is_at_or_above_the_console(tmp_path, capsys):
    from agent.__main__ import main
    from tests.conftest import sim_config
    data = sim_config()
    path = tmp_path / "params.json"
    path.write_text(json.dumps(data))
    assert main(["check-config", str(path)]) == 0
    assert "$.control.sources" not in capsys.readouterr().out
    data.setdefault("control", {})["sources"] = {"artex": {"priority": 10}, "robot_msg": {"priority": 50},
                                                 "sim2bot": {"priority": 40}, "console": {"priority": 40}}
    path.write_text(json.dumps(data))
    assert main(["check-config", str(path)]) == 0                      # a warning, not an error
    out = capsys.readouterr().out
    assert "warning: $.control.sources: control.sources.robot_msg.priority 50 is at or above the console's (40): " \
           "robot_msg overrides the operator" in out, out
    assert "control.sources.sim2bot.priority 40 is at or above the console's (40): sim2bot ties with" in out
    assert "artex" not in out.split("ok (")[0]


def test_simulated_tank_params_load_with_failsafes_that_fit_the_emulated_battery():
    from pathlib import Path
    from drivers.emulators.tank import TankParams
    cfg = loads(Path("config/params.json").read_text())
    fs = resolve(cfg)
    p = TankParams(cells=cfg.drivers.power.battery.cells)
    empty, full = p.cells * p.cell_empty_v, p.cells * p.cell_full_v
    assert empty < fs.battery.s.critical_v < fs.battery.s.low_v < full   # both reachable by draining
    assert fs.warnings == ()


def test_stall_needs_fresh_feedback_readings_not_one_repeated():
    d = stall()
    stale = fb(0.0, 0.0)
    for k in range(200):                                           # 4 s of ticks, one reading repeated
        assert d.update(k * 0.02, (0.6, 0.6), stale)[0] is None
    assert d.update(4.0, (0.6, 0.6), fb(0.0, 0.0))[0] is None       # 2nd reading
    assert d.update(4.02, (0.6, 0.6), fb(0.0, 0.0))[0] is not None  # 3rd: trips


def test_check_config_names_failsafes_off_and_refuses_bad_ones(tmp_path, capsys):
    from agent.__main__ import main
    from tests.conftest import sim_config
    data = sim_config()
    data["drivers"].pop("power")
    path = tmp_path / "params.json"
    path.write_text(json.dumps(data))
    assert main(["check-config", str(path)]) == 0
    out = capsys.readouterr().out
    assert "$.failsafe: failsafe.battery is off: no power monitor configured (drivers.power)" in out
    data["failsafe"]["tilt"]["for_s"] = float("nan")
    path.write_text(json.dumps(data))
    assert main(["check-config", str(path)]) == 2
    assert "$.failsafe.tilt.for_s: Input should be a finite number" in capsys.readouterr().out
