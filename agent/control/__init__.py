"""The control loop, the only writer to the motors and servos (docs/architecture.md, "The robot port").

Parts: agent.control.front (what adapters call, thread-safe), agent.control.tick
(the pure tick), agent.control.devices (the tick's device I/O),
agent.control.scheduler (the control thread) and agent.control.loop
(:class:`ControlLoop`, which puts them together).
"""

from agent.control.devices import HardwarePort
from agent.control.front import RING_SIZE, STILL_MPS, describe
from agent.control.loop import ControlLoop
from agent.control.scheduler import RATE_SHARE, RATE_WINDOW_S, TickStats

__all__ = ["RATE_SHARE", "RATE_WINDOW_S", "RING_SIZE", "STILL_MPS", "ControlLoop", "HardwarePort", "TickStats",
           "describe"]
