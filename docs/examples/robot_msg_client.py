"""A robot_msg controller for robot-agent: read RobotState, drive the tank with RobotAction ``u_rt``.

Start the agent with ``"robot_msg": {"enabled": true}`` in params.json, then:

    python docs/examples/robot_msg_client.py --vx 0.2 --omega 0.0 --seconds 2

``u_rt`` is ``[vx m/s (+ forward), omega rad/s (+ left)]``, a velocity command: the agent's watchdog
stops the tracks 0.5 s after the last one, so it is streamed (every ``--period`` s), and a zero
is sent at the end. Needs ``pip install robot-msg-irsl pyzmq``.
"""

from __future__ import annotations

import argparse
import time

import robot_msg as rm
import zmq
from robot_msg import RobotAction, RobotActionRealTimeAction, ports


def aux(state, name: str) -> list[float] | None:
    """The aux array ``name`` of a RobotState (``odom_distance``, ``track_speed``...), or None."""
    for array in state.metadata.aux if state.metadata else ():
        if array.name == name:
            return list(array.data)
    return None


def receive_state(sub: zmq.Socket):
    """The next RobotState (one frame, or [topic, envelope] when the agent sets a topic)."""
    return rm.decode(sub.recv_multipart()[-1])


def newest_state(sub: zmq.Socket, state):
    """The newest RobotState waiting on ``sub`` (older ones are skipped), or ``state`` when none waits."""
    while True:
        try:
            frames = sub.recv_multipart(zmq.NOBLOCK)
        except zmq.Again:
            return state
        state = rm.decode(frames[-1])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--state", default=f"tcp://127.0.0.1:{ports.ROBOT_STATE}", help="the agent's RobotState PUB")
    p.add_argument("--action", default=f"tcp://127.0.0.1:{ports.ROBOT_ACTION}", help="the agent's RobotAction SUB")
    p.add_argument("--vx", type=float, default=0.2, help="forward speed, m/s")
    p.add_argument("--omega", type=float, default=0.0, help="yaw rate, rad/s, + turns left")
    p.add_argument("--seconds", type=float, default=2.0, help="how long to drive, s")
    p.add_argument("--period", type=float, default=0.1, help="u_rt repeat period, s (well under 0.5 s)")
    args = p.parse_args(argv)

    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    sub.setsockopt(zmq.RCVTIMEO, 5000)          # ms: fail instead of waiting forever for the agent
    sub.connect(args.state)
    pub = ctx.socket(zmq.PUB)
    pub.connect(args.action)
    try:
        state = receive_state(sub)
        print(f"robot: {len(state.q)} joint(s) q={[round(q, 3) for q in state.q]}, "
              f"odom_distance={aux(state, 'odom_distance')} m, track_counts={aux(state, 'track_counts')}")
        end = time.monotonic() + args.seconds
        while time.monotonic() < end:             # stream the velocity command
            drive = RobotAction(frame_id="base_link",
                                real_time_action=RobotActionRealTimeAction(u_rt=[args.vx, args.omega]))
            pub.send(rm.encode(drive))
            time.sleep(args.period)
            state = newest_state(sub, state)
        stop = RobotAction(frame_id="base_link", real_time_action=RobotActionRealTimeAction(u_rt=[0.0, 0.0]))
        pub.send(rm.encode(stop))
        time.sleep(0.5)
        state = newest_state(sub, receive_state(sub))
        print(f"after driving: odom_distance={aux(state, 'odom_distance')} m, "
              f"track_counts={aux(state, 'track_counts')}, track_speed={aux(state, 'track_speed')} m/s")
    except zmq.Again:
        print(f"no RobotState from {args.state} within 5 s: is the agent running with robot_msg enabled?")
        return 1
    finally:
        ctx.destroy(linger=100)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
