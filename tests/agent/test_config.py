"""Configuration: SDK compatibility, strict validation with JSON paths, check-config CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agent.config import AgentConfig, ConfigError, load, loads
from agent.__main__ import main
from tests.conftest import PARAMS, ROOT, sim_config

SDK_PARAMS = {
    "name": "tank-01", "type": "Robot", "telem_can": True, "video_can": True,
    "server": "http://localhost", "port": 8765, "max_send_freq": 0.05,
    "logger_type": "console", "logger_level": "all", "max_main_freq": 0.1, "external": {},
}


def test_sdk_params_load_unchanged():
    cfg = loads(json.dumps(SDK_PARAMS))
    assert (cfg.name, cfg.type, cfg.telem_can, cfg.video_can) == ("tank-01", "Robot", True, True)
    assert (cfg.server, cfg.port, cfg.max_send_freq) == ("http://localhost", 8765, 0.05)
    assert cfg.artex_enabled


def test_sdk_defaults_apply_to_an_empty_file():
    cfg = loads("{}")
    assert (cfg.name, cfg.type, cfg.server, cfg.port) == ("DefaultName", "DefaultType", "http://artex.arcon", 80)
    assert cfg.max_send_freq == pytest.approx(1 / 20)
    assert cfg.telem_can is False and cfg.video_can is False
    assert cfg.watchdog.velocity_timeout_s == 0.5


@pytest.mark.parametrize("server", ["", None])
def test_artex_off_when_server_empty(server):
    assert not loads(json.dumps({"server": server})).artex_enabled


def test_shipped_params_is_valid_and_simulated():
    cfg = load(PARAMS)
    assert cfg.drivers.motor.port == "sim://"
    assert cfg.drivers.cameras[0].source == "sim://pattern"
    assert cfg.server == "http://localhost" and cfg.port == 8765


@pytest.mark.parametrize("doc, path, words", [
    ({"nmae": "x"}, "$.nmae", "did you mean 'name'"),
    ({"drivers": {"motor": {"kind": "roboclaw", "port": "/dev/x", "adress": 128}}}, "$.drivers.motor.adress", "did you mean 'address'"),
    ({"drivers": {"motor": {"kind": "stepper", "port": "/dev/x"}}}, "$.drivers.motor", "stepper"),
    ({"watchdog": {"velocity_timeout_s": 0}}, "$.watchdog.velocity_timeout_s", "greater than"),
    ({"control": {"sources": {"artex": {"priorty": 3}}}}, "$.control.sources.artex.priorty", "did you mean 'priority'"),
    ({"drivers": {"cameras": [{"id": "a"}, {"id": "b", "widht": 5}]}}, "$.drivers.cameras[1].widht", "did you mean 'width'"),
    ({"port": "eighty"}, "$.port", "integer"),
])
def test_errors_name_the_json_path(doc, path, words):
    with pytest.raises(ConfigError) as info:
        loads(json.dumps(doc))
    problems = dict(info.value.problems)
    assert path in problems, problems
    assert words in problems[path]


def test_every_problem_is_reported_at_once():
    with pytest.raises(ConfigError) as info:
        loads(json.dumps({"nmae": 1, "port": -1, "base": {"track_width_m": 0}}))
    paths = {p for p, _ in info.value.problems}
    assert {"$.nmae", "$.port", "$.base.track_width_m"} <= paths


def test_not_json_and_not_an_object():
    with pytest.raises(ConfigError) as info:
        loads("{name: 1}")
    assert "line 1" in info.value.problems[0][1]
    with pytest.raises(ConfigError):
        loads("[1, 2]")


def test_missing_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError):
        load(tmp_path / "nope.json")


def test_config_is_frozen():
    cfg = loads("{}")
    with pytest.raises(Exception):
        cfg.name = "other"  # type: ignore[misc]


def test_servo_channels_must_be_unique():
    doc = {"drivers": {"servo": {"kind": "pca9685", "bus": 1, "joints": [
        {"name": "a", "channel": 0}, {"name": "b", "channel": 0}]}}}
    with pytest.raises(ConfigError) as info:
        loads(json.dumps(doc))
    assert "servo channel 0 is already used by $.drivers.servo.joints[0]" in str(info.value)


def _check_config(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "agent", "check-config", str(path)],
                          capture_output=True, text=True, cwd=ROOT, timeout=60)


def test_check_config_ok_exit_0():
    res = _check_config(PARAMS)
    assert res.returncode == 0, res.stderr
    assert "ok" in res.stdout


def test_check_config_broken_exit_2_with_paths(tmp_path):
    bad = tmp_path / "params.json"
    bad.write_text(json.dumps({"nmae": "x", "drivers": {"imu": {"kind": "mpu6050", "adress": 1}},
                               "control": {"rate_hz": 5}}))
    res = _check_config(bad)
    assert res.returncode == 2
    out = res.stdout
    assert "$.nmae" in out and "did you mean 'name'" in out
    assert "$.drivers.imu.adress" in out
    assert "$.control.rate_hz" in out


def test_check_config_unreadable_exit_2(tmp_path):
    res = _check_config(tmp_path / "missing.json")
    assert res.returncode == 2


def test_examples_are_valid():
    examples = sorted((ROOT / "config" / "examples").glob("*.json"))
    readme = (ROOT / "config" / "examples" / "README.md").read_text()
    for path in examples:
        cfg = load(path)
        assert isinstance(cfg, AgentConfig)
        assert cfg.console.enabled and cfg.console.loopback, path.name          # the console, on loopback
        assert f"`{path.name}`" in readme, f"{path.name} is not documented in config/examples/README.md"
        for cam in cfg.drivers.cameras:                                           # what the installer provides
            assert not str(cam.source).startswith("gst:"), (path.name, cam.source)
    assert "artex.arcon" in readme and "does not resolve" in readme


def test_two_i2c_devices_on_one_address_are_refused():
    doc = {"drivers": {"power": {"kind": "ina219", "bus": 1, "address": 64},
                       "servo": {"kind": "pca9685", "bus": 1, "address": 64}}}
    with pytest.raises(ConfigError) as info:
        loads(json.dumps(doc))
    assert "0x40" in str(info.value)
    doc["drivers"]["servo"]["bus"] = 2
    loads(json.dumps(doc))


@pytest.mark.parametrize("doc, path, words", [
    ({"logger_level": "verbose"}, "$.logger_level", "unknown log level 'verbose'"),
    ({"logger_type": "syslog"}, "$.logger_type", "'console' or 'file'"),
])
def test_logger_settings_are_checked_at_load_not_only_at_run(doc, path, words):
    with pytest.raises(ConfigError) as info:
        loads(json.dumps(doc))
    assert [(p, m) for p, m in info.value.problems if p == path and words in m], info.value.problems
    assert loads(json.dumps({"logger_level": "skip_TODO", "logger_type": "file", "log_dir": "/tmp"})).logger_level == "skip_TODO"


def test_file_logging_without_log_dir_takes_the_sdks_working_directory_with_a_warning():
    cfg = loads(json.dumps({"logger_type": "file"}))
    assert cfg.file_log_dir == "." and any("without log_dir" in w for w in cfg.compat_warnings)
    assert loads(json.dumps({"logger_type": "console"})).file_log_dir is None


def test_foreign_top_level_keys_are_ignored_with_a_warning_but_typos_stay_errors(tmp_path):
    cfg = loads(json.dumps({"name": "tank", "robot_ip": "10.0.0.5", "camera_index": 0}))
    assert cfg.ignored_keys == ("robot_ip", "camera_index") and cfg.name == "tank"
    assert "'robot_ip', 'camera_index'" in cfg.ignored_warning()
    path = tmp_path / "params.json"
    path.write_text(json.dumps({"robot_ip": "10.0.0.5"}))
    res = _check_config(path)
    assert res.returncode == 0 and "warning: ignoring top-level keys" in res.stdout and "'robot_ip'" in res.stdout
    for typo, known in (("driver", "drivers"), ("watchdgo", "watchdog"), ("robot_mgs", "robot_msg")):
        with pytest.raises(ConfigError, match=f"did you mean '{known}'"):
            loads(json.dumps({typo: {}}))
    with pytest.raises(ConfigError, match="unknown key 'colour'"):   # inside the agent's sections: errors
        loads(json.dumps({"base": {"colour": "red"}}))


def test_a_huge_integer_is_explained_in_the_files_terms():
    with pytest.raises(ConfigError) as info:
        loads('{"port": ' + "9" * (sys.get_int_max_str_digits() + 1) + "}")
    assert f"more than {sys.get_int_max_str_digits()} digits" in str(info.value)
    assert "set_int_max_str_digits" not in str(info.value)


@pytest.mark.parametrize("server", ["ftp://x", "artex.arcon", "http://hub:8765", "http://hub/socket", "http://"])
def test_server_must_be_an_http_url_of_a_host(server):
    with pytest.raises(ConfigError) as info:
        loads(json.dumps({"server": server}))
    assert [m for p, m in info.value.problems if p == "$.server" and "http:// or https://" in m], info.value.problems


@pytest.mark.parametrize("server", ["http://artex.arcon", "https://hub.example/", "HTTP://10.0.0.2", "http://[::1]"])
def test_server_accepts_http_urls_of_names_and_addresses(server):
    assert loads(json.dumps({"server": server})).server == server


def test_check_config_warns_of_a_console_the_agent_will_not_start(tmp_path, capsys):
    path = tmp_path / "params.json"
    path.write_text(json.dumps({"console": {"enabled": True, "host": "0.0.0.0"}}))
    assert main(["check-config", str(path)]) == 0          # the robot runs; only its console does not
    out = capsys.readouterr().out
    assert "warning: $.console: console NOT started: host 0.0.0.0" in out and "console.token" in out
    path.write_text(json.dumps({"console": {"enabled": True, "host": "0.0.0.0", "token": "kV3q9ZtR0bWm-Lx7Yp2Hc_Ue5Na8Jd4G"}}))
    assert main(["check-config", str(path)]) == 0
    assert "warning" not in capsys.readouterr().out


@pytest.mark.parametrize("doc, path, words", [
    ({"drivers": {"power": {"kind": "ina219", "max_current_a": float("inf")}}}, "$.drivers.power.max_current_a", "finite"),
    ({"drivers": {"motor": {"kind": "roboclaw", "port": "/dev/x", "baud": 10**18}}}, "$.drivers.motor.baud", "less than"),
    ({"drivers": {"cameras": [{"id": "a", "source": 0, "fps": 1e-300}]}}, "$.drivers.cameras[0].fps", "greater than"),
    ({"drivers": {"servo": {"kind": "pca9685", "joints": [{"name": "j", "channel": 0, "max_rad": float("inf")}]}}},
     "$.drivers.servo.joints[0].max_rad", "finite"),
    ({"base": {"track_width_m": float("nan")}}, "$.base.track_width_m", "finite"),
    ({"sim2bot": {"reconnect_delay_s": 1e-9}}, "$.sim2bot.reconnect_delay_s", "greater than"),
    ({"drivers": {"imu": {"kind": "mpu6050", "address": "0xZZ"}}}, "$.drivers.imu.address", "such as 0x68"),
])
def test_non_finite_and_absurd_numbers_are_config_errors(doc, path, words):
    with pytest.raises(ConfigError) as info:
        loads(json.dumps(doc))
    assert [m for p, m in info.value.problems if p == path and words in m], info.value.problems


def test_addresses_accept_hex_strings():
    cfg = loads(json.dumps({"drivers": {"imu": {"kind": "mpu6050", "address": "0x69"},
                                        "motor": {"kind": "roboclaw", "port": "/dev/x", "address": "0x81"}}}))
    assert (cfg.drivers.imu.address, cfg.drivers.motor.address) == (0x69, 0x81)


@pytest.mark.parametrize("content, words", [
    (b'{"name": "\xff\xfe"}', "not UTF-8"),
    (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
    (b'{"port": ' + b"9" * 5000 + b"}", "unusable number"),
])
def test_unparseable_files_end_in_exit_2_with_a_message(tmp_path, capsys, content, words):
    path = tmp_path / "params.json"
    path.write_bytes(content)
    assert main(["check-config", str(path)]) == 2
    assert words in capsys.readouterr().out
    assert main(["run", "--config", str(path)]) == 2                   # run stops before starting anything
    assert words in capsys.readouterr().err


@pytest.mark.parametrize("text, path, words", [
    ('{"watchdog": {"velocity_timeout_s": true}}', "$.watchdog.velocity_timeout_s", "valid number"),
    ('{"console": {"port": "8080"}}', "$.console.port", "valid integer"),
    ('{"name": "a", "name": "b"}', "$", "duplicate key 'name'"),
])
def test_strict_json_numbers_are_numbers_and_keys_are_unique(text, path, words):
    """Lax coercions would turn true into 1 s and "8080" into 8080; a duplicate key would mean
    only its last value. Each is a config error at its path."""
    with pytest.raises(ConfigError) as err:
        loads(text)
    assert any(p == path and words in m for p, m in err.value.problems), err.value.problems


def test_an_endless_file_is_refused_not_read_forever():
    with pytest.raises(ConfigError, match="a character device, not a regular file"):
        load("/dev/zero")


def test_a_fifo_given_as_the_config_exits_2_at_once_not_blocked_on_its_open(tmp_path):
    """Opening a FIFO without a writer blocks for ever: the command must refuse it, not hang."""
    fifo = tmp_path / "params.json"
    os.mkfifo(fifo)
    res = subprocess.run([sys.executable, "-m", "agent", "check-config", str(fifo)], capture_output=True,
                         text=True, timeout=60, cwd=ROOT)
    assert res.returncode == 2 and "a FIFO, not a regular file" in res.stdout + res.stderr, res


def test_one_run_lists_every_cross_field_problem_with_its_json_path(tmp_path, capsys):
    doc = {
        "server": None,
        "drivers": {
            "motor": {"kind": "roboclaw", "port": "sim://", "invert_left": "yes"},
            "imu": {"kind": "bno055", "bus": 1, "address": "0x40"},
            "power": {"kind": "ina219", "bus": 1, "address": "0x41"},
            "servo": {"kind": "pca9685", "bus": 1, "address": "0x41", "joints": [
                {"name": "pan", "channel": 0, "min_rad": 1.0, "max_rad": -1.0},
                {"name": "tilt", "channel": 1, "home_rad": 3.0, "min_rad": -1, "max_rad": 1},
                {"name": "pan", "channel": 0}]},
            "cameras": [{"id": "front", "source": "sim://pattern"}, {"id": "front", "source": "sim://pattern"}],
        },
        "console": {"enabled": True, "camera": "nope"},
    }
    with pytest.raises(ConfigError) as err:
        loads(json.dumps(doc))
    found = dict(err.value.problems)
    expected = {
        "$.drivers.motor.invert_left": "true or false",
        "$.drivers.imu.address": "0x40 is out of range: at most 0x29",
        "$.drivers.servo.joints[0]": "min_rad 1 must be below max_rad -1",
        "$.drivers.servo.joints[1]": "home_rad 3 is outside -1..1",
        "$.drivers.servo.joints[2].channel": "servo channel 0 is already used by $.drivers.servo.joints[0]",
        "$.drivers.servo.joints[2].name": "joint name 'pan' is already used",
        "$.drivers.servo.address": "address 0x41 on I2C bus 1 is already used by $.drivers.power",
        "$.drivers.cameras[1].id": "camera id 'front' is already used",
        "$.console.camera": "camera 'nope' is not configured",
    }
    for path, words in expected.items():
        assert words in found.get(path, ""), (path, err.value.problems)
    assert len(err.value.problems) == len(expected), err.value.problems     # each once, nothing else
    path = tmp_path / "params.json"
    path.write_text(json.dumps(doc))
    assert main(["check-config", str(path)]) == 2
    out = capsys.readouterr()
    assert all(p in out.out + out.err for p in expected)                  # the CLI prints them all


def test_a_cross_field_problem_alone_is_refused_and_a_clean_config_loads():
    doc = sim_config(console={"enabled": True, "camera": "rear"})
    with pytest.raises(ConfigError) as err:
        loads(json.dumps(doc))
    assert [p for p, _ in err.value.problems] == ["$.console.camera"]
    assert loads(json.dumps(sim_config(console={"enabled": True, "camera": "front"}))).console.camera == "front"
    for value in ("yes", 1, "true"):
        with pytest.raises(ConfigError) as err:
            loads(json.dumps(sim_config(drivers={"motor": {"kind": "roboclaw", "port": "sim://",
                                                           "invert_right": value}})))
        assert err.value.problems[0][0] == "$.drivers.motor.invert_right"


def test_a_utf8_bom_is_taken_and_a_bad_byte_after_it_is_named_at_its_offset_in_the_file(tmp_path, capsys):
    """Windows editors (Notepad) start a UTF-8 file with a byte order mark: check-config and run take
    it; a byte that is not UTF-8 is still refused, at its offset in the file (the BOM counted)."""
    path = tmp_path / "params.json"
    path.write_bytes(b"\xef\xbb\xbf" + PARAMS.read_bytes())
    assert main(["check-config", str(path)]) == 0
    assert "ok" in capsys.readouterr().out
    assert load(path).name == load(PARAMS).name
    path.write_bytes(b'\xef\xbb\xbf{"name": "\xff"}')
    assert main(["check-config", str(path)]) == 2
    assert "not UTF-8 text (byte 13: invalid start byte)" in capsys.readouterr().out
    assert main(["run", "--config", str(path)]) == 2
    assert "not UTF-8 text (byte 13" in capsys.readouterr().err
