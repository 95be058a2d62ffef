"""Absurd finite joint targets over real peers: refused with the field and joint named, the servos
(PCA9685 emulator pulses behind the real driver) stay where they were.

One rule (agent/control/joints.py ``TARGET_MARGIN_RAD``: more than a full turn outside a joint's limits)
holds for every protocol: the real ``sim2bot bridge`` and client, and robot_msg over ZeroMQ.
"""

from __future__ import annotations

import logging

import pytest
from robot_msg import ControllerCommand, RobotAction, RobotActionRealTimeAction, RobotActionTrajectoryAction

from agent.control.joints import angle_to_pulse_us
from agent.testing.running_agent import running_agent, wait_for
from agent.testing.sim2bot_bridge import Bridge, agent_params, controller
from tests.adapters.test_robotmsg import controlled, envelope, moving, rm_config

pytestmark = [pytest.mark.timeout(60),
              pytest.mark.filterwarnings("ignore:connect\\(\\) must be used as a context manager")]


@pytest.fixture(scope="module")
def bridge():
    with Bridge() as b:
        yield b


def at(agent, q: tuple[float, float], tol_us: float = 3.0) -> bool:
    """The PCA9685 emulator's pulses are those of the joint angles ``q``."""
    pulses = agent.physics.servo_pulse_us
    return all(abs(pulses.get(j.channel, 0.0) - angle_to_pulse_us(a, j)) < tol_us
               for j, a in zip(agent.cfg.drivers.servo.joints, q, strict=True))


def settled(agent) -> bool:
    joints = agent.control.snapshot().joints
    return joints.q == joints.target


async def ticks_later(agent, n: int = 10) -> bool:
    """Wait for ``n`` more control ticks (a refused target would have moved the servos by then)."""
    seq = agent.control.snapshot().seq
    return await wait_for(lambda: agent.control.snapshot().seq >= seq + n, 3.0)


async def test_sim2bot_absurd_joint_targets_are_refused_and_the_servos_stay(bridge, caplog):
    caplog.set_level(logging.WARNING, logger="agent")
    async with running_agent(agent_params(bridge)) as agent, controller(bridge) as robot:
        adapter = agent.adapters["sim2bot"]
        robot.move_to([0.3, 0.1])                    # a definite pose first
        assert await wait_for(lambda: at(agent, (0.3, 0.1)) and settled(agent), 5.0)
        assert await ticks_later(agent, 3)          # the last pulses written
        pulses = dict(agent.physics.servo_pulse_us)
        sends = [
            lambda: robot.move_to([1e300, -1e300]),
            lambda: robot.move_to([0.3, -1e300]),
            lambda: robot.move_to([0.3 + 10.0, 0.1]),      # more than a full turn past 1.5708
            lambda: robot.move_trajectory([(0.2, [0.0, 0.0]), (0.5, [-1e300, 0.0])]),
        ]
        for send in sends:
            rejected = adapter.status()["rejected"]
            send()
            assert await wait_for(lambda: adapter.status()["rejected"] == rejected + 1, 5.0)
        assert await ticks_later(agent)
        assert agent.physics.servo_pulse_us == pulses and not moving(agent)
        text = caplog.text
        assert "joint_position q[0] (turret_pan) 1e+300 rad is more than a full turn" in text
        assert "joint_position q[1] (camera_tilt) -1e+300 rad" in text
        assert "joint_position q[0] (turret_pan) 10.3 rad" in text
        assert "joint_trajectory points[1].q[0] (turret_pan) -1e+300 rad" in text
        robot.move_to([0.5, 0.1])                   # a within-a-turn overshoot is still clamped
        robot.move_to([1.6, 0.1])
        assert await wait_for(lambda: at(agent, (1.5708, 0.1)), 5.0)


async def test_robot_msg_absurd_joint_targets_are_refused_and_the_servos_stay(caplog):
    caplog.set_level(logging.DEBUG, logger="agent")
    async with controlled(rm_config()) as (agent, peer):
        act = await peer.publisher("action")
        cmd = await peer.publisher("command")
        await peer.send(act, RobotAction(frame_id="base_link",
                                         real_time_action=RobotActionRealTimeAction(q_rt=[0.3, 0.1])))
        assert await wait_for(lambda: at(agent, (0.3, 0.1)) and settled(agent), 5.0)
        assert await ticks_later(agent, 3)          # the last pulses written
        pulses = dict(agent.physics.servo_pulse_us)
        absurd = [
            (act, RobotAction(frame_id="base_link", real_time_action=RobotActionRealTimeAction(q_rt=[1e300, -1e300])),
             "real_time_action.q_rt: the robot refused JointPosition: joint_position q[0] (turret_pan) 1e+300 rad"),
            (act, RobotAction(frame_id="base_link", trajectory_action=RobotActionTrajectoryAction(
                q_traj=[[0.0, 0.0], [0.2, -1e300]], traj_duration=1.0)),
             "trajectory_action.q_traj: the robot refused JointTrajectory: joint_trajectory points[1].q[1] "
             "(camera_tilt) -1e+300 rad"),
            (cmd, ControllerCommand(joint_pos=[0.0, 1e300]),
             "joint_pos: the robot refused JointPosition: joint_position q[1] (camera_tilt) 1e+300 rad"),
        ]
        for i, (sock, message, _) in enumerate(absurd, start=1):
            status = await peer.send_raw(sock, [envelope(message)])
            assert status["rejected_reasons"].get("refused") == i and status["applied"] == 1
        assert await ticks_later(agent)
        assert agent.physics.servo_pulse_us == pulses and not moving(agent)
        for *_, logged in absurd:
            assert logged in caplog.text
