"""Who drives: per-channel source arbitration (the twist_mux idea) and the velocity watchdog.

Two channels, ``base`` (BaseVelocity, TrackDuty) and ``joints`` (JointVelocity,
and the latched JointPosition / JointTrajectory / Gripper / Reset). Each source
(``artex``, ``sim2bot``, ``robot_msg``) has a priority and a velocity timeout
(``cfg.control.sources``, ``cfg.source_timeout_s``). Every command a source
sends on a channel becomes that source's *claim* on the channel, fresh until
``receipt + timeout(source)``; one claim per (channel, source), the latest wins.

- A velocity claim carries its command. A latched claim carries none: the
  target was applied when it arrived, the claim only keeps lower-priority
  sources off the joints for the timeout.
- The highest-priority fresh claim on a channel wins (equal priorities: the
  newest). A command arriving while a strictly higher-priority source holds a
  fresh claim on its channel is counted as overridden; a velocity command is
  still kept (it drives if it outlives the higher one), a latched one is refused.

The stop latch (docs/safety.md): :meth:`Arbiter.stop` drops every claim. The
stopper drives again with its next command. Every *other* source that was
streaming velocity commands is latched out until it re-engages (its command
after a pause of its timeout, a zero velocity command, its own stop, a reset:
:meth:`Arbiter.re_engage`). While it is latched out its claims are *held at
zero* (a claim without a command, renewed by each refused command,
:meth:`Arbiter.hold`): the tracks stay at zero and lower-priority sources stay
off the channel, so priorities hold after a stop. A source whose velocity command
an e-stop or a failsafe latch refuses is latched out the same way
(:meth:`Arbiter.latch_out`): when the halt ends it re-engages before it drives, and
its claim held at zero keeps lower-priority sources off meanwhile. Who is latched out and the
re-engage rule are :class:`agent.control.stoplatch.StopLatch` (shared with the Sim2Bot rooms' latch);
the arbiter adds the claims held at zero.

Not thread-safe: :class:`agent.control.ControlLoop` calls it under its lock.
Times are seconds on the control loop's monotonic clock.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from agent.config import AgentConfig
from agent.config.control import SOURCES
from agent.control.claims import Claims
from agent.control.stoplatch import Engage, LatchedOut, StopLatch
from agent.commands import Command

log = logging.getLogger(__name__)

BASE = "base"
JOINTS = "joints"
CHANNELS = (BASE, JOINTS)

IDLE, OK, EXPIRED = "idle", "ok", "expired"


@dataclass(frozen=True, slots=True)
class Claim:
    """One source's hold on one channel.

    Attributes:
        source: command source. channel: ``base`` or ``joints``.
        command: the velocity command to execute, or None for a latched claim (and for the
            claim of a source held at zero by the stop latch).
        receipt_s: arrival time, s. deadline_s: fresh while ``now < deadline_s``, s.
    """

    source: str
    channel: str
    command: Command | None
    receipt_s: float
    deadline_s: float

    def fresh(self, now: float) -> bool:
        """True while the claim has not timed out."""
        return now < self.deadline_s


@dataclass(frozen=True, slots=True)
class Selection:
    """Outcome of arbitration on one channel for one tick.

    Attributes:
        channel: ``base`` or ``joints``.
        winner: the claim that drives, or None.
        expired: velocity claims that timed out at this tick (dropped).
        velocity: the velocity command to execute this tick, or None (from ``winner``).
        driver: the source whose velocity command drives this tick, or ``""`` (no winner, or a claim
            without a command: a latched joint target, a source held at zero by the stop latch).
    """

    channel: str
    winner: Claim | None
    expired: tuple[Claim, ...] = ()
    velocity: Command | None = field(init=False)
    driver: str = field(init=False)

    def __post_init__(self) -> None:    # fields, not properties: the tick and the watchdog read them often
        w = self.winner
        object.__setattr__(self, "velocity", w.command if w is not None else None)
        object.__setattr__(self, "driver", w.source if w is not None and w.command is not None else "")


class Arbiter:
    """Per-channel claims of every source; see the module docstring.

    Args:
        priorities: source -> priority (higher wins); unlisted sources have 0.
        timeouts_s: source -> velocity timeout, s.
    """

    def __init__(self, priorities: Mapping[str, int], timeouts_s: Mapping[str, float]) -> None:
        self._priorities = dict(priorities)
        self._timeouts = dict(timeouts_s)
        self._claims = Claims()
        # channel -> (claims version, lo, hi, winner): the winner at any time in [lo, hi) while the version
        # holds (lo: the latest deadline among the channel's claims timed out then; hi: the earliest among
        # the fresh ones). The tick, the scheduler's wait and every command ask; the claims change seldom.
        self._top: dict[str, tuple[int, float, float, Claim | None]] = {}
        self._selected: dict[str, Selection] = {}    # channel -> the last Selection without expired claims
        self._overridden: dict[str, int] = {s: 0 for s in self._timeouts}
        self._overridden_view: tuple[tuple[str, int], ...] | None = None    # overridden() until a count changes
        self._latch = StopLatch(self.timeout_s)

    @classmethod
    def from_config(cls, cfg: AgentConfig) -> Arbiter:
        """Priorities from ``cfg.control.sources`` (0 when unlisted), timeouts from ``cfg.source_timeout_s``."""
        prio = {s: (cfg.control.sources[s].priority if s in cfg.control.sources else 0) for s in SOURCES}
        return cls(prio, {s: cfg.source_timeout_s(s) for s in SOURCES})

    def priority(self, source: str) -> int:
        """Priority of ``source``."""
        return self._priorities.get(source, 0)

    def timeout_s(self, source: str) -> float:
        """Velocity timeout of ``source``, s."""
        return self._timeouts[source]

    # ------------------------------------------------------------------ claims
    def holder(self, channel: str, now: float) -> Claim | None:
        """The fresh claim that drives ``channel`` at ``now``, or None."""
        top = self._top.get(channel)
        claims = self._claims
        if top is not None and top[0] == claims.version and top[1] <= now < top[2]:
            return top[3]       # the same claims, none crossed its deadline: the same winner
        best: Claim | None = None
        lo, hi = -math.inf, math.inf
        for (ch, _), c in claims.items():
            if ch != channel:
                continue
            deadline = c.deadline_s
            if now < deadline:      # fresh (Claim.fresh)
                hi = min(hi, deadline)
                if best is None or self._key(c) > self._key(best):
                    best = c
            else:
                lo = max(lo, deadline)
        self._top[channel] = (claims.version, lo, hi, best)
        return best

    def claim(self, source: str, channel: str) -> Claim | None:
        """``source``'s claim on ``channel`` (fresh or not yet dropped), or None."""
        return self._claims.get((channel, source))

    def _key(self, c: Claim) -> tuple[int, float]:
        return self.priority(c.source), c.receipt_s

    def _above(self, source: str, channel: str, now: float) -> Claim | None:
        """The fresh claim of a strictly higher-priority source on ``channel``, or None."""
        top = self.holder(channel, now)
        if top is not None and top.source != source and self.priority(top.source) > self.priority(source):
            return top
        return None

    def offer(self, source: str, channel: str, command: Command, now: float) -> Claim | None:
        """Store a velocity command as ``source``'s claim on ``channel`` (latest wins).

        Returns:
            The higher-priority claim overriding it (the command is kept and
            counted as overridden), or None when it drives.
        """
        above = self._above(source, channel, now)
        if above is not None:
            self._count_overridden(source)
        self._claims[(channel, source)] = Claim(source, channel, command, now, now + self.timeout_s(source))
        return above

    def latch(self, source: str, channel: str, now: float) -> Claim | None:
        """Claim ``channel`` for a latched command from ``source``.

        On success the velocity claims of ``source`` and of every lower- or
        equal-priority source on the channel are dropped (they would fight the
        new target) and None is returned.

        Returns:
            The higher-priority claim that refuses it (counted as overridden,
            nothing else changes), or None when accepted.
        """
        above = self._above(source, channel, now)
        if above is not None:
            self._count_overridden(source)
            return above
        prio = self.priority(source)
        for key in [k for k, c in self._claims.items() if k[0] == channel and self.priority(c.source) <= prio]:
            del self._claims[key]
        self._claims[(channel, source)] = Claim(source, channel, None, now, now + self.timeout_s(source))
        return None

    def would_refuse(self, source: str, channel: str, now: float) -> Claim | None:
        """The higher-priority claim that :meth:`latch` would refuse ``source`` for, without counting."""
        return self._above(source, channel, now)

    def next_expiry(self, now: float) -> float | None:
        """Earliest deadline among the velocity claims driving a channel at ``now``, s, or None."""
        out = None
        for channel in CHANNELS:
            top = self.holder(channel, now)
            if top is not None and top.command is not None:
                out = top.deadline_s if out is None else min(out, top.deadline_s)
        return out

    def select(self, channel: str, now: float) -> Selection:
        """Drop timed-out claims on ``channel`` and pick its driver for this tick."""
        claims = self._claims
        if not claims:        # nobody claims anything (a standing tank): one object per channel
            return _NOBODY[channel]
        top = self._top.get(channel)
        if top is not None and top[0] == claims.version and top[1] == -math.inf and now < top[2]:
            winner = top[3]     # the holder() found at [-inf, hi): no timed-out claim on the channel to drop
        else:
            expired = []
            for key in [k for k, c in claims.items() if k[0] == channel and not c.fresh(now)]:
                claim = claims.pop(key)
                if claim.command is not None:
                    expired.append(claim)
            if expired:
                return Selection(channel, self.holder(channel, now), tuple(expired))
            winner = self.holder(channel, now)
        sel = self._selected.get(channel)
        if sel is None or sel.winner is not winner:     # the same winner: the same (immutable) selection
            sel = self._selected[channel] = Selection(channel, winner)
        return sel

    def drop(self, sources: Iterable[str] | None = None, channels: Iterable[str] = CHANNELS) -> list[Claim]:
        """Remove the claims of ``sources`` (all when None) on ``channels``; returns them."""
        srcs = None if sources is None else set(sources)
        chans = set(channels)
        keys = [k for k in self._claims if k[0] in chans and (srcs is None or k[1] in srcs)]
        return [self._claims.pop(k) for k in keys]

    # ------------------------------------------------------------------ stop latch
    def stop(self, stopper: str, now: float) -> list[Claim]:
        """A stop from ``stopper`` at ``now``: drop every claim; returns the dropped ones.

        ``stopper`` is no longer latched out. Every other source with a fresh velocity
        claim (or a fresh claim held at zero) is latched out, its claims held at zero
        until their deadlines (each refused command renews them, :meth:`hold`).
        """
        dropped = self.drop()
        self._latch.re_engage(stopper)
        for c in dropped:
            if c.source != stopper and c.fresh(now) and (c.command is not None or c.source in self._latch):
                self._latch.latch_out(c.source, stopper, now)
                self._claims[(c.channel, c.source)] = Claim(c.source, c.channel, None, c.receipt_s, c.deadline_s)
        return dropped

    def latch_out(self, source: str, channel: str, by: str, halt: str, now: float) -> None:
        """A velocity command of ``source`` on ``channel`` was refused at ``now`` by a halt (``halt``
        in words, set by ``by``):
        ``source`` is latched out as by a stop, so it re-engages before it drives once the halt
        ends, and its claim is held at zero (kept through the halt, :meth:`halt`), so lower-priority
        sources stay off when it ends."""
        self._latch.latch_out(source, by, now, halt)
        self._hold(source, channel, now)

    def latch_out_streaming(self, by: str, halt: str, now: float) -> list[str]:
        """The robot itself stopped the tracks (``halt`` in words, set by ``by``: the motor controller
        stopped answering): every source streaming a velocity command (a claim fresh at ``now``) is
        latched out as by a halt (:meth:`latch_out`), so it re-engages as after a stop before it
        drives again; a key held through the fault does not drive off when it ends. Returns the
        sources latched out, in SOURCES order."""
        return self._latch_out_claims(by, halt, now, [c for c in self._claims.values()
                                                      if c.command is not None and c.fresh(now)])

    def latch_out_stalled(self, since: float, now: float) -> list[str]:
        """No control tick ran between ``since`` and ``now`` (the process was frozen or starved):
        every source that was streaming at ``since`` and whose timeout the stall outlasted is
        latched out (by ``robot``), so the commands it sent before the stall, or that were queued
        during it and read only now, do not drive once ticks resume. Returns those sources."""
        stalled = now - since
        return self._latch_out_claims("robot", f"a stall of the agent ({stalled:.2f} s without a control tick)",
                                      now, [c for c in self._claims.values() if c.command is not None
                                            and c.receipt_s <= since and c.fresh(since)
                                            and stalled > self.timeout_s(c.source)])

    def _latch_out_claims(self, by: str, halt: str, now: float, claims: list[Claim]) -> list[str]:
        for c in claims:
            self._latch.latch_out(c.source, by, now, halt)
            self._hold(c.source, c.channel, now)
        return sorted({c.source for c in claims}, key=_order)

    def halt(self) -> None:
        """A halt holds this tick: drop every claim except the zero-held claims of latched-out
        sources (:meth:`latch_out`), which keep priorities when the halt ends."""
        for key in [k for k, c in self._claims.items() if c.command is not None or k[1] not in self._latch]:
            del self._claims[key]

    def latched_out(self, source: str) -> LatchedOut | None:
        """Why ``source`` is latched out by a stop, or None when it is not."""
        return self._latch.latched_out(source)

    def hold(self, source: str, channel: str, now: float) -> None:
        """A command of latched-out ``source`` on ``channel`` was refused at ``now``: its claim on
        the channel is held at zero for its timeout, and its pause starts again."""
        self._latch.renew(source, now)
        self._hold(source, channel, now)

    def velocity_latched(self, source: str, channel: str, command: Command, now: float) -> Engage | None:
        """A velocity command of ``source`` on ``channel`` at ``now``, against the stop latch
        (:meth:`agent.control.stoplatch.StopLatch.velocity`): None when ``source`` is not latched out;
        else whether it re-engaged now (a pause, a zero) or is refused. A refused command's claim on
        the channel is held at zero for its timeout and its pause starts again (as :meth:`hold`)."""
        engage = self._latch.velocity(source, command, now)
        if engage is not None and engage.refused:
            self._hold(source, channel, now)
        return engage

    def _hold(self, source: str, channel: str, now: float) -> None:
        self._claims[(channel, source)] = Claim(source, channel, None, now, now + self.timeout_s(source))

    def re_engage(self, source: str) -> LatchedOut | None:
        """``source`` re-engaged: it is no longer latched out (what it sends next is arbitrated as
        usual; a claim still held at zero ends when it sends on that channel or at its deadline).
        Returns the latch it was in, or None."""
        return self._latch.re_engage(source)

    def overridden(self) -> tuple[tuple[str, int], ...]:
        """(source, commands overridden so far) for every known source, in SOURCES order (the same
        tuple until a count changes: the tick asks every time)."""
        if self._overridden_view is None:
            self._overridden_view = tuple(sorted(self._overridden.items(), key=lambda kv: _order(kv[0])))
        return self._overridden_view

    def _count_overridden(self, source: str) -> None:
        self._overridden[source] = self._overridden.get(source, 0) + 1
        self._overridden_view = None


#: The selection of a channel nobody claims.
_NOBODY = {channel: Selection(channel, None) for channel in CHANNELS}


def _order(source: str) -> tuple[int, str]:
    return (SOURCES.index(source) if source in SOURCES else len(SOURCES), source)


class Watchdog:
    """Velocity-command freshness across both channels: ``idle`` / ``ok`` / ``expired``.

    ``expired`` is entered when the velocity command driving a channel times out
    and no other fresh velocity command takes over; it is left by the next fresh
    velocity command (``ok``) or by :meth:`reset` (stop, release: ``idle``). Each
    firing and each resumption is logged once.
    """

    def __init__(self) -> None:
        self.state = IDLE
        self._driving: dict[str, bool] = {c: False for c in CHANNELS}

    def update(self, selections: Iterable[Selection]) -> str:
        """Fold one tick's selections in; returns the new state."""
        active = False
        fired = False
        for sel in selections:
            now_driving = sel.velocity is not None
            if self._driving[sel.channel] and not now_driving and sel.expired:
                fired = True
                c = sel.expired[0]
                what = "tracks to zero" if sel.channel == BASE else "joints hold"
                log.warning("watchdog: %s command from %s older than %.3f s; %s",
                            sel.channel, c.source, c.deadline_s - c.receipt_s, what)
            self._driving[sel.channel] = now_driving
            active = active or now_driving
        if active:
            if self.state == EXPIRED:
                log.info("watchdog: fresh velocity command, motion resumes")
            self.state = OK
        elif fired:
            self.state = EXPIRED
        elif self.state == OK:
            self.state = IDLE
        return self.state

    def reset(self) -> None:
        """Velocity commands were dropped on purpose (stop, release, reset): back to ``idle``."""
        self.state = IDLE
        self._driving = {c: False for c in CHANNELS}
