"""A params.json written for the ``artex-robot`` SDK loads unchanged (issue 20 item 6).

The real SDK reads the same file first (its ``load_defaults`` in a subprocess, working directory
tmp_path, where its logger writes ``all.log``); then the agent loads it, with a warning for each
sloppy value the SDK takes, and drives from the real hub's ``{"com": "forward", "extra": 1}``.
"""

from __future__ import annotations

import json
import subprocess
import sys

from agent.config import loads
from agent.testing.artex_hub import artex_params
from tests.conftest import running_agent, wait_for

SDK_KEYS = {"name": "tank-sdk", "type": "Robot", "telem_can": True, "video_can": True,
            "max_send_freq": "0.1", "logger_type": "file", "logger_level": "all", "max_main_freq": 0.1,
            "external": {}, "my_own_key": 3}


def sdk_loads(tmp_path, params: dict) -> dict:
    """What the SDK makes of ``params`` (its ``Conductor.load_defaults``, no connection)."""
    (tmp_path / "params.json").write_text(json.dumps(params))
    code = ("import json; from artex_robot import Robot; r = Robot(); "
            "print(json.dumps({'freq': r.max_send_freq, 'log': r.log.type}))")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_sdks_file_logging_and_string_period_load_with_warnings(tmp_path):
    params = {**SDK_KEYS, "server": None}
    assert sdk_loads(tmp_path, params) == {"freq": 0.1, "log": "file"}
    assert (tmp_path / "all.log").exists()            # the SDK's default: the working directory
    cfg = loads(json.dumps(params))
    assert cfg.max_send_freq == 0.1 and cfg.file_log_dir == "."
    assert any("max_send_freq is the string '0.1'" in w for w in cfg.compat_warnings)
    assert any("log_dir" in w and "working directory" in w for w in cfg.compat_warnings)
    out = subprocess.run([sys.executable, "-m", "agent", "check-config", str(tmp_path / "params.json")],
                         cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "max_send_freq is the string" in out.stdout and "without log_dir" in out.stdout


def test_a_string_the_sdk_cannot_read_either_stays_an_error():
    for bad in ("fast", "nan", "inf"):
        try:
            loads(json.dumps({"max_send_freq": bad}))
        except Exception as err:  # ConfigError with the path
            assert "$.max_send_freq" in str(err)
        else:
            raise AssertionError(f"max_send_freq {bad!r} accepted")


async def test_extra_payload_key_obeys_the_command_and_two_types_are_refused(hub, caplog, tmp_path):
    params = {**artex_params(hub), **SDK_KEYS, "server": "http://127.0.0.1", "port": hub.port}
    params["logger_type"] = "console"
    cfg = loads(json.dumps(params))
    async with running_agent(cfg) as agent:
        assert await wait_for(lambda: hub.heartbeats, 10)
        adapter = agent.adapters["artex"]
        await hub.command({"com": "forward", "extra": 1})
        assert await wait_for(lambda: agent.control.snapshot().active_source == "artex", 3)
        assert adapter.counters["ignored_keys"] == 1
        assert "payload keys 'extra' ignored" in caplog.text
        await hub.command({"com": "stop"})
        assert await wait_for(lambda: agent.control.snapshot().stopped, 3)
        before = adapter.counters["rejected"]
        await hub.command({"com": "forward", "drive": {"vx": 0.2}})
        assert await wait_for(lambda: adapter.counters["rejected"] == before + 1, 3)
        assert "2 command types (com, drive)" in caplog.text and "ambiguous" in caplog.text
        assert agent.control.snapshot().stopped
        # the SDK's telem has only the robot's own keys: no `video` sensor for the hub UI
        assert await wait_for(lambda: adapter.status().detail["video"].get("front", {}).get("level") is not None, 5)
        assert await wait_for(lambda: len(hub.telem) >= 2, 5)
        assert not [p for _, p in hub.telem if "video" in p]

