"""The recorder's config section (strict like the rest) and the CLI's answers without incidents."""

from __future__ import annotations

import json

import pytest

from agent.__main__ import main
from agent.config import AgentConfig, ConfigError, load
from agent.config.recorder import RecorderConfig
from agent.recorder.incidents import IncidentLog, make
from agent.testing.running_agent import sim_config


def test_the_recorder_section_is_strict_and_range_checked():
    for bad, where in (({"max_mib": 0}, "max_mib"), ({"frame_fps": -1}, "frame_fps"),
                       ({"chunk_max_s": float("nan")}, "chunk_max_s"), ({"dirr": "x"}, "dirr")):
        with pytest.raises(Exception) as err:
            AgentConfig.model_validate(sim_config(recorder=bad))
        assert where in str(err.value)
    cfg = AgentConfig.model_validate(sim_config(recorder={"enabled": True, "dir": "/tmp/x"}))
    assert cfg.recorder.directory().as_posix() == "/tmp/x"


def test_the_default_directory_is_the_systemd_state_directory(monkeypatch):
    monkeypatch.setenv("STATE_DIRECTORY", "/var/lib/robot-agent")
    assert RecorderConfig().directory().as_posix() == "/var/lib/robot-agent/recordings"
    monkeypatch.delenv("STATE_DIRECTORY")
    assert RecorderConfig().directory() is None          # not recording, said once at start


def test_incidents_and_export_answer_without_incidents(tmp_path, capsys):
    assert main(["incidents", "--dir", str(tmp_path / "none")]) == 2
    (tmp_path / "rec").mkdir()
    assert main(["incidents", "--dir", str(tmp_path / "rec")]) == 1
    assert "no incidents" in capsys.readouterr().out
    IncidentLog(tmp_path / "rec").append(make(1_796_000_000.0, "estop", "test", "cli"))
    assert main(["incidents", "--dir", str(tmp_path / "rec"), "--json"]) == 0
    [row] = json.loads(capsys.readouterr().out)
    assert row["kind"] == "estop" and row["time"].startswith("2026-")
    assert main(["export", "nope", "--dir", str(tmp_path / "rec")]) == 1
    out = tmp_path / "e.mcap"
    assert main(["export", row["id"][:15], "-o", str(out), "--dir", str(tmp_path / "rec")]) == 0
    assert out.stat().st_size > 0                          # a valid, empty window


def test_the_cli_reads_recorder_dir_from_a_config(tmp_path, capsys):
    params = tmp_path / "params.json"
    params.write_text(json.dumps(sim_config(recorder={"dir": str(tmp_path / "rec")})))
    (tmp_path / "rec").mkdir()
    IncidentLog(tmp_path / "rec").append(make(1_796_000_000.0, "link_lost", "hub gone", "artex"))
    assert main(["incidents", "--config", str(params)]) == 0
    assert "hub gone" in capsys.readouterr().out
    assert load(params).recorder.dir == str(tmp_path / "rec")
    params.write_text("{")
    assert main(["incidents", "--config", str(params)]) == 2
    with pytest.raises(ConfigError):
        load(params)


def test_the_incident_log_keeps_its_newest_lines_within_its_bound(tmp_path, monkeypatch):
    import agent.recorder.incidents as incidents
    monkeypatch.setattr(incidents, "MAX_FILE_BYTES", 20_000)
    monkeypatch.setattr(incidents, "KEEP_LINES", 50)
    log = IncidentLog(tmp_path)
    for i in range(400):
        log.append(make(1_796_000_000.0 + i, "stop", f"stop {i}", "artex"))
    got = log.read()
    assert log.path.stat().st_size <= 20_000 + 200
    assert got[-1].reason == "stop 399" and [int(g.reason.split()[1]) for g in got] == list(range(400 - len(got), 400))


def test_a_recorder_dir_that_is_a_file_is_refused_by_check_config_and_run_naming_the_path(tmp_path, capsys):
    """It passed the field checks and failed only at run time, when the recorder made the directory."""
    afile = tmp_path / "recordings"
    afile.write_text("not a directory")
    params = tmp_path / "params.json"
    for where, words in ((afile, f"{str(afile)!r} is a regular file, not a directory"),
                         (afile / "sub", f"{str(afile / 'sub')!r} cannot be made: {str(afile)!r} on its way is "
                                         "a regular file")):
        params.write_text(json.dumps(sim_config(recorder={"enabled": True, "dir": str(where)})))
        assert main(["check-config", str(params)]) == 2
        assert f"{params}: $.recorder.dir: {words}" in capsys.readouterr().out
        assert main(["run", "--config", str(params)]) == 2               # refused before anything starts
        assert words in capsys.readouterr().err
    for fine in ({"enabled": False, "dir": str(afile)},                  # off: the path is not used
                 {"enabled": True, "dir": str(tmp_path / "new" / "rec")}, # made at start
                 {"enabled": True, "dir": str(tmp_path)}):
        params.write_text(json.dumps(sim_config(recorder=fine)))
        assert main(["check-config", str(params)]) == 0, capsys.readouterr().out
    assert afile.read_text() == "not a directory" and not (tmp_path / "new").exists()
