"""robot_msg's receiving threads (agent/adapters/robotmsg_receive.py): a command reaches the control
loop without the event loop, and the threads end with the adapter's sockets."""

from __future__ import annotations

import threading

import zmq
from robot_msg import ControllerCommand

from agent.testing.running_agent import wait_until
from tests.adapters.test_robotmsg import controlled, envelope, moving, rm_config, slow_watchdog, u_rt

READERS = {"robotmsg-command", "robotmsg-action"}


def readers() -> set[str]:
    return {t.name for t in threading.enumerate()} & READERS


async def test_a_command_drives_the_tank_while_the_event_loop_is_busy():
    async with controlled(slow_watchdog()) as (agent, peer):
        act = await peer.publisher("action")
        cmd = await peer.publisher("command")
        # from here on this test holds the event loop: it sends and waits synchronously
        zmq.Socket.shadow(act.underlying).send(envelope(u_rt(0.4)))
        assert wait_until(lambda: moving(agent), 5.0)
        assert peer.status()["applied"] == 1 and peer.status()["received"] == 1
        zmq.Socket.shadow(cmd.underlying).send(envelope(ControllerCommand(ctrl_mode=0)))     # stop
        assert wait_until(lambda: agent.control.snapshot().stopped and not moving(agent), 5.0)


async def test_each_receiving_socket_has_its_thread_and_it_ends_with_the_adapter():
    async with controlled(rm_config()) as (agent, peer):
        assert wait_until(lambda: readers() == READERS, 5.0)
        act = await peer.publisher("action")
        await peer.send(act, u_rt(0.3))
        assert wait_until(lambda: moving(agent), 5.0)
    assert wait_until(lambda: not readers(), 5.0), readers()
