"""ARTEX telemetry (agent/adapters/artex_telem.py): content from a Snapshot and the deadband change test."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
import random
from collections import Counter

import pytest

from agent.adapters.artex_streams import ArtexStreams
from agent.adapters.artex_telem import DEADBANDS, SETTLE_POLLS, TelemGate, changed, telemetry
from agent.config import AgentConfig
from agent.model import DeviceHealth, ImuSample, JointState, Odometry, PowerSample, Snapshot, TrackState
from agent.testing.clock import VirtualClock
from agent.testing.running_agent import sim_config


def snap(**kw) -> Snapshot:
    return Snapshot(**{
        "seq": 5, "t_mono_s": 1.0, "t_unix_s": 1e9,
        "odom": Odometry(x_m=1.23456, y_m=-0.5, yaw_rad=0.1, vx_mps=0.29999, omega_radps=0.0, distance_m=2.0),
        "tracks": TrackState(0.3, 0.3, 0.3, 0.3, 0.2999, 0.3001, 1200, 1201),
        "joints": JointState(names=("pan", "tilt"), q=(0.1, -0.2), target=(0.1, -0.2)),
        "gripper": 1.0,
        "imu": ImuSample(0.9, (0.012, -0.004, 9.8066), (0.0, 0.0, 0.0011)),
        "power": PowerSample(0.9, 12.2049, 1.234, 15.06, 87.4),
        "active_source": "artex", "overridden": (("artex", 2),), "watchdog": "ok", "stopped": False,
        "faults": ("motor: status 0x0001 E-Stop",),
        "devices": (DeviceHealth("motor", "ok"), DeviceHealth("imu", "degraded", "NACK", 3)),
        **kw,
    })


def test_sdk_keys_carry_sdk_meaning_and_units():
    t = telemetry(snap())
    assert t["battery"] == 12.2          # V, 2 decimals
    assert t["speed"] == 0.3             # forward speed, m/s
    assert t["imu"] == [0.01, 0.0, 9.81]   # specific force, m/s^2
    assert list(t)[:3] == ["battery", "speed", "imu"]


def test_agent_keys():
    t = telemetry(snap())
    assert t["odom"]["x_m"] == 1.235 and t["odom"]["distance_m"] == 2.0
    assert t["tracks"]["left_counts"] == 1200 and t["tracks"]["duty_right"] == 0.3
    assert t["joints"] == {"pan": 0.1, "tilt": -0.2}
    assert t["gripper"] == 1.0
    assert t["source"] == "artex" and t["watchdog"] == "ok" and t["stopped"] is False
    assert t["overridden"] == {"artex": 2}
    assert t["faults"] == ["motor: status 0x0001 E-Stop"]
    assert t["devices"] == {"motor": "ok", "imu": "degraded"}
    assert t["battery_a"] == 1.23 and t["battery_pct"] == 87.0


def test_missing_sensors_and_non_finite_values_are_null_and_json_safe():
    t = telemetry(snap(imu=None, power=None, odom=Odometry(vx_mps=math.nan), gripper=None))
    assert t["battery"] is None and t["imu"] is None and t["gyro_radps"] is None
    assert t["speed"] is None and t["gripper"] is None
    json.dumps(t, allow_nan=False)


def test_no_timestamps_so_equal_states_give_equal_dicts():
    a = telemetry(snap(seq=1, t_mono_s=1.0, t_unix_s=1.0))
    b = telemetry(snap(seq=2, t_mono_s=2.0, t_unix_s=2.0))
    assert a == b and not changed(b, a)


def test_first_dict_always_changed():
    assert changed(telemetry(snap()), None)


def test_sensor_noise_below_the_deadband_is_not_a_change():
    rng = random.Random(1)
    sent = telemetry(snap())
    for _ in range(2000):  # MPU-6050-like accel noise (0.035 m/s^2 rms), 100 s at 20 Hz
        accel = (0.012 + rng.gauss(0, 0.035), -0.004 + rng.gauss(0, 0.035), 9.8066 + rng.gauss(0, 0.035))
        volts = 12.2049 + rng.gauss(0, 0.008)
        s = snap(imu=ImuSample(1.0, accel, (0.0, 0.0, rng.gauss(0, 0.003))),
                 power=PowerSample(1.0, volts, 1.234, 15.06, 87.4))
        assert not changed(telemetry(s), sent)


def test_real_changes_are_changes():
    sent = telemetry(snap())
    moved = snap(odom=dataclasses.replace(snap().odom, x_m=1.24))
    assert changed(telemetry(moved), sent)
    assert changed(telemetry(snap(watchdog="expired")), sent)
    assert changed(telemetry(snap(faults=())), sent)
    assert changed(telemetry(snap(devices=(DeviceHealth("motor", "lost"),))), sent)
    assert changed(telemetry(snap(power=PowerSample(1.0, 12.1, 1.234, 15.06, 87.4))), sent)
    assert changed(telemetry(snap(imu=ImuSample(1.0, (0.25, 0.0, 9.8), (0.0, 0.0, 0.0)))), sent)
    assert changed(telemetry(snap(tracks=dataclasses.replace(snap().tracks, left_counts=1201))), sent)
    assert changed(telemetry(snap(power=None)), sent)


def test_slow_drift_is_reported_once_it_adds_up_to_a_deadband():
    sent = telemetry(snap())
    v = 12.2049
    sends = 0
    for _ in range(100):
        v -= 0.002  # 0.2 V in total, 2 mV per step
        t = telemetry(snap(power=PowerSample(1.0, v, 1.234, 15.06, 87.4)))
        if changed(t, sent):
            sends += 1
            sent = t
    assert 3 <= sends <= 5  # 0.2 V / 0.05 V deadband


def test_deadbands_cover_the_noisy_keys():
    assert set(DEADBANDS) >= {"battery", "imu", "gyro_radps", "speed"}


def coasting(vx: float) -> Snapshot:
    return snap(odom=dataclasses.replace(snap().odom, vx_mps=vx))


def test_gate_sends_the_settled_value_after_a_coast_down():
    gate = TelemGate()
    sends = []
    for vx in [0.3, 0.2, 0.1, 0.05, 0.02, 0.01, 0.004, 0.002, 0.001] + [0.0] * 30:
        t = telemetry(coasting(vx))
        if gate.due(t):
            gate.mark_sent(t)
            sends.append(t["speed"])
    # each step of at least the 0.005 m/s deadband, then the true resting value once it held 10 polls
    assert sends == [0.3, 0.2, 0.1, 0.05, 0.02, 0.01, 0.004, 0.0]
    assert not gate.due(telemetry(coasting(0.0)))  # and then stays quiet


def test_gate_stays_quiet_with_noise_and_retries_an_unsent_dict():
    rng = random.Random(7)
    gate = TelemGate()
    first = telemetry(snap())
    assert gate.due(first)
    assert gate.due(first)  # not marked sent (emit failed): still due
    gate.mark_sent(first)
    sends = 0
    for _ in range(2000):
        s = snap(imu=ImuSample(1.0, tuple(a + rng.gauss(0, 0.035) for a in (0.012, -0.004, 9.8066)),
                               (0.0, 0.0, 0.0011 + rng.gauss(0, 0.003))))
        sends += gate.due(telemetry(s))
    assert sends == 0
    assert SETTLE_POLLS >= 5


# ---------------------------------------------------------------- the telem stream, on a virtual clock


class Drive:
    """RobotPort reads for the stream: moving (odometry grows per poll) for ``moving_polls``, then still."""

    def __init__(self, moving_polls: int) -> None:
        self.polls = 0
        self.moving_polls = moving_polls

    def snapshot(self) -> Snapshot:
        self.polls += 1
        x = 0.05 * min(self.polls, self.moving_polls)
        return snap(odom=Odometry(x_m=x, y_m=0.0, yaw_rad=0.0, vx_mps=0.0, omega_radps=0.0, distance_m=x))


async def run_telem(robot, *, period_s: float, polls: int, emit_ok=lambda n: True,
                    keepalive_s: float = 60.0) -> tuple[list, VirtualClock]:
    clock = VirtualClock()
    cfg = AgentConfig.model_validate(sim_config(max_send_freq=period_s, telem_can=True, video_can=False,
                                                artex={"telem_keepalive_s": keepalive_s}))
    sent: list[tuple[float, dict]] = []

    async def emit(event: str, data: dict) -> bool:
        if not emit_ok(len(sent)):
            return False
        sent.append((clock.time(), data["payload"]))
        return True

    streams = ArtexStreams(cfg, robot, None, emit, lambda: False, Counter(), clock=clock.time, sleep=clock.sleep)
    clock.stop_when(lambda: len(clock.sleeps) > polls)
    with pytest.raises(asyncio.CancelledError):
        await streams._telem_loop()
    return sent, clock


async def test_telem_goes_out_once_per_period_while_moving_and_not_at_all_when_still():
    sent, clock = await run_telem(Drive(moving_polls=20), period_s=0.1, polls=60)
    times = [t for t, _ in sent]
    assert len(sent) == 20                                   # one per poll while moving, none after
    assert all(b - a == pytest.approx(0.1) for a, b in zip(times, times[1:]))
    assert all(p == pytest.approx(0.1) for p in clock.sleeps)
    assert sent[-1][1]["odom"]["distance_m"] == pytest.approx(1.0)


async def test_at_rest_the_whole_dict_still_goes_out_once_per_keepalive_period():
    """An idle robot is not silent: a hub that reads telemetry as "last seen" gets it every keepalive_s."""
    sent, _ = await run_telem(Drive(moving_polls=20), period_s=0.1, polls=60, keepalive_s=1.0)
    times = [t for t, _ in sent]
    assert times[:20] == pytest.approx([0.1 * (i + 1) for i in range(20)])  # on change while moving
    rest = times[20:]
    assert len(rest) == 4 and all(b - a == pytest.approx(1.0) for a, b in zip(times[19:], rest))
    assert all(set(p) == set(sent[0][1]) for _, p in sent)                  # always the whole dict


async def test_a_telem_the_link_did_not_take_is_sent_again_next_period():
    answers = iter([False, False])                           # the link refuses twice, then takes it
    sent, _ = await run_telem(Drive(moving_polls=1), period_s=0.1, polls=10, emit_ok=lambda n: next(answers, True))
    assert len(sent) == 1 and sent[0][0] == pytest.approx(0.3)


def test_halts_and_speed_cap_are_hub_ui_keys_and_a_change_is_sent():
    from agent.model import Halt, SafetyState

    quiet = telemetry(snap())
    assert (quiet["estop"], quiet["halted"], quiet["halt"], quiet["halts"]) == (False, False, "", [])
    assert quiet["speed_cap_mps"] is None and quiet["speed_cap_reason"] == ""
    safety = SafetyState((Halt("estop", "STOP pressed", "console", 1_764_612_000.0),), 0.3, "battery 6.6 V low")
    t = telemetry(snap(safety=safety))
    assert t["estop"] is True and t["halted"] is True
    assert t["halt"] == "emergency stop set by console since 2025-12-01 18:00:00 UTC: STOP pressed"
    assert t["halts"] == [{"kind": "estop", "reason": "STOP pressed", "by": "console", "since_unix_s": 1_764_612_000.0,
                           "since": "2025-12-01T18:00:00Z", "cleared": False}]
    assert (t["speed_cap_mps"], t["speed_cap_reason"]) == (0.3, "battery 6.6 V low")
    json.dumps(t, allow_nan=False)
    assert changed(t, quiet) and changed(quiet, t)
