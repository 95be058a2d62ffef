"""The telemetry texts written for less CPU are the texts of before, character for character: the Sim2Bot
packet written section by section (agent/adapters/sim2bot_wire.py) is ``json.dumps`` of the packet dict, and
the ARTEX telem dict of agent.adapters.artex_telem.TelemBuilder is ``telemetry(snap)``'s, over streams of ticks
whose sections change, stay, come back with signed zeros, lose devices and carry non-finite numbers."""

from __future__ import annotations

import dataclasses
import json
import math
import random

import pytest

from agent.adapters.sim2bot_telemetry import TelemetryBuilder
from agent.adapters.sim2bot_wire import nums_text
from agent.model import (
    DeviceHealth,
    Halt,
    ImuSample,
    JointState,
    Odometry,
    PowerSample,
    SafetyState,
    Snapshot,
    TrackState,
)
from tests.adapters.test_sim2bot_telemetry import DESC

ODD = (math.nan, math.inf, -math.inf, -0.0, 0.0, 1e308, -1e-310, 3, True)


def value(rng: random.Random) -> float:
    r = rng.random()
    if r < 0.08:
        return rng.choice(ODD)
    return round(rng.uniform(-20.0, 20.0), rng.choice((0, 3, 9, 17)))


def snapshots(rng: random.Random, n: int) -> list[Snapshot]:
    """A stream of ticks: each section changes with some chance, else the same object goes on."""
    v = lambda: value(rng)      # noqa: E731
    joints = JointState(names=DESC.joint_names, q=(v(), v()), target=(v(), v()), qd=(v(), v()),
                        qdd=(v(), v()), qddd=(v(), v()))
    imu = ImuSample(1.0, (v(), v(), v()), (v(), v(), v()), (v(), v(), v(), v()), v())
    power = PowerSample(1.0, v(), v(), v(), v())
    yaw = lambda: rng.uniform(-math.pi, math.pi)     # noqa: E731 - wrapped by the odometer: always finite
    odom = Odometry(v(), v(), yaw(), v(), v(), v())
    safety, devices = SafetyState(), (DeviceHealth("motor", "ok"),)
    out = []
    for seq in range(1, n + 1):
        if rng.random() < 0.3:
            joints = JointState(names=DESC.joint_names, q=(v(), v()), target=(v(), v()) if rng.random() < 0.9 else (),
                                qd=(v(), v()), qdd=(v(), v()), qddd=(v(), v()))
        if rng.random() < 0.5:
            imu = None if rng.random() < 0.1 else ImuSample(
                v(), (v(), v(), v()), (v(), v(), v()), None if rng.random() < 0.2 else (v(), v(), v(), v()),
                None if rng.random() < 0.2 else v())
        if rng.random() < 0.2:
            power = None if rng.random() < 0.1 else PowerSample(v(), None if rng.random() < 0.2 else v(), v(), v(),
                                                                 None if rng.random() < 0.2 else v())
        if rng.random() < 0.2:      # an equal odometry whose zeros changed sign: a new object, other text
            odom = Odometry(*(-f if f == 0 else f for f in dataclasses.astuple(odom)))
        elif rng.random() < 0.7:
            zero = rng.choice((0.0, -0.0))      # the same value with the other sign: written apart
            odom = Odometry(zero, v(), yaw(), zero, v(), v()) if rng.random() < 0.3 else Odometry(v(), v(), yaw(),
                                                                                                  v(), v(), v())
        if rng.random() < 0.1:
            safety = SafetyState(halts=(Halt("estop", "b\u00e9", "console", 1.7e9 + rng.uniform(0, 9)),) if rng.random() < 0.5 else (),
                                 speed_cap_mps=rng.choice((None, 0.0, -0.0, 0.5)), speed_cap_reason="low")
        if rng.random() < 0.1:
            devices = (DeviceHealth("motor", rng.choice(("ok", "lost")), "e\u2028", rng.randint(0, 3)),)
        t = 1000.0 + 0.02 * seq
        out.append(Snapshot(
            seq=seq, t_mono_s=t if rng.random() < 0.95 else rng.choice((math.nan, 7, -0.0)), t_unix_s=1.7e9 + t,
            odom=odom, tracks=TrackState(v(), v(), v(), v(), v(), v(), rng.randint(-9, 9), rng.choice((4, True))),
            joints=joints, gripper=rng.choice((None, v())), imu=imu, power=power,
            active_source=rng.choice(("", "sim2bot")), overridden=rng.choice(((), (("artex", 2),))),
            watchdog=rng.choice(("ok", "idle")), stopped=rng.random() < 0.2, faults=rng.choice(((), ("motor: lost",))),
            devices=devices, safety=safety))
    return out


@pytest.mark.parametrize("seed", range(6))
def test_the_written_packet_is_the_json_text_of_the_packet_dict(seed):
    rng = random.Random(seed)
    ticks = snapshots(rng, 400)
    by_dict = TelemetryBuilder(DESC, "tank-\u00e9", "room \"a\"")
    by_text = TelemetryBuilder(DESC, "tank-\u00e9", "room \"a\"")
    k = 0
    while k < len(ticks):
        n = rng.choice((0, 1, 1, 2, 3))
        batch = ticks[k:k + n]
        newest = batch[-1] if batch else ticks[k]
        k += max(n, 1)
        warning = rng.choice(("", "", "2 simulators in bridge room a \u2014 close it"))
        want = json.dumps(by_dict.build(newest, batch, warning))
        assert by_text.text(newest, batch, warning) == want, k


@pytest.mark.parametrize("values", [(), (0.0, -0.0), (1, True, 2.5), (math.nan, None, math.inf), (1e308, 1e308),
                                    (1e16, 1e-7, 0.1 + 0.2)])
def test_a_number_array_is_written_as_the_encoder_writes_its_list(values):
    from agent.adapters.sim2bot_telemetry import _nums
    assert nums_text(values) == json.dumps(_nums(values))


@pytest.mark.parametrize("seed", range(4))
def test_the_artex_telem_builder_gives_the_dict_of_telemetry_with_the_same_text(seed):
    """agent.adapters.artex_telem.TelemBuilder over the same kind of stream: every dict equal to
    ``telemetry(snap)``, value types and JSON text included."""
    from agent.adapters.artex_telem import TelemBuilder, telemetry

    builder = TelemBuilder()
    for snap in snapshots(random.Random(100 + seed), 400):
        got, want = builder.telemetry(snap), telemetry(snap)
        assert json.dumps(got) == json.dumps(want) and got == want, snap.seq
        assert list(got) == list(want)
