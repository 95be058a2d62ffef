"""Sim2Bot command parser: every fixture type, every rejection path, and fuzzing."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent import commands as m
from agent.adapters.sim2bot_commands import (
    COMMAND_TYPES,
    IGNORED_TYPES,
    CameraRelease,
    CameraRequest,
    ParseContext,
    Submit,
    decode,
    parse,
)
from agent.errors import CommandDeclined, CommandError, CommandRejected

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "sim2bot" / "v1"
CTX = ParseContext(dof=2, has_gripper=True, cameras=("model:0", "model:1"), room="default")
ARM = ParseContext(dof=7, has_gripper=True, cameras=("model:0",), room="bench-a")


def fixture(name: str) -> dict:
    return json.loads((FIXTURES / f"{name}.json").read_text())


def test_every_bridge_command_type_has_a_fixture_and_a_parser_branch():
    types = {fixture(p.stem)["type"] for p in FIXTURES.glob("*.json")}
    assert COMMAND_TYPES <= types
    # each relayed type parses to something (or is a documented decline) for a 7-dof arm
    for path in FIXTURES.glob("*.json"):
        msg = json.loads(path.read_text())
        if msg["type"] not in COMMAND_TYPES:
            continue
        msg.pop("robot", None)
        try:
            out = parse(msg, ARM)
        except CommandDeclined:
            assert msg["type"] in IGNORED_TYPES, path.name
            continue
        assert isinstance(out, (Submit, CameraRequest, CameraRelease)), path.name


@pytest.mark.parametrize("name, expected", [
    ("base_velocity", m.BaseVelocity(0.4, 0.35)),
    ("joint_position", m.JointPosition((0, -0.45, 0, -2.2, 0, 1.75, 0.8))),
    ("joint_velocity", m.JointVelocity((0.1, 0.0, -0.25, 0.0, 0.3, 0.0, 0.0))),
    ("joint_trajectory_stop", m.JointTrajectoryStop()),
    ("gripper", m.Gripper(0.25)),
    ("reset", m.Reset()),
    ("stop", m.Stop()),
])
def test_fixture_commands_map_onto_model_commands(name, expected):
    out = parse(fixture(name), ARM)
    assert isinstance(out, Submit) and out.command == expected and out.kind == name


def test_fixture_trajectory_keeps_times_and_points():
    out = parse(fixture("joint_trajectory"), ARM)
    assert isinstance(out.command, m.JointTrajectory)
    assert [p.t for p in out.command.points] == [0.0, 1.25]
    assert out.command.points[1].q == (0.2, -0.35, 0.15, -2.0, 0.1, 1.5, 0.6)
    assert out.command.loop is False


def test_fixture_camera_messages():
    sub = parse(fixture("camera_subscribe"), ARM)
    assert sub == CameraRequest("model:0", fps=30.0, width=256, height=256, quality=80, codec=0)
    assert parse(fixture("camera_unsubscribe"), ARM) == CameraRelease("model:0")


@pytest.mark.parametrize("name", ["tcp_pose", "marker", "marker_points", "marker_delete", "marker_clear",
                                  "room_opening"])
def test_scene_and_ik_messages_are_declined_with_their_reason(name):
    with pytest.raises(CommandDeclined) as info:
        parse(fixture(name), ARM)
    assert str(info.value) == IGNORED_TYPES[fixture(name)["type"]] and not isinstance(info.value, CommandRejected)


def test_fixture_arrays_longer_than_the_tank_dof_are_rejected_naming_the_field():
    with pytest.raises(CommandError, match=r"q has 7 values; the robot has dof 2"):
        parse(fixture("joint_position"), CTX)
    with pytest.raises(CommandError, match=r"points\[0\]\.q has 7 values"):
        parse(fixture("joint_trajectory"), CTX)


def test_base_velocity_reports_lateral_and_vertical_as_ignored():
    out = parse({"type": "base_velocity", "vx": 0.2, "vy": 0.1, "vz": 0.0, "omega": 0.0}, CTX)
    assert out.command == m.BaseVelocity(0.2, 0.0) and out.ignored == ("vy",)
    out = parse({"type": "base_velocity", "omega": -0.5}, CTX)
    assert out.command == m.BaseVelocity(0.0, -0.5) and out.ignored == ()


def test_gripper_on_a_robot_without_one_is_declined():
    ctx = ParseContext(dof=2, has_gripper=False, cameras=())
    with pytest.raises(CommandDeclined, match="hasGripper=false"):
        parse({"type": "gripper", "fraction": 0.5}, ctx)


@pytest.mark.parametrize("message, where", [
    ({"type": "joint_position", "q": [0.1, float("nan")]}, r"q\[1\] must be finite"),
    ({"type": "joint_position", "q": [0.1, float("inf")]}, r"q\[1\] must be finite"),
    ({"type": "joint_position", "q": [10 ** 400]}, r"q\[0\] is out of range"),
    ({"type": "joint_position", "q": [0.0] * 33}, r"q has 33 values"),
    ({"type": "joint_position", "q": "0.1"}, r"q must be a list"),
    ({"type": "joint_position", "q": [True]}, r"q\[0\] must be a number, got bool"),
    ({"type": "joint_velocity", "qd": None}, r"qd must be a list"),
    ({"type": "joint_trajectory", "points": []}, r"points has 0 entries"),
    ({"type": "joint_trajectory", "points": [{"t": 1, "q": [0]}, {"t": 0.5, "q": [0]}]}, r"points\[1\]\.t"),
    ({"type": "joint_trajectory", "points": [{"t": -1, "q": [0]}]}, r"trajectory time must be >= 0"),
    ({"type": "joint_trajectory", "points": [{"t": 0, "q": [0]}, {"t": 1, "q": [0, 0]}]}, r"points\[1\]\.q"),
    ({"type": "joint_trajectory", "points": [[0, [0]]]}, r"points\[0\] must be an object"),
    ({"type": "joint_trajectory", "points": [{"t": 0, "q": [0]}], "loop": "yes"}, r"loop must be a boolean"),
    ({"type": "base_velocity", "vx": "fast"}, r"vx must be a number"),
    ({"type": "base_velocity", "vx": 0.1, "omega": float("-inf")}, r"omega must be finite"),
    ({"type": "gripper", "fraction": 1.5}, r"gripper fraction must be within 0..1"),
    ({"type": "gripper"}, r"fraction must be a number, got NoneType"),
    ({"type": "gripper", "fraction": 0.5, "robot": 1}, r"unknown robot index 1"),
    ({"type": "joint_position", "q": [0.1], "robot": 2}, r"unknown robot index 2"),
    ({"type": "camera_subscribe", "camera": "model:0", "quality": 1.5}, r"quality 1.5 is neither a fraction"),
    ({"type": "stop", "robot": -3}, r"unknown robot index -3"),
    ({"type": "stop", "robot": "0"}, r"robot must be an integer"),
    ({"type": "stop", "robot": 0.5}, r"robot must be an integer"),
    ({"type": "stop", "room": "bench-a"}, r"room 'bench-a' is not this agent's room 'default'"),
    ({"type": "stop", "room": "bad room!"}, r"bad room"),
    ({"type": "stop", "room": 7}, r"bad room"),
    ({"type": "camera_subscribe", "camera": "model:9"}, r"unknown camera 'model:9'"),
    ({"type": "camera_subscribe", "camera": "x" * 500}, r"camera must be 1..128 characters"),
    ({"type": "camera_subscribe", "camera": "model:0", "codec": 5}, r"codec 5 is not"),
    ({"type": "camera_subscribe", "camera": "model:0", "codec": "vp9"}, r"codec 'vp9'"),
    ({"type": "camera_subscribe", "camera": "model:0", "fps": float("nan")}, r"fps must be finite"),
    ({"type": "camera_subscribe", "camera": "model:0", "quality": 0}, r"quality must be > 0"),
    ({"type": "camera_unsubscribe"}, r"camera must be a string"),
    ({"type": "fly"}, r"unknown message type 'fly'"),
    ({"type": "hello", "role": "controller"}, r"hello is a session message"),
    ({"type": 3}, r"type must be a string"),
    ({}, r"type must be a string"),
])
def test_bad_messages_are_rejected_with_field_and_reason(message, where):
    with pytest.raises(CommandError, match=where):
        parse(message, CTX)


def test_room_and_robot_address_checks_pass_for_this_agent():
    ctx = ParseContext(dof=2, has_gripper=True, cameras=(), room="bench-a")
    assert parse({"type": "stop", "robot": 0, "room": "bench-a"}, ctx).command == m.Stop()
    assert parse({"type": "stop", "robot": None, "room": ""}, ctx).command == m.Stop()


def test_camera_subscribe_clamps_and_normalises():
    out = parse({"type": "camera_subscribe", "camera": "model:1", "fps": 240, "width": 5, "height": 10_000,
                 "quality": 0.5, "codec": "raw"}, CTX)
    assert out == CameraRequest("model:1", fps=30.0, width=16, height=1080, quality=50, codec=2)
    out = parse({"type": "camera_subscribe", "camera": "model:1", "fps": 0.01, "quality": 250}, CTX)
    assert out.fps == 1.0 and out.quality == 100 and out.width is None and out.codec is None


@pytest.mark.parametrize("raw, reason", [
    (b'{"type": "stop"}', "binary message"),
    ("[1, 2]", "must be a JSON object, got list"),
    ("{not json", "not valid JSON"),
    ("[" * 100_000 + "]" * 100_000, "nests too deeply|not valid JSON"),
    ('{"type": "stop", "pad": "' + "x" * 2000 + '"}', "exceeds max_message_bytes=1024"),
])
def test_decode_rejects_what_is_not_one_bounded_json_object(raw, reason):
    with pytest.raises(CommandError, match=reason):
        decode(raw, 1024 if "pad" in str(raw)[:30] else 1 << 20)


def test_decode_refusals_carry_the_detail_a_rate_limited_summary_names():
    """What tells one refusal from another of its reason (agent.support.ratelimit: a held-back line's
    detail is named in the next line): the key given twice, the message's size in bytes (UTF-8)."""
    with pytest.raises(CommandError) as err:
        decode('{"type": "base_velocity", "vx": 0, "vx": 0.9}', 1024)
    assert err.value.detail == "key 'vx'"
    with pytest.raises(CommandError) as err:
        decode('{"type": "stop", "pad": "' + "é" * 600 + '"}', 1024)       # 627 characters, 1227 bytes
    assert err.value.detail == "1227 bytes" and "message of 1227 bytes exceeds max_message_bytes=1024" in str(err.value)


def test_decode_accepts_nan_tokens_for_the_parser_to_reject():
    msg = decode('{"type": "joint_position", "q": [NaN]}', 1024)
    assert math.isnan(msg["q"][0])
    with pytest.raises(CommandError, match="finite"):
        parse(msg, CTX)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=20),
    lambda children: st.lists(children, max_size=6) | st.dictionaries(st.text(max_size=8), children, max_size=6),
    max_leaves=30,
)
field_names = st.sampled_from(["q", "qd", "points", "t", "loop", "vx", "vy", "vz", "omega", "fraction",
                               "camera", "fps", "width", "height", "quality", "codec", "robot", "room",
                               "position", "orientation", "marker", "opening", "id"])
messages = st.builds(
    lambda kind, fields: {"type": kind, **fields},
    st.sampled_from(sorted(COMMAND_TYPES) + ["hello", "telemetry", "", "x"]) | json_values,
    st.dictionaries(field_names, json_values, max_size=6),
)


@settings(max_examples=300, deadline=None)
@given(messages)
def test_fuzz_parser_raises_only_command_error(message):
    try:
        out = parse(message, CTX)
    except CommandError:
        return
    assert isinstance(out, (Submit, CameraRequest, CameraRelease))
    if isinstance(out, Submit):
        command = out.command
        for name in ("q", "qd"):
            values = getattr(command, name, ())
            assert len(values) <= CTX.dof and all(math.isfinite(v) for v in values)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200) | st.binary(max_size=50))
def test_fuzz_decode_raises_only_command_error(raw):
    try:
        out = decode(raw, 1 << 16)
    except CommandError:
        return
    assert isinstance(out, dict)
