"""The event loop's cheaper paths give what the slower ones gave (issue 22, "A Pi-core budget").

- robot_msg's RobotState schedule as timer callbacks (agent.adapters.robotmsg_publish.SlotPublisher):
  the first state at once, then one per slot, a ``ctrl_update`` adds one, a failing send ends it;
- the ARTEX packet's binary check (agent.adapters.artex_client.HubPacket.data_is_binary) answers as
  python-socketio's own;
- ARTEX's change gate with its at-rest shortcut decides as the deadband walk does;
- Sim2Bot's number lists (one conversion and one check for all) equal the per-value path.
On agent.testing.clock.VirtualTimeLoop (virtual time, no wall-clock waits) where time matters.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import random

import pytest
from socketio import packet as sio_packet

from agent.adapters.artex_client import HubPacket
from agent.adapters.artex_telem import DEADBANDS, SETTLE_POLLS, TelemGate, _differs, telemetry
from agent.adapters.robotmsg_publish import SlotPublisher
from agent.adapters.sim2bot_telemetry import _num, _nums
from agent.model import Odometry
from agent.support import beat
from agent.testing.clock import VirtualTimeLoop
from tests.adapters.test_artex_telem import snap

START = 7000.007


def publish_run(seconds: float, *, kicks: tuple[float, ...] = (), fail_at: int | None = None,
                hz: float = 50.0) -> tuple[VirtualTimeLoop, list[float], BaseException | None]:
    loop = VirtualTimeLoop(START)
    sent: list[float] = []

    def publish() -> None:
        sent.append(loop.time())
        if fail_at is not None and len(sent) == fail_at:
            raise OSError("socket gone")

    publisher = SlotPublisher(1.0 / hz, publish)

    async def main() -> BaseException | None:
        task = asyncio.ensure_future(publisher.run())
        for at in kicks:
            loop.call_at(START + at, publisher.now)
            loop.call_at(START + at, publisher.now)      # twice in one pass: one state
        done, _ = await asyncio.wait([task], timeout=seconds)
        if not done:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            return None
        return task.exception()
    try:
        err = loop.run_until_complete(main())
    finally:
        loop.close()
    return loop, sent, err


def test_states_go_out_at_once_then_one_per_slot_and_the_loop_wakes_only_in_slots():
    loop, sent, err = publish_run(2.0)
    assert err is None
    assert sent[0] == START                                   # the first at once
    slots = sent[1:]
    assert len(slots) == pytest.approx(2.0 * 50, abs=1)
    for t in slots:
        assert t == pytest.approx(beat.nearest_slot(t), abs=1e-9)   # on the 50 Hz slots
    assert all(b - a == pytest.approx(0.02, abs=1e-9) for a, b in zip(slots, slots[1:]))
    assert loop.wakeups <= len(slots) + 1


def test_a_ctrl_update_adds_one_state_at_once_and_the_slots_stay():
    kick = 0.5 + 0.007                                        # between two slots
    _, plain, _ = publish_run(1.0)
    _, sent, err = publish_run(1.0, kicks=(kick,))
    assert err is None
    assert sent.count(START + kick) == 1                      # two now() in one pass: one state, at once
    assert sorted(set(sent) - {START + kick}) == sorted(plain)    # every slot's state as without it
    assert len(sent) == len(plain) + 1


def test_a_ctrl_update_storm_sends_at_most_one_asked_state_per_slot():
    asks = tuple(0.1 + i * 0.001 for i in range(800))           # 1 kHz for 0.8 s
    _, plain, _ = publish_run(1.0)
    _, sent, err = publish_run(1.0, kicks=asks)
    assert err is None
    assert len(sent) <= len(plain) + 0.8 * 50 + 1               # at most 2x state_hz while it lasts
    slots = [math.floor(t / 0.02 + 1e-9) for t in sent if START + asks[0] <= t <= START + asks[-1]]
    assert max(slots.count(k) for k in set(slots)) <= 2         # the slot's own and one asked state
    _, quiet, _ = publish_run(1.0, kicks=(0.5 + 0.007,))
    assert quiet.count(START + 0.5 + 0.007) == 1                # one after quiet slots: at once


def test_a_slower_rate_keeps_its_own_slots():
    _, sent, _ = publish_run(1.0, hz=10.0)
    assert len(sent[1:]) == pytest.approx(10, abs=1)
    for t in sent[1:]:
        assert t / 0.1 == pytest.approx(round(t / 0.1), abs=1e-6)


def test_a_failing_send_ends_the_publisher_with_its_error_and_nothing_more_goes_out():
    loop, sent, err = publish_run(1.0, fail_at=3)
    assert isinstance(err, OSError) and "socket gone" in str(err)
    assert len(sent) == 3


def test_a_slots_state_goes_out_after_the_work_its_other_timers_woke():
    loop = VirtualTimeLoop(START)
    order: list[tuple[str, float]] = []
    publisher = SlotPublisher(0.02, lambda: order.append(("state", loop.time())))

    async def poll() -> None:       # a telemetry poll on the same grid (agent.support.beat)
        while True:
            await beat.sleep(0.04)
            order.append(("poll", loop.time()))

    try:
        loop.run_for(1.0, poll(), publisher.run())
    finally:
        loop.close()
    polls = [t for kind, t in order if kind == "poll"]
    assert len(polls) >= 20
    for t in polls:
        assert order.index(("poll", t)) < order.index(("state", t))     # the slot's state last


def run_with(seconds: float, at: float, callback) -> list[float]:
    """States of a 50 Hz publisher on a virtual loop from START, with ``callback(loop, publisher)`` at
    ``START + at``."""
    loop = VirtualTimeLoop(START)
    sent: list[float] = []
    publisher = SlotPublisher(0.02, lambda: sent.append(loop.time()))

    loop.call_at(START + at, callback, loop, publisher)
    try:
        loop.run_for(seconds, publisher.run())
    finally:
        loop.close()
    return sent


def test_a_timer_just_before_a_slot_never_sends_that_slot_twice():
    """asyncio runs every timer due within its clock's resolution (1 ns) at once: another timer 0.4 ns
    before a slot ran the slot's timer early, and its state (sent before the slot's time) left the slot
    armed, so the slot went out twice, 0.4 ns apart."""
    slot = beat.nearest_slot(START + 0.5)
    _, plain, _ = publish_run(1.0)
    sent = run_with(1.0, slot - 4e-10 - START, lambda loop, publisher: None)
    assert len(sent) == len(plain)
    assert all(b - a > 0.019 for a, b in zip(sent[1:], sent[2:])), [t for t in sent if abs(t - slot) < 0.05]


@pytest.mark.parametrize("at", [0.5, 0.506, 0.513, 0.513 - 1e-9], ids=["mid", "late", "at-slot", "just-before"])
@pytest.mark.parametrize("kick", [False, True], ids=["", "ctrl_update"])
def test_a_loop_stalled_for_a_second_sends_the_late_state_once_then_the_slots(at, kick):
    """The loop blocked for 1 s (a ctrl_update during the stall or not): the late slot's state at the
    stall's end (with the ctrl_update's, at most one more), no missed slot sent, then every slot."""
    def stall(loop, publisher):
        if kick:
            publisher.now()
        loop.now += 1.0
    sent = run_with(2.0, at, stall)
    end = START + at + 1.0
    before = [t for t in sent if t < end]
    late = [t for t in sent if t == end]
    after = [t for t in sent if t > end]
    assert before[-1] <= START + at and 1 <= len(late) <= 1 + kick
    assert after[0] == pytest.approx(beat.nearest_slot(after[0]), abs=1e-9) and after[0] - end <= 0.02 + 1e-9
    assert all(b - a == pytest.approx(0.02, abs=1e-9) for a, b in zip(after, after[1:]))
    assert len(after) == pytest.approx((START + 2.0 - end) / 0.02, abs=1)


def test_now_outside_a_run_is_ignored():
    publisher = SlotPublisher(0.02, lambda: pytest.fail("published without a run"))
    publisher.now()


PAYLOADS = [
    None, 0, 1.5, True, "x", b"", bytearray(b"ab"), [], {}, [1, [2, [3, b"deep"]]], {"a": {"b": [None, "c"]}},
    {"payload": {"front": b"\xff\xd8jpeg"}}, ["telem", {"payload": telemetry(snap())}],
    ["video", {"payload": {"front": b"jpg", "led_strip": bytearray(12)}}], [{"k": (1, 2)}, memoryview(b"m")],
]


@pytest.mark.parametrize("data", PAYLOADS, ids=range(len(PAYLOADS)))
def test_the_binary_check_answers_as_python_socketio(data):
    assert HubPacket.data_is_binary(data) is sio_packet.Packet.data_is_binary(data)
    # and so the packet type on the wire is the library's
    assert (HubPacket(sio_packet.EVENT, data=data).packet_type
            == sio_packet.Packet(sio_packet.EVENT, data=data).packet_type)


class SlowGate(TelemGate):
    """The gate without the at-rest shortcuts: every poll walks the deadbands (the reference)."""

    def due(self, new):
        last = self._last or {}
        self._steady = {k: self._steady.get(k, 0) + 1 if k in last and last[k] == v else 0 for k, v in new.items()}
        self._last = new
        sent = self.sent
        if sent is None or new.keys() != sent.keys() or any(
                _differs(v, sent[k], DEADBANDS.get(k, 0.0)) for k, v in new.items()):
            return True
        return any(self._steady[k] >= self.settle_polls and v != sent[k] for k, v in new.items())


def test_the_gate_decides_as_the_deadband_walk_over_rest_noise_drift_and_changes():
    rng = random.Random(22)
    fast, slow = TelemGate(), SlowGate()
    x, decisions = 0.0, 0
    for poll in range(600):
        phase = (poll // 50) % 4            # rest, noise below the deadband, motion, a settled coast-down
        if phase == 1:
            x += rng.uniform(-0.001, 0.001)
        elif phase == 2:
            x += 0.004
        elif phase == 3 and poll % 50 < 5:
            x += 0.001
        extra = {"stopped": poll % 150 == 149, "watchdog": "expired" if poll % 97 == 0 else "ok"}
        data = telemetry(snap(odom=Odometry(x_m=x, y_m=0.0, yaw_rad=0.0, vx_mps=0.0, omega_radps=0.0,
                                            distance_m=abs(x)), **extra))
        a, b = fast.due(data), slow.due(data)
        assert a == b, poll
        if a:
            decisions += 1
            fast.mark_sent(data)
            slow.mark_sent(data)
    assert 20 < decisions < 600             # both sends and quiet polls were decided


def test_at_rest_a_changed_nested_value_is_still_sent_and_a_settled_one_after_the_settle_polls():
    gate = TelemGate()
    rest = telemetry(snap())
    assert gate.due(rest)
    gate.mark_sent(rest)
    assert not any(gate.due(telemetry(snap())) for _ in range(3 * SETTLE_POLLS))     # at rest: quiet
    moved = telemetry(snap(tracks=dataclasses.replace(snap().tracks, left_counts=1300)))
    assert gate.due(moved)                  # one nested count moved: sent
    gate.mark_sent(moved)
    crept = telemetry(snap(tracks=dataclasses.replace(snap().tracks, left_counts=1300, left_mps=0.302)))
    polls = [gate.due(crept) for _ in range(SETTLE_POLLS + 1)]
    assert polls[-1] and not any(polls[:SETTLE_POLLS - 1])   # within the deadband: sent once it settled


@pytest.mark.parametrize("values", [
    (), (0.0, 1.5, -2.25), (1, 2, True), (math.nan, 1.0), (1.0, math.inf), (-math.inf, math.inf),
    (None, 1.0, math.nan), (1e308, 1e308), [0.1] * 7,
])
def test_sim2bot_number_lists_equal_the_per_value_path(values):
    got = _nums(values)
    want = [_num(v) for v in values]
    assert got == want or all((g is None and w is None) or g == w for g, w in zip(got, want, strict=True))
    assert [type(v) for v in got] == [type(v) for v in want]


def distinct(rng: random.Random, **kw):
    """A robot_msg test snapshot whose every number differs from every other (a value put in another's
    place shows)."""
    from agent.model import DeviceHealth, Halt, ImuSample, JointState, PowerSample, SafetyState, TrackState
    from tests.adapters.test_robotmsg_state import DESC, snapshot as rm_snapshot
    v = lambda: round(rng.uniform(-50.0, 50.0), 6)      # noqa: E731
    t = 1000.0 + rng.uniform(0.0, 10.0)
    base = dict(
        t_mono_s=t,
        odom=Odometry(x_m=v(), y_m=v(), yaw_rad=v(), vx_mps=v(), omega_radps=v(), distance_m=v()),
        tracks=TrackState(v(), v(), v(), v(), v(), v(), rng.randint(-9999, 9999), rng.randint(-9999, 9999)),
        joints=JointState(names=DESC.joint_names, q=(v(), v()), target=(v(), v()), qd=(v(), v())),
        gripper=v(),
        imu=ImuSample(t - 0.01, (v(), v(), v()), (v(), v(), v()), (v(), v(), v(), v()), v()),
        power=PowerSample(t - 0.02, v(), v(), v(), v()),
        devices=(DeviceHealth("motor", "ok"), DeviceHealth("imu", "degraded", "i2c"), DeviceHealth("cam", "lost")),
        safety=SafetyState(halts=(Halt("estop", "button", "console", 1.7e9 + v()),
                                  Halt("battery", "low", "robot", 1.7e9 + v(), cleared=True)),
                           speed_cap_mps=abs(v()), speed_cap_reason="battery low"),
        stopped=rng.random() < 0.5, watchdog=rng.choice(("ok", "expired", "idle")), faults=("a",) * rng.randint(0, 3),
    )
    base.update(kw)
    return rm_snapshot(**base)


def test_robotstate_fast_numbers_go_to_their_own_places_in_every_layout():
    import robot_msg as rm

    from agent.adapters.robotmsg_encode import StateEncoder
    from agent.adapters.robotmsg_state import robot_state
    from agent.model import ImuSample, JointState, PowerSample, SafetyState
    from tests.adapters.test_robotmsg_state import DESC, FRAMES

    rng = random.Random(5)
    layouts = {
        "everything": {}, "no imu, no power": {"imu": None, "power": None}, "no tick yet": {"t_mono_s": 0.0},
        "no gripper, no joint target": {"gripper": None,
                                        "joints": JointState(names=DESC.joint_names, q=(0.5, 0.25), qd=(1.5, 2.5))},
        "joint rates missing": {"joints": JointState(names=DESC.joint_names, q=(0.5, 0.25))},
        "imu and power partly known": {"imu": ImuSample(999.0, (1.0, 2.0, 3.0), (4.0, 5.0, 6.0)),
                                       "power": PowerSample(998.0, None, 7.0, 8.0, None)},
        "no halts, no devices": {"safety": SafetyState(), "devices": ()},
    }
    for name, kw in layouts.items():
        enc = StateEncoder(DESC, "linux-boot:test", FRAMES)
        for seq in range(4):
            snap = distinct(rng, **kw)
            send = 1.7e9 + rng.uniform(0, 100)
            data = enc.encode(snap, sequence=seq, send_unix_s=send)
            want = rm.encode(robot_state(snap, DESC, sequence=seq, clock_id="linux-boot:test", frames=FRAMES,
                                         send_unix_s=send))
            assert data == want, (name, seq)
        assert enc.trusted and enc.checked == 1 and enc.fast == 3, name     # the later states went the fast way


def test_the_cheaper_json_encoders_write_the_librarys_text():
    import json

    from engineio import json as eio_json

    from agent.adapters import sim2bot_wire
    from agent.adapters.artex_client import _Json
    from agent.adapters.sim2bot_telemetry import TelemetryBuilder
    from tests.adapters.test_robotmsg_state import DESC
    from tests.adapters.test_robotmsg_state import snapshot as rm_snapshot

    snap = distinct(random.Random(9))
    packet = TelemetryBuilder(DESC, "tank", "default").build(snap, [snap, rm_snapshot()], "a warning: é")
    assert sim2bot_wire.encode(packet) == json.dumps(packet)
    for data in (["telem", {"payload": telemetry(snap)}], ["x", {"ü": [1.5, None, True, "\u2028"]}], {"n": math.nan}):
        assert _Json.dumps(data, separators=(",", ":")) == eio_json.dumps(data, separators=(",", ":"))
        assert _Json.dumps(data) == eio_json.dumps(data)
    assert (HubPacket(sio_packet.EVENT, data=["telem", {"payload": telemetry(snap)}], namespace="/robot").encode()
            == sio_packet.Packet(sio_packet.EVENT, data=["telem", {"payload": telemetry(snap)}],
                                 namespace="/robot").encode())
