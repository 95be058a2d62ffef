"""ARTEX command parsing (agent/adapters/artex_commands.py): every accepted shape, every rejected one."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.adapters.artex_commands import (
    MAX_SETTINGS_KEYS,
    MAX_TEXT_CHARS,
    FileRequest,
    WebSettings,
    describe,
    parse_command,
)
from agent.config.artex import ArtexConfig
from agent.errors import CommandError
from agent.commands import BaseVelocity, Stop, TrackDuty

COMMANDS = ArtexConfig().commands


def cmd(payload, author="op"):
    return {"author": author, "payload": payload}


def test_com_names_map_to_configured_twists():
    got = parse_command(cmd({"com": "forward"}), COMMANDS)
    assert got.author == "op" and got.kind == "com"
    assert got.action == BaseVelocity(0.3, 0.0)
    assert parse_command(cmd({"com": "left"}), COMMANDS).action == BaseVelocity(0.0, 1.0)


def test_stop_is_built_in():
    assert parse_command(cmd({"com": "stop"}), {}).action == Stop()


def test_drive_and_tracks():
    assert parse_command(cmd({"drive": {"vx": 0.25, "omega": -0.5}}), COMMANDS).action == BaseVelocity(0.25, -0.5)
    assert parse_command(cmd({"drive": {"omega": 1}}), COMMANDS).action == BaseVelocity(0.0, 1.0)
    assert parse_command(cmd({"tracks": {"left": -1, "right": 0.5}}), COMMANDS).action == TrackDuty(-1.0, 0.5)


def test_file_and_web_settings():
    for kind in ("log", "error", "clear"):
        assert parse_command(cmd({"file": kind}), COMMANDS).action == FileRequest(kind)
    got = parse_command(cmd({"web_settings": {"max_send_freq": 0.2, "telem_can": False}}), COMMANDS)
    assert got.action == WebSettings((("max_send_freq", 0.2), ("telem_can", False)))


def test_author_is_optional_and_extra_top_level_keys_are_ignored():
    assert parse_command({"payload": {"com": "stop"}}, COMMANDS).author == ""
    assert parse_command({"payload": {"com": "stop"}, "id": 7}, COMMANDS).action == Stop()


HUGE = "x" * 100_000

BAD = [
    (None, "command must be an object"),
    (["com", "forward"], "command must be an object"),
    ("forward", "command must be an object"),
    ({"author": "op"}, "no payload"),
    (cmd(["com", "forward"]), "payload must be an object"),
    (cmd("forward"), "payload must be an object"),
    (cmd({}), "exactly one command type"),
    (cmd({"com": "forward", "drive": {"vx": 1}}), "2 command types (com, drive); it must hold exactly one"),
    (cmd({f"k{i}": 1 for i in range(17)}), "at most 16 allowed"),
    (cmd({"fly": 1}), "unknown command type 'fly'"),
    (cmd({HUGE: 1}), "payload type is 100000 characters long"),
    (cmd({"com": "jump"}), "unknown command 'jump'"),
    (cmd({"com": 3}), "payload.com must be a string"),
    (cmd({"com": HUGE}), "payload.com is 100000 characters long"),
    (cmd({"com": "forward"}, author=HUGE), "author is 100000 characters long"),  # a stop is obeyed regardless
    (cmd({"com": "forward"}, author=12), "author must be a string"),
    (cmd({"drive": [0.3, 0]}), "payload.drive must be an object"),
    (cmd({"drive": {}}), "payload.drive must carry"),
    (cmd({"drive": {"vx": 0.1, "vy": 1}}), "payload.drive has unknown key"),
    (cmd({"drive": {"vx": math.nan}}), "payload.drive.vx must be finite"),
    (cmd({"drive": {"vx": math.inf}}), "payload.drive.vx must be finite"),
    (cmd({"drive": {"omega": -math.inf}}), "payload.drive.omega must be finite"),
    (cmd({"drive": {"vx": "0.3"}}), "payload.drive.vx must be a number"),
    (cmd({"drive": {"vx": True}}), "payload.drive.vx must be a number"),
    (cmd({"drive": {"vx": HUGE}}), "payload.drive.vx must be a number, got str of length 100000"),
    (cmd({"tracks": {"left": 0.5}}), "payload.tracks.right is missing"),
    (cmd({"tracks": {"left": 1.5, "right": 0}}), "left duty must be within -1..1"),
    (cmd({"tracks": {"left": math.nan, "right": 0}}), "payload.tracks.left must be finite"),
    (cmd({"tracks": 1}), "payload.tracks must be an object"),
    (cmd({"file": "passwd"}), "unknown request 'passwd'"),
    (cmd({"file": ["log"]}), "payload.file must be a string"),
    (cmd({"web_settings": []}), "payload.web_settings must be an object"),
    (cmd({"web_settings": {}}), "payload.web_settings is empty"),
    (cmd({"web_settings": {f"k{i}": 1 for i in range(MAX_SETTINGS_KEYS + 1)}}), "at most 16 allowed"),
    (cmd({"web_settings": {"max_send_freq": math.nan}}), "web_settings.max_send_freq must be finite"),
    (cmd({"web_settings": {"name": HUGE}}), "web_settings.name is 100000 characters long"),
    (cmd({"web_settings": {"name": {"a": 1}}}), "must be a number, boolean or string"),
]


@pytest.mark.parametrize("data,problem", BAD, ids=[p for _, p in BAD])
def test_bad_input_is_rejected_with_its_location(data, problem):
    with pytest.raises(CommandError) as err:
        parse_command(data, COMMANDS)
    assert problem in str(err.value)
    assert len(str(err.value)) < 400  # never echoes a huge input


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=12)


@settings(max_examples=300, deadline=None)
@given(payload=st.dictionaries(st.sampled_from(["com", "drive", "tracks", "file", "web_settings", "x"]),
                               json_values, max_size=2),
       author=json_values)
def test_any_json_either_parses_or_raises_command_error(payload, author):
    try:
        got = parse_command({"author": author, "payload": payload}, COMMANDS)
    except CommandError:
        return
    if isinstance(got.action, BaseVelocity):
        assert math.isfinite(got.action.vx) and math.isfinite(got.action.omega)


def test_describe_is_bounded():
    assert describe(HUGE) == "str of length 100000"
    assert len(describe(list(range(1000)))) < 60
    assert MAX_TEXT_CHARS == 256
