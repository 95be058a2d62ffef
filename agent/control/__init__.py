"""The control loop, the only writer to the motors and servos (docs/architecture.md, "Layers").

Parts: agent.control.front (what adapters call, thread-safe: validation),
agent.control.state (the loop's state and its transitions), agent.control.tick
(the pure tick), agent.control.devices (the tick's device I/O),
agent.control.scheduler (the control thread) and agent.control.loop
(:class:`ControlLoop`, which puts them together). Motion: agent.control.kinematics
(skid-steer), agent.control.arbitration (who may move the tank), agent.control.stoplatch
(the stop latch, also used by the Sim2Bot rooms) and agent.control.joints (servo joints).

The names below load their module when first used (PEP 562), so an adapter importing
:mod:`agent.control.arbitration` does not load the whole loop.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent.support.lazy import lazy_names

_WHERE = {
    "agent.control.devices": ("HardwarePort",),
    "agent.control.front": ("RING_SIZE", "STILL_MPS", "describe"),
    "agent.control.loop": ("ControlLoop",),
    "agent.control.scheduler": ("RATE_SHARE", "RATE_WINDOW_S", "TickStats"),
}

if TYPE_CHECKING:
    from agent.control.devices import HardwarePort
    from agent.control.front import RING_SIZE, STILL_MPS, describe
    from agent.control.loop import ControlLoop
    from agent.control.scheduler import RATE_SHARE, RATE_WINDOW_S, TickStats

__getattr__ = lazy_names(__name__, _WHERE)

__all__ = ["RATE_SHARE", "RATE_WINDOW_S", "RING_SIZE", "STILL_MPS", "ControlLoop", "HardwarePort", "TickStats",
           "describe"]
