"""What the control tick reuses while nothing changes (agent/control/joints.py, arbitration.py,
failsafes.py): the reused values must follow every change at once."""

from __future__ import annotations

from agent.config.drivers import GripperConfig, ServoJointConfig
from agent.control.arbitration import BASE, Arbiter
from agent.control.failsafes import BatteryDetector, BatterySettings
from agent.control.joints import JointController
from agent.commands import BaseVelocity, JointTrajectory, TrajectoryPoint
from agent.model import PowerSample

PAN = ServoJointConfig(name="pan", channel=0, min_us=500, max_us=2500, min_rad=-1.0, max_rad=1.0,
                       home_rad=0.0, max_speed_radps=1.0)
GRIP = GripperConfig(channel=5, closed_us=1000, open_us=2000, home_fraction=0.5)
DT = 0.02


def settle(jc: JointController, t: float, ticks: int = 3) -> float:
    for _ in range(ticks):
        t += DT
        jc.step(t, DT, None)
    return t


def test_settled_joints_reuse_their_state_and_pulses_until_something_moves():
    jc = JointController([PAN], GRIP)
    t = settle(jc, 0.0)
    state, pulses = jc.state(), jc.pulses()
    t = settle(jc, t)
    assert jc.state() is state and jc.pulses() is pulses
    assert state.q == (0.0,) and state.qd == (0.0,) and pulses == {0: 1500.0, 5: 1500.0}

    jc.set_position("sim2bot", [0.5])           # a new target: the next steps move again
    assert jc.state() is not state and jc.state().target == (0.5,)
    t = settle(jc, t, 1)
    assert jc.state().q == (0.02,) and jc.state().qd[0] > 0.0
    assert jc.pulses() == {0: 1520.0, 5: 1500.0}
    t = settle(jc, t, 40)                       # there and still
    assert jc.state().q == (0.5,) and jc.state().qd == (0.0,) and jc.pulses()[0] == 2000.0

    jc.set_gripper(1.0)                         # the gripper alone changes the pulses
    assert jc.pulses() == {0: 2000.0, 5: 2000.0}

    jc.step(t + DT, DT, [-1.0], "sim2bot")      # a velocity moves a settled joint at once
    assert jc.state().q == (0.48,)
    t = settle(jc, t + DT, 1)                   # the velocity ended: holds, then still
    assert jc.state().q == (0.48,) and jc.state().qd == (0.0,)

    jc.start_trajectory("sim2bot", JointTrajectory([TrajectoryPoint(0.1, (0.0,))]), t)
    settle(jc, t, 10)                           # slew-limited: 0.2 rad of the 0.48
    assert abs(jc.state().q[0] - 0.28) < 1e-9
    settle(jc, t + 0.2, 20)
    assert jc.state().q == (0.0,)

    jc.hold()
    jc.go_home("sim2bot")
    assert jc.gripper == 0.5 and jc.pulses()[5] == 1500.0


def test_overridden_counts_are_reused_until_one_changes():
    arb = Arbiter({"artex": 10, "console": 40}, {"artex": 0.5, "console": 0.5})
    first = arb.overridden()
    assert arb.overridden() is first and dict(first) == {"artex": 0, "console": 0}
    arb.offer("console", BASE, BaseVelocity(0.1, 0.0), 1.0)
    arb.offer("artex", BASE, BaseVelocity(0.2, 0.0), 1.1)       # under a fresh console claim: overridden
    assert dict(arb.overridden()) == {"artex": 1, "console": 0}
    assert arb.latch("artex", BASE, 1.2) is not None            # a latched command refused: counted too
    assert dict(arb.overridden()) == {"artex": 2, "console": 0}


def test_battery_mean_follows_new_and_aged_out_samples():
    det = BatteryDetector(BatterySettings(low_v=10.0, critical_v=9.0, hysteresis_v=0.2, low_for_s=1.0,
                                          critical_for_s=1.0, average_s=1.0, sag_ohm=0.0, low_speed_mps=0.1))
    det.update(0.0, PowerSample(voltage_v=12.0, current_a=0.0, power_w=0.0, t_mono_s=0.0))
    det.update(0.5, PowerSample(voltage_v=11.0, current_a=0.0, power_w=0.0, t_mono_s=0.5))
    assert det.volts == 11.5
    det.update(0.9, PowerSample(voltage_v=11.0, current_a=0.0, power_w=0.0, t_mono_s=0.5))     # the same sample again
    assert det.volts == 11.5
    det.update(1.2, None)                       # the first sample aged out
    assert det.volts == 11.0
