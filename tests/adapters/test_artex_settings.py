"""ARTEX web_settings (agent/adapters/artex_settings.py): whitelist, validation, atomic persistence."""

from __future__ import annotations

import json
import os
import stat

import pytest

from agent.adapters.artex_commands import WebSettings
from agent.adapters.artex_settings import WEB_SETTINGS, persist_settings, validate_settings
from agent.config import AgentConfig, load
from agent.errors import CommandError, ConfigError
from agent.testing.running_agent import PARAMS


def ws(**values) -> WebSettings:
    return WebSettings(tuple(values.items()))


@pytest.fixture
def cfg() -> AgentConfig:
    return load(PARAMS)


def test_whitelist_documented_keys():
    assert set(WEB_SETTINGS) == {"max_speed_mps", "max_send_freq", "jpeg_quality", "telem_can", "video_can"}


def test_valid_settings_give_a_new_config(cfg):
    new, changes = validate_settings(cfg, ws(max_send_freq=0.2, jpeg_quality=55, telem_can=False,
                                             video_can=True, max_speed_mps=0.5))
    assert changes == {"max_send_freq": 0.2, "jpeg_quality": 55, "telem_can": False, "video_can": True,
                       "max_speed_mps": 0.5}
    assert (new.max_send_freq, new.artex.jpeg_quality, new.telem_can, new.artex.max_speed_mps) == (0.2, 55, False, 0.5)
    assert new.base.max_speed_mps == cfg.base.max_speed_mps  # the duty scale is never touched
    assert new.drivers == cfg.drivers and new.name == cfg.name
    assert cfg.max_send_freq == 0.1  # the old one is unchanged


@pytest.mark.parametrize("values,problem", [
    ({"server": "http://evil"}, "key 'server' is not settable"),
    ({"max_send_freq": 0.2, "name": "x"}, "key 'name' is not settable"),
    ({"max_send_freq": 0}, "web_settings.max_send_freq: Input should be greater than 0"),
    ({"max_send_freq": 1e6}, "web_settings.max_send_freq: Input should be less than or equal to 60"),
    ({"max_send_freq": "0.1"}, "web_settings.max_send_freq must be a number"),
    ({"jpeg_quality": 101}, "web_settings.jpeg_quality: Input should be less than or equal to 100"),
    ({"jpeg_quality": 80.5}, "web_settings.jpeg_quality must be an integer"),
    ({"jpeg_quality": True}, "web_settings.jpeg_quality must be a number"),
    ({"telem_can": 1}, "web_settings.telem_can must be true or false"),
    ({"video_can": "yes"}, "web_settings.video_can must be true or false"),
    ({"max_speed_mps": -1}, "web_settings.max_speed_mps: Input should be greater than 0"),
    ({"max_speed_mps": 5.0}, "above base.max_speed_mps 1.0 m/s"),
])
def test_rejected_settings_name_the_key(cfg, values, problem):
    with pytest.raises(CommandError) as err:
        validate_settings(cfg, ws(**values))
    assert problem in str(err.value)


def write(path, text):
    path.write_text(text, encoding="utf-8")
    return path


def test_persist_keeps_other_keys_order_and_indent(tmp_path, cfg):
    p = write(tmp_path / "params.json", PARAMS.read_text())
    os.chmod(p, 0o640)
    before = json.loads(p.read_text())
    persist_settings(p, {"max_send_freq": 0.25, "jpeg_quality": 60, "telem_can": False})
    after = json.loads(p.read_text())
    assert list(after) == list(before)
    assert list(after["artex"]) == list(before["artex"])
    assert after["max_send_freq"] == 0.25 and after["artex"]["jpeg_quality"] == 60 and after["telem_can"] is False
    for key in before:
        if key not in ("max_send_freq", "telem_can", "artex"):
            assert after[key] == before[key]
    assert after["artex"]["commands"] == before["artex"]["commands"]
    assert p.read_text().startswith('{\n  "name"')
    assert stat.S_IMODE(p.stat().st_mode) == 0o640
    assert [f.name for f in tmp_path.iterdir()] == ["params.json"]  # no temp file left
    new = load(p)
    assert new.max_send_freq == 0.25 and new.artex.jpeg_quality == 60


def test_persist_adds_a_missing_section_and_writes_no_defaults(tmp_path):
    p = write(tmp_path / "params.json", '{"name": "t", "port": 9}')
    persist_settings(p, {"max_speed_mps": 0.4})
    assert json.loads(p.read_text()) == {"name": "t", "port": 9, "artex": {"max_speed_mps": 0.4}}


@pytest.mark.parametrize("text", ["{not json", "[1, 2]", '{"artex": 5}'])
def test_persist_refuses_a_broken_file_and_leaves_it(tmp_path, text):
    p = write(tmp_path / "params.json", text)
    with pytest.raises(ConfigError):
        persist_settings(p, {"jpeg_quality": 50})
    assert p.read_text() == text


def test_persist_missing_file(tmp_path):
    with pytest.raises(ConfigError):
        persist_settings(tmp_path / "absent.json", {"jpeg_quality": 50})


def test_persist_write_failure_leaves_original_and_no_temp(tmp_path, monkeypatch):
    p = write(tmp_path / "params.json", '{"name": "t"}')

    def failing_fsync(fd):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fsync", failing_fsync)  # a disk error during the write
    with pytest.raises(OSError):
        persist_settings(p, {"jpeg_quality": 50})
    assert p.read_text() == '{"name": "t"}'
    assert [f.name for f in tmp_path.iterdir()] == ["params.json"]
