"""ARTEX web_settings (agent/adapters/artex_settings.py): whitelist, validation, atomic persistence."""

from __future__ import annotations

import json
import os
import stat

import pytest

from agent.adapters.artex_commands import WebSettings
from agent.adapters.artex_settings import (
    WEB_SETTINGS, persist_settings, remove_stale_temp_files, temp_file_pattern, validate_settings,
)
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
    ({"max_speed_mps": 1e-300}, "web_settings.max_speed_mps: Value error, 1e-300 m/s is below 0.01 m/s, the smallest"),
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


def test_persist_refuses_a_fifo_or_device_in_place_of_params_json(tmp_path):
    """A FIFO's open would block the settings thread (and the agent's exit) for ever; /dev/zero would
    be read without end: both are refused at once, nothing written."""
    fifo = tmp_path / "params.json"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match="a FIFO, not a regular file"):
        persist_settings(fifo, {"jpeg_quality": 70})
    link = tmp_path / "zero.json"
    link.symlink_to("/dev/zero")
    with pytest.raises(ConfigError, match="a character device, not a regular file"):
        persist_settings(link, {"jpeg_quality": 70})
    twice = tmp_path / "twice.json"
    twice.write_text('{"jpeg_quality": 80, "jpeg_quality": 90}')
    with pytest.raises(ConfigError, match="'jpeg_quality' given twice"):
        persist_settings(twice, {"jpeg_quality": 70})
    assert twice.read_text() == '{"jpeg_quality": 80, "jpeg_quality": 90}'


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


# ---------------------------------------------------------------------- symlinks and temporary files


def listing(directory) -> dict:
    """Every entry of ``directory``: name -> ("link", link text) or ("file", bytes, mode)."""
    out = {}
    for entry in sorted(directory.iterdir()):
        if entry.is_symlink():
            out[entry.name] = ("link", os.readlink(entry))
        else:
            out[entry.name] = ("file", entry.read_bytes(), stat.S_IMODE(entry.stat().st_mode))
    return out


@pytest.mark.parametrize("chain", [1, 2])
def test_persist_through_a_symlink_updates_the_target_and_keeps_the_link(tmp_path, chain):
    etc, store = tmp_path / "etc", tmp_path / "store"
    etc.mkdir(), store.mkdir()
    target = write(store / "robot.json", '{\n  "name": "t",\n  "telem_can": true\n}\n')
    os.chmod(target, 0o640)
    write(store / "other.json", "{}"), write(etc / "notes.txt", "keep")
    link = etc / "params.json"
    if chain == 2:                      # params.json -> current.json -> ../store/robot.json
        os.symlink("../store/robot.json", etc / "current.json")
        os.symlink("current.json", link)
    else:
        os.symlink("../store/robot.json", link)
    etc_before, store_before = listing(etc), listing(store)

    persist_settings(link, {"telem_can": False, "jpeg_quality": 55})

    assert json.loads(target.read_text()) == {"name": "t", "telem_can": False, "artex": {"jpeg_quality": 55}}
    assert listing(etc) == etc_before                                   # the link(s) untouched
    store_after = listing(store)
    assert store_after.pop("robot.json")[2] == 0o640                     # the target: new text, same mode
    store_before.pop("robot.json")
    assert store_after == store_before                                  # nothing else in either directory


def test_the_temp_file_is_named_by_the_pattern_beside_the_target(tmp_path, monkeypatch):
    p = write(tmp_path / "params.json", '{"name": "t"}')
    seen = []
    real_replace = os.replace

    def recording_replace(src, dst):
        seen.append((os.path.basename(src), os.path.dirname(src)))
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", recording_replace)
    persist_settings(p, {"jpeg_quality": 50})
    [(name, directory)] = seen
    assert temp_file_pattern("params.json").fullmatch(name) and directory == str(tmp_path)


def test_a_failing_replace_leaves_no_temp_file(tmp_path, monkeypatch):
    p = write(tmp_path / "params.json", '{"name": "t"}')
    before = listing(tmp_path)

    def failing_replace(src, dst):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(OSError):
        persist_settings(p, {"jpeg_quality": 50})
    assert listing(tmp_path) == before


def test_stale_temp_files_are_removed_by_pattern_only_beside_the_target(tmp_path):
    etc, store = tmp_path / "etc", tmp_path / "store"
    etc.mkdir(), store.mkdir(), (store / "sub").mkdir()
    write(store / "robot.json", '{"name": "t"}')
    os.symlink("../store/robot.json", etc / "params.json")
    stale = [write(store / ".robot.json.robot-agent-ab_12xyz.tmp", "{"),
             write(store / ".robot.json.robot-agent-00000000.tmp", "")]
    kept = [write(store / ".robot.json.abcdefgh.tmp", "x"),              # not the agent's pattern
            write(store / ".robot.json.robot-agent-abc.tmp", "x"),       # wrong random part
            write(store / ".other.json.robot-agent-abcdefgh.tmp", "x"),  # another file's
            write(store / "sub" / ".robot.json.robot-agent-abcdefgh.tmp", "x"),  # not beside it
            write(etc / ".params.json.robot-agent-abcdefgh.tmp", "x"),   # beside the link, not the target
            write(store / "notes.txt", "x")]
    (store / ".robot.json.robot-agent-dirdirdi.tmp").mkdir()            # not a regular file
    assert sorted(remove_stale_temp_files(etc / "params.json")) == sorted(stale)
    assert not any(p.exists() for p in stale) and all(p.exists() for p in kept)
    assert (store / ".robot.json.robot-agent-dirdirdi.tmp").is_dir()
    assert remove_stale_temp_files(etc / "params.json") == []


def test_stale_temp_file_removal_never_raises(tmp_path):
    assert remove_stale_temp_files(tmp_path / "missing" / "params.json") == []
