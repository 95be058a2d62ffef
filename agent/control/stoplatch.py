"""The stop latch: who is latched out by a stop (or a halt) and when they re-engage (docs/safety.md).

After a stop, the stopper drives with its next command; every *other* sender that was
streaming velocity commands when the stop came is latched out until it re-engages: a
velocity command after a pause of its timeout since the stop (or since its last refused
command), an explicit zero velocity command (:func:`is_zero`), its own stop, or a reset.

One implementation, :class:`StopLatch`, serves both places that keep this latch:

- the control loop's arbiter (agent.control.arbitration.Arbiter), between command sources;
  it also holds the refused source's claim at zero, so the tank stays still;
- :class:`SenderLatch`, between the senders behind one source name that an adapter can tell
  apart (Sim2Bot rooms, agent.adapters.sim2bot); refused commands hold nothing there.

Not thread-safe: the arbiter is used under the control loop's lock, a SenderLatch on its
adapter's event loop. Times are seconds on a monotonic clock.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import NamedTuple

from agent.commands import BaseVelocity, Command, JointVelocity, TrackDuty

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class LatchedOut:
    """A sender latched out by a stop or a halt (see the module docstring).

    Attributes:
        stopper: the sender whose stop latched it out, or the setter of the halt (``console``,
            ``cli``, ``input``, ``robot``).
        last_s: the stop, or its last refused command since, s; it re-engages by a pause
            of its timeout after this.
        halt: for a halt, what it was in words (``the emergency stop set by console``); "" for a stop.
    """

    stopper: str
    last_s: float
    halt: str = ""

    @property
    def cause(self) -> str:
        """What latched it out, as a refusal says it: ``artex sent stop``, ``the emergency stop set
        by console was in force``."""
        return f"{self.halt} was in force" if self.halt else f"{self.stopper} sent stop"

    @property
    def after(self) -> str:
        """The same for the re-engage log line: ``the stop from artex``, ``the tilt failsafe``."""
        return self.halt or f"the stop from {self.stopper}"


def is_zero(command: Command) -> bool:
    """True for an explicit zero velocity command (BaseVelocity(0, 0), TrackDuty(0, 0), all-zero
    JointVelocity): the way a source latched out by a stop says it re-engaged."""
    if isinstance(command, BaseVelocity):
        return command.vx == 0.0 and command.omega == 0.0
    if isinstance(command, TrackDuty):
        return command.left == 0.0 and command.right == 0.0
    return isinstance(command, JointVelocity) and all(q == 0.0 for q in command.qd)


class Engage(NamedTuple):
    """What a velocity command from a latched-out sender did (:meth:`StopLatch.velocity`).

    Attributes:
        latched: the latch it was in (renewed when refused).
        how: how it re-engaged (``it sent a zero velocity command``, ``its commands paused for
            0.50 s``), or "" when it was refused.
    """

    latched: LatchedOut
    how: str

    @property
    def refused(self) -> bool:
        """True when the command is refused (the sender stays latched out)."""
        return not self.how


class StopLatch:
    """The senders latched out now, and the re-engage rule (see the module docstring).

    Args:
        timeout_s: sender -> its velocity timeout, s (the pause that re-engages it).
    """

    def __init__(self, timeout_s: Callable[[str], float]) -> None:
        self._timeout = timeout_s
        self._latched: dict[str, LatchedOut] = {}

    def __contains__(self, sender: object) -> bool:
        return sender in self._latched

    def latched_out(self, sender: str) -> LatchedOut | None:
        """Why ``sender`` is latched out, or None when it is not."""
        return self._latched.get(sender)

    def stop(self, stopper: str, streaming: Iterable[str], now: float) -> list[str]:
        """A stop from ``stopper`` at ``now``: it re-engages; every other sender in ``streaming``
        (those streaming velocity commands when the stop came) is latched out. Returns those, in order."""
        self._latched.pop(stopper, None)
        out = list(dict.fromkeys(s for s in streaming if s != stopper))
        for sender in out:
            self._latched[sender] = LatchedOut(stopper, now)
        return out

    def latch_out(self, sender: str, by: str, now: float, halt: str = "") -> None:
        """Latch ``sender`` out at ``now``: by the stop of ``by``, or by a halt (``halt`` in words,
        set by ``by``) that refused a velocity command of ``sender``."""
        self._latched[sender] = LatchedOut(by, now, halt)

    def renew(self, sender: str, now: float) -> LatchedOut:
        """A command of latched-out ``sender`` was refused at ``now``: its pause starts again. Returns the latch."""
        latched = self._latched[sender]
        self._latched[sender] = renewed = LatchedOut(latched.stopper, now, latched.halt)
        return renewed

    def re_engage(self, sender: str) -> LatchedOut | None:
        """``sender`` re-engaged (its own stop, a reset): no longer latched out. Returns the latch, or None."""
        return self._latched.pop(sender, None)

    def velocity(self, sender: str, command: Command, now: float) -> Engage | None:
        """A velocity command from ``sender`` at ``now``, against the latch.

        Returns:
            None when ``sender`` is not latched out. Otherwise an :class:`Engage`: it re-engages
            now (a pause of its timeout since the stop or its last refused command, or an explicit
            zero; ``how`` says which) and is no longer latched out, or it is refused (its pause
            starts again at ``now``). The caller logs and refuses.
        """
        latched = self._latched.get(sender)
        if latched is None:
            return None
        timeout = self._timeout(sender)
        if now - latched.last_s >= timeout:
            how = f"its commands paused for {timeout:.2f} s"
        elif is_zero(command):
            how = "it sent a zero velocity command"
        else:
            return Engage(self.renew(sender, now), "")
        del self._latched[sender]
        return Engage(latched, how)


class SenderLatch:
    """The stop latch among the senders behind one source name that its adapter can tell apart
    (Sim2Bot rooms: every room is the source ``sim2bot``), docs/safety.md.

    The control loop treats every sender of the stopping source as the stopper. This keeps a
    *different* sender of it that was streaming velocity commands when the stop came from
    resuming by streaming on: its velocity commands are refused (the adapter does not submit
    them) until it re-engages as a source does (a pause of ``timeout_s``, a zero velocity
    command, its own stop, a reset). Its refused commands hold no claim: the stopper may drive.
    Not thread-safe (the adapter's event loop).

    Args:
        timeout_s: the source's velocity timeout, s.
    """

    def __init__(self, timeout_s: float) -> None:
        self._timeout = timeout_s
        self._streamed: dict[str, float] = {}         # sender -> its last velocity command, s
        self._latch = StopLatch(lambda _sender: timeout_s)

    def stop(self, sender: str, now: float) -> list[str]:
        """A stop from ``sender`` at ``now``; returns the other senders it latched out."""
        return self._latch.stop(sender, [s for s, t in self._streamed.items() if now - t < self._timeout], now)

    def reset(self, sender: str) -> None:
        """``sender`` sent a reset: it re-engages."""
        self._latch.re_engage(sender)

    def velocity(self, sender: str, command: Command, now: float) -> str | None:
        """A velocity command from ``sender`` at ``now``: None to submit it, else why it is refused."""
        self._streamed[sender] = now
        engage = self._latch.velocity(sender, command, now)
        if engage is None:
            return None
        if not engage.refused:
            log.info("%s re-engaged after %s: %s", sender, engage.latched.after, engage.how)
            return None
        return (f"{sender} was streaming when {engage.latched.cause}; its velocity commands are refused "
                f"until it re-engages: send a zero velocity command, a stop, a reset, or nothing for "
                f"{self._timeout:.2f} s")
