"""robot_msg inbound translation: frames -> envelopes -> agent commands (agent/adapters/robotmsg_inbound.py),
and which apply in which order (agent/adapters/robotmsg_order.py)."""

from __future__ import annotations

import math
import struct

import pytest
import robot_msg as rm
from hypothesis import given, settings
from hypothesis import strategies as st
from robot_msg import ControllerCommand, RobotAction, RobotActionRealTimeAction, RobotActionTrajectoryAction
from robot_msg.types import Pose, Quaternion, Vec3

from agent.adapters.robotmsg_inbound import (
    Rejected, Translation, action_commands, controller_commands, decode_envelope, expect_type, is_json,
    trajectory_points, unpack_frames,
)
from agent.adapters.robotmsg_order import LatestWins, StopOrder, intent
from agent.commands import (
    MAX_TRAJECTORY_POINTS, BaseVelocity, CalibrateImu, JointPosition, JointTrajectory, JointTrajectoryStop, Reset,
    Stop,
)

MODES = {0: "stop", 1: "hold", 2: "home"}


def rt_action(**kw) -> RobotAction:
    return RobotAction(frame_id="base_link", real_time_action=RobotActionRealTimeAction(**kw))


def traj_action(**kw) -> RobotAction:
    return RobotAction(frame_id="base_link", trajectory_action=RobotActionTrajectoryAction(**kw))


def reason_of(call, *args) -> str:
    with pytest.raises(Rejected) as info:
        call(*args)
    return info.value.reason


# --------------------------------------------------------------------------- frames


def test_unpack_frames_without_topic_takes_one_or_two_parts():
    assert unpack_frames([b"env"], None, 100) == b"env"
    assert unpack_frames([b"any-topic", b"env"], None, 100) == b"env"
    assert reason_of(unpack_frames, [b"a", b"b", b"c"], None, 100) == "framing"


def test_unpack_frames_with_topic_needs_exactly_that_topic():
    assert unpack_frames([b"act", b"env"], b"act", 100) == b"env"
    assert reason_of(unpack_frames, [b"env"], b"act", 100) == "framing"
    assert reason_of(unpack_frames, [b"action", b"env"], b"act", 100) == "topic"


def test_unpack_frames_counts_every_part_against_the_limit():
    assert unpack_frames([b"t" * 50, b"e" * 50], None, 100) == b"e" * 50
    with pytest.raises(Rejected) as info:
        unpack_frames([b"t" * 50, b"e" * 51], None, 100)
    assert info.value.reason == "oversize" and "101 bytes" in info.value.detail


def test_json_is_told_from_binary_by_its_first_byte():
    assert is_json(b'  {"version": 2}')
    assert not is_json(rm.encode(rt_action(u_rt=[0.1, 0.0])))


# --------------------------------------------------------------------------- envelopes


@pytest.mark.parametrize("encode", [rm.encode, lambda m: rm.encode_json(m).encode()], ids=["binary", "json"])
def test_decode_envelope_round_trips_both_encodings(encode):
    msg = rt_action(u_rt=[0.25, -0.5], target_dt=0.02)
    out = decode_envelope(encode(msg))
    assert isinstance(out, RobotAction) and out.real_time_action.u_rt == [0.25, -0.5]


def _binary_with_nan() -> bytes:
    data = bytearray(rm.encode(rt_action(u_rt=[0.125, 0.0])))
    i = data.find(struct.pack("<d", 0.125))
    data[i:i + 8] = struct.pack("<d", math.nan)
    return bytes(data)


GOOD = rm.encode(rt_action(u_rt=[0.1, 0.0]))
GOOD_JSON = rm.encode_json(rt_action(u_rt=[0.1, 0.0])).encode()


@pytest.mark.parametrize(("data", "reason"), [
    (b"RM\x01\x00" + GOOD[4:], "protocol_1"),
    (GOOD[:2] + b"\x01\x00" + GOOD[4:], "protocol_1"),
    (GOOD_JSON.replace(b'"version":2', b'"version":1'), "protocol_1"),
    (GOOD[:2] + b"\x07\x00" + GOOD[4:], "unsupported_version"),
    (GOOD[:-3], "truncated"),
    (GOOD[:5], "truncated"),
    (GOOD + b"\x00", "parse"),
    (b"\x00\x01garbage", "parse"),
    (b"", "truncated"),
    (b'{"version":2,', "parse"),
    (b"{\"a\":" * 100_000, "parse"),
    (_binary_with_nan(), "non_finite"),
    (GOOD_JSON.replace(b"0.1", b"NaN"), "non_finite"),
    (GOOD_JSON.replace(b"0.1", b"1e999"), "non_finite"),
    (b'{"version":2,"msg_type":"nope","payload":{}}', "unknown_type"),
    (GOOD[:4] + b"\x01\x02\x03\x04\x00", "unknown_type"),
    (GOOD_JSON.replace(b'"frame_id":"base_link"', b'"frame_id":""'), "validation"),
    (GOOD_JSON.replace(b'"u_rt"', b'"extra"'), "validation"),
])
def test_decode_envelope_rejects_with_a_reason(data, reason):
    with pytest.raises(Rejected) as info:
        decode_envelope(data)
    assert info.value.reason == reason
    assert info.value.detail


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_decode_envelope_never_raises_anything_but_rejected(data):
    try:
        decode_envelope(data)
    except Rejected:
        pass


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_decode_envelope_rejects_every_truncation_and_bit_flip(data):
    frame = rm.encode(rt_action(q_rt=[0.1, 0.2], u_rt=[0.3, 0.4]))
    cut = data.draw(st.integers(0, len(frame) - 1))
    with pytest.raises(Rejected):
        decode_envelope(frame[:cut])
    pos = data.draw(st.integers(0, len(frame) - 1))
    flipped = bytearray(frame)
    flipped[pos] ^= data.draw(st.integers(1, 255))
    try:
        out = decode_envelope(bytes(flipped))
    except Rejected:
        return
    assert isinstance(out, RobotAction) and out != rm.decode(frame)


def test_expect_type_refuses_other_messages():
    expect_type(rt_action(u_rt=[0.0, 0.0]), RobotAction)
    with pytest.raises(Rejected) as info:
        expect_type(ControllerCommand(ctrl_mode=0), RobotAction)
    assert info.value.reason == "unexpected_type"
    assert "switch_controller.controller_command" in info.value.detail


# --------------------------------------------------------------------------- RobotAction


def test_u_rt_is_a_base_velocity():
    tr = action_commands(rt_action(u_rt=[0.4, -0.7]), dof=2)
    assert tr.commands == (BaseVelocity(0.4, -0.7),)


def test_q_rt_is_a_joint_position_before_the_base_command():
    tr = action_commands(rt_action(q_rt=[0.1, -0.2], u_rt=[0.3, 0.0]), dof=2)
    assert tr.commands == (JointPosition((0.1, -0.2)), BaseVelocity(0.3, 0.0))


def test_q_traj_is_evenly_spaced_over_its_duration():
    tr = action_commands(traj_action(q_traj=[[0.1, 0.0], [0.2, 0.1], [0.3, 0.2], [0.4, 0.3]],
                                     traj_duration=2.0), dof=2)
    (traj,) = tr.commands
    assert isinstance(traj, JointTrajectory)
    assert [p.t for p in traj.points] == [0.5, 1.0, 1.5, 2.0]
    assert traj.points[-1].q == (0.4, 0.3)


def test_default_trajectory_duration_is_the_schemas_two_seconds():
    (traj,) = action_commands(traj_action(q_traj=[[0.5, 0.5]]), dof=2).commands
    assert [p.t for p in traj.points] == [2.0]


def test_trajectory_and_base_together():
    action = RobotAction(frame_id="base_link", real_time_action=RobotActionRealTimeAction(u_rt=[0.1, 0.2]),
                         trajectory_action=RobotActionTrajectoryAction(q_traj=[[0.0, 0.1]], traj_duration=1.0))
    tr = action_commands(action, dof=2)
    assert isinstance(tr.commands[0], JointTrajectory) and tr.commands[1] == BaseVelocity(0.1, 0.2)


def test_ee_poses_are_declined_and_the_rest_applies():
    pose = Pose(position=Vec3(0.1, 0.0, 0.2), orientation=Quaternion(0.0, 0.0, 0.0, 1.0))
    tr = action_commands(rt_action(ee_pose_rt=[pose], u_rt=[0.2, 0.0]), dof=2)
    assert tr.commands == (BaseVelocity(0.2, 0.0),)
    assert [d.field for d in tr.declined] == ["ee_pose_rt"] and "kinematics" in tr.declined[0].why
    tr = action_commands(traj_action(ee_pose_traj=[[pose, pose]]), dof=2)
    assert tr.commands == () and [d.field for d in tr.declined] == ["ee_pose_traj"]


@pytest.mark.parametrize(("action", "dof", "reason"), [
    (rt_action(u_rt=[0.1]), 2, "dimension"),
    (rt_action(u_rt=[0.1, 0.2, 0.3]), 2, "dimension"),
    (rt_action(q_rt=[0.1]), 2, "dimension"),
    (rt_action(q_rt=[0.1, 0.2, 0.3]), 2, "dimension"),
    (rt_action(q_rt=[0.1]), 0, "dimension"),
    (traj_action(q_traj=[[0.1, 0.2], [0.1]]), 2, "dimension"),
    (rt_action(u_rt=[math.nan, 0.0]), 2, "non_finite"),
    (rt_action(q_rt=[0.0, math.inf]), 2, "non_finite"),
    (rt_action(target_dt=0.1), 2, "empty"),
    (traj_action(q_traj=[]), 2, "empty"),
    (traj_action(q_traj=[[0.0, 0.0]] * (MAX_TRAJECTORY_POINTS + 1)), 2, "too_long"),
    (traj_action(q_traj=[[0.0, 0.0]] * 3, traj_duration=5e-324), 2, "invalid"),
    (RobotAction(frame_id="b", real_time_action=RobotActionRealTimeAction(q_rt=[0.0, 0.0]),
                 trajectory_action=RobotActionTrajectoryAction(q_traj=[[0.0, 0.0]])), 2, "conflict"),
])
def test_actions_the_robot_cannot_execute_are_rejected_whole(action, dof, reason):
    assert reason_of(action_commands, action, dof) == reason


@settings(max_examples=200, deadline=None)
@given(u=st.lists(st.floats(allow_nan=True, allow_infinity=True), min_size=1, max_size=5),
       q=st.one_of(st.none(), st.lists(st.floats(allow_nan=True, allow_infinity=True), min_size=1, max_size=5)))
def test_real_time_action_translation_is_total(u, q):
    """Any u_rt / q_rt either becomes finite commands of the right shape or a Rejected with a reason."""
    try:
        tr = action_commands(rt_action(u_rt=u, q_rt=q), dof=3)
    except Rejected as rej:
        finite = all(math.isfinite(v) for v in u + (q or []))
        shape_ok = len(u) == 2 and (q is None or len(q) == 3)
        assert not (finite and shape_ok)
        assert rej.reason in ("non_finite", "dimension")
        assert rej.reason == "dimension" or not finite
        assert rej.reason == "non_finite" or not shape_ok
        return
    assert len(u) == 2 and (q is None or len(q) == 3)
    assert tr.commands[-1] == BaseVelocity(u[0], u[1])


@settings(max_examples=100, deadline=None)
@given(n=st.integers(1, 60), duration=st.floats(1e-3, 1e4))
def test_trajectory_times_increase_and_end_at_the_duration(n, duration):
    pts = trajectory_points([[0.0]] * n, duration, dof=1)
    assert len(pts) == n
    assert all(b.t > a.t for a, b in zip(pts, pts[1:], strict=False))
    assert math.isclose(pts[-1].t, duration)


# --------------------------------------------------------------------------- ControllerCommand


@pytest.mark.parametrize(("mode", "command"), [(0, Stop()), (1, JointTrajectoryStop()), (2, Reset())])
def test_ctrl_mode_table(mode, command):
    assert controller_commands(ControllerCommand(ctrl_mode=mode), 2, MODES).commands == (command,)


def test_unconfigured_ctrl_mode_is_rejected_with_the_table():
    with pytest.raises(Rejected) as info:
        controller_commands(ControllerCommand(ctrl_mode=7, calibrate_sensor=True), 2, MODES)
    assert info.value.reason == "unsupported_mode" and "0=stop" in info.value.detail


def test_joint_pos_then_mode_then_calibration():
    tr = controller_commands(ControllerCommand(joint_pos=[0.1, 0.2], ctrl_mode=1, calibrate_sensor=True), 2, MODES)
    assert tr.commands == (JointPosition((0.1, 0.2)), JointTrajectoryStop(), CalibrateImu())


def test_stop_mode_overrides_joint_pos():
    tr = controller_commands(ControllerCommand(joint_pos=[0.1, 0.2], ctrl_mode=0), 2, MODES)
    assert tr.commands == (Stop(),)
    assert [d.field for d in tr.declined] == ["joint_pos"]


def test_calibrate_false_does_nothing_and_ctrl_update_is_an_event():
    assert reason_of(controller_commands, ControllerCommand(calibrate_sensor=False), 2, MODES) == "empty"
    assert reason_of(controller_commands, ControllerCommand(), 2, MODES) == "empty"
    for flag in (True, False):
        tr = controller_commands(ControllerCommand(ctrl_update=flag), 2, MODES)
        assert tr.publish_state and tr.commands == ()


def test_joint_pos_needs_every_joint():
    assert reason_of(controller_commands, ControllerCommand(joint_pos=[0.1]), 2, MODES) == "dimension"
    assert reason_of(controller_commands, ControllerCommand(joint_pos=[math.nan, 0.0]), 2, MODES) == "non_finite"


# --------------------------------------------------------------------------- latest wins


def newest_per_type(messages: list, modes: dict) -> list:
    """What the adapter does with one drained batch: offer newest first, apply what is kept."""
    latest = LatestWins(modes)
    for i in range(len(messages) - 1, -1, -1):
        latest.offer(i, messages[i])
    kept = latest.kept()
    assert latest.superseded == len(messages) - len(kept)
    return kept


def test_newest_per_type_keeps_the_last_of_each_kind_in_arrival_order():
    a1, a2 = rt_action(u_rt=[0.1, 0.0]), rt_action(u_rt=[0.2, 0.0])
    c1, c2 = ControllerCommand(ctrl_mode=2), ControllerCommand(ctrl_mode=1)
    assert newest_per_type([a1, c1, a2, c2], MODES) == [a2, c2]
    assert newest_per_type([c2, a1, a2], MODES) == [c2, a2]
    assert newest_per_type([], MODES) == []


def test_messages_with_different_fields_do_not_supersede_each_other():
    traj = traj_action(q_traj=[[0.1, 0.2]])
    a1, a2 = rt_action(u_rt=[0.1, 0.0]), rt_action(u_rt=[0.2, 0.0], target_dt=0.05)
    assert newest_per_type([traj, a1, a2], MODES) == [traj, a2]
    update, calib = ControllerCommand(ctrl_update=True), ControllerCommand(calibrate_sensor=True)
    assert newest_per_type([update, calib, ControllerCommand(ctrl_update=False)], MODES) == [
        calib, ControllerCommand(ctrl_update=False)]
    both = rt_action(q_rt=[0.0, 0.0], u_rt=[0.1, 0.0])
    assert newest_per_type([both, a1], MODES) == [both, a1]


def test_a_zero_u_rt_is_not_superseded_by_the_drive_that_follows_it():
    """The explicit zero re-engages a controller latched out by another source's stop (docs/safety.md)."""
    zero, a1, a2 = rt_action(u_rt=[0.0, 0.0]), rt_action(u_rt=[0.1, 0.0]), rt_action(u_rt=[0.2, 0.0])
    assert newest_per_type([a1, zero, a2], MODES) == [zero, a2]
    assert newest_per_type([zero, a1, zero, a2], MODES) == [zero, a2]
    assert newest_per_type([a1, a2, zero], MODES) == [a2, zero]         # the newest still applies last


def test_intent_is_the_type_and_the_fields_present():
    assert intent(rt_action(u_rt=[0.1, 0.0])) == intent(rt_action(u_rt=[0.5, 0.2]))
    assert intent(rt_action(u_rt=[0.1, 0.0])) != intent(rt_action(q_rt=[0.1, 0.0]))
    assert intent(ControllerCommand(ctrl_update=False)) == intent(ControllerCommand(ctrl_update=True))
    assert intent(ControllerCommand(ctrl_update=False)) != intent(ControllerCommand())


def test_a_stop_is_never_superseded():
    stop, later = ControllerCommand(ctrl_mode=0), ControllerCommand(ctrl_mode=1)
    a1, a2 = rt_action(u_rt=[0.1, 0.0]), rt_action(u_rt=[0.2, 0.0])
    assert newest_per_type([a1, stop, a2, later], MODES) == [stop, a2, later]
    assert newest_per_type([stop, a1], {5: "stop"}) == [stop, a1]


def _stamp(msg, seconds, clock_id="a"):
    msg.metadata = rm.MessageMetadata(send_time=rm.Timestamp(seconds, "unix", clock_id))
    return msg


def _urt(vx):
    return RobotAction(frame_id="base_link", real_time_action=RobotActionRealTimeAction(u_rt=[vx, 0.0]))


def _check(order, msg, now):
    order.check(msg, action_commands(msg, 0), now)


def test_stop_order_refuses_motion_that_may_predate_the_stop():
    order = StopOrder(guard_s=0.1)
    _check(order, _urt(0.5), 0.0)                               # no stop yet: anything goes
    order.stopped(_stamp(ControllerCommand(ctrl_mode=0), 100.0), 10.0)
    with pytest.raises(Rejected) as err:
        _check(order, _stamp(_urt(0.5), 99.99), 11.0)          # stamped before the stop, however late
    assert err.value.reason == "before_stop" and "not after the stop" in err.value.detail
    _check(order, _stamp(_urt(0.5), 100.01), 10.0)             # stamped after it: at once
    _check(order, _urt(0.0), 10.0)                              # a zero u_rt (the re-engage) always passes
    with pytest.raises(Rejected, match="within 100 ms"):        # other clock: not comparable -> the window
        _check(order, _stamp(_urt(0.5), 200.0, clock_id="b"), 10.05)
    _check(order, _stamp(_urt(0.5), 200.0, clock_id="b"), 10.2)
    order.stopped(ControllerCommand(ctrl_mode=0), 20.0)         # an unstamped stop: the window only
    with pytest.raises(Rejected, match="within 100 ms"):
        _check(order, _stamp(_urt(0.5), 1e9), 20.05)
    _check(order, _urt(0.5), 20.2)
    order.check(ControllerCommand(ctrl_mode=1), Translation(), 20.0)    # not a RobotAction: not its business
