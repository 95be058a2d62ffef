"""The control loop at rest: when it may tick slower than ``rate_hz``, and how slowly.

A standing tank has nothing for the control loop to change: every command is zero, the
tracks are still and the duty is zero. The loop then ticks every :attr:`Rest.period_s`
instead of every ``1 / rate_hz`` (docs/safety.md, "The control loop at rest", gives the
reasoning and the reaction times). The period is the motor line's own at rest
(agent.devices.motorio.rest_period_s: its feedback sets and its zero's rewrite come that
often then), so a rest tick never waits on older readings than the devices give.

The loop rests while all of these have held for :data:`REST_AFTER_S` (:func:`quiet`, checked
after every tick's readings):

- no velocity command is fresh on either channel (nothing driving, no watchdog deadline);
- the tracks are commanded zero (the ramp is done) and the duty is zero; the joints are not moving;
- the motor line is at rest itself (agent/devices/motorio.py: the zero acknowledged and the
  tracks read still and healthy for 1 s): a tank without a motor controller never rests;
- no device fault is reported and the last duty write was acknowledged;
- no failsafe is timing a condition (agent.control.failsafes.Failsafes.pending): a condition
  seen at a rest tick brings the full rate back at once, so its own time is checked every tick.

Anything that matters wakes a tick at once (agent.control.scheduler.Scheduler.wake or ``rouse``):
a velocity command, a stop, the e-stop and its release, the release of a driving source, a joint
or gripper command, the end of the motor line's rest (a track pushed, a current, a status bit, a
failed write). The tick that sees it ends the rest, so the next slot is one ``1 / rate_hz`` after it.
"""

from __future__ import annotations

from agent.control.state import ControlState
from agent.control.tick import Plan, Readings

#: How long the tank must have been :func:`quiet` before the loop rests, s (the motor line's own
#: ``REST_AFTER_S``: a stop's coast-down and what follows it run at the full rate).
REST_AFTER_S = 1.0


def quiet(state: ControlState, plan: Plan, readings: Readings) -> bool:
    """Nothing for the loop to change at this tick (see the module docstring). Caller holds the loop's lock."""
    return (readings.resting and not readings.faults and state.motor_ok
            and plan.base.velocity is None and plan.duty == (0.0, 0.0) and state.cmd == (0.0, 0.0)
            and not state.joints.moving and state.next_deadline(plan.now) is None
            and not state.failsafes.pending())


class Rest:
    """Whether the loop rests, from one :func:`quiet` verdict per tick.

    Args:
        period_s: the tick period at rest, s; None (or not longer than ``full_s``): the loop never rests.
        full_s: the loop's full-rate period, s (``1 / rate_hz``).
        after_s: how long the tank must be quiet first, s.

    Attributes:
        resting: the last :meth:`update` found the loop at rest.
        rests: rests begun so far.
    """

    def __init__(self, period_s: float | None, full_s: float, after_s: float = REST_AFTER_S) -> None:
        self.period_s = period_s if period_s is not None and period_s > full_s else None
        self._after_s = after_s
        self._since: float | None = None
        self.resting = False
        self.rests = 0

    def update(self, now: float, still: bool) -> float | None:
        """Fold in this tick's verdict at ``now``, s; returns the period to tick at from now on, s
        (None: the full rate)."""
        if self.period_s is None or not still:
            self._since = None
            self.resting = False
            return None
        if self._since is None:
            self._since = now
        resting = now - self._since >= self._after_s
        self.rests += resting and not self.resting
        self.resting = resting
        return self.period_s if resting else None
