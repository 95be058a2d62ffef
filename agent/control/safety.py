"""Halts: the emergency stop and the failsafe latches, and the failsafe speed cap (docs/safety.md).

:class:`SafetyLatches` lives in ``ControlState.safety`` and is used under the control loop's
lock, by the state's transitions (agent.control.state: ``admit`` before every motion command,
``estop`` / ``release_estop``), by the failsafes (``trip``, ``condition_cleared``,
``set_speed_cap``) and by the tick (``latched``:
claims dropped and zero duty while a halt holds; ``cap``: the speed cap in the kinematics limit;
``state`` for the snapshot). No clock reads and no I/O: times are arguments.

- The e-stop is set by ``console``, ``cli`` or ``input`` (:data:`ESTOP_SETTERS`) and ends only by
  ``release_estop``; a failsafe latch (:data:`FAILSAFES`) is set by ``trip`` and ends at the first
  motion command admitted after ``condition_cleared``, never by itself.
- While any halt holds every motion command is refused (``CommandDeclined``, reason ``halted``)
  naming the halt, who set it and since when; ``Stop`` is never refused.
- A halt ending moves nothing: claims were dropped when it began. A source that was still sending
  motion commands into the halt is latched out as by a stop (``ControlState.offer_velocity``,
  ``agent.control.arbitration.Arbiter.latch_out``, worded with :meth:`SafetyLatches.cause`): it
  re-engages before it drives (a pause of its timeout, an explicit zero velocity, a ``Stop`` or a
  ``Reset``), and its claim held at zero keeps lower-priority sources off meanwhile. So a hub
  streaming ``forward`` through an e-stop does not drive off the moment the operator releases it,
  nor past an operator whose key was held through it.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable

from agent.errors import CommandDeclined, CommandRejected
from agent.commands import Command
from agent.model import Halt, SafetyState
from agent.support.ratelimit import safe

log = logging.getLogger(__name__)

#: Who may set and release the e-stop: the console's STOP, ``robot-agent estop`` and the e-stop input.
ESTOP_SETTERS = ("console", "cli", "input")
#: Failsafe latch kinds (``trip``).
FAILSAFES = ("battery", "tilt", "stall")
#: The setter every failsafe latch names.
ROBOT = "robot"
#: Longest reason text kept, characters (longer ones are clipped).
MAX_REASON_CHARS = 200


def describe_halt(halt: Halt) -> str:
    """One line for a halt: ``emergency stop set by console since 2026-12-01 18:07:45 UTC: <reason>``."""
    return halt.describe()


def _reason_text(reason: object, what: str) -> str:
    if not isinstance(reason, str):
        raise CommandRejected(f"{what} reason must be a string, got {type(reason).__name__}")
    return safe(reason.strip(), MAX_REASON_CHARS)


class SafetyLatches:
    """The e-stop, the failsafe latches and the speed cap; see the module docstring.

    """

    def __init__(self) -> None:
        self._estop: Halt | None = None
        self._failsafes: dict[str, Halt] = {}
        self._cap: float | None = None
        self._cap_reason = ""
        self._state = SafetyState()
        self._holds: dict[str, Callable[[], str | None]] = {}   # setter -> why it still holds (the input)

    def hold_while(self, by: str, why: Callable[[], str | None]) -> None:
        """Let setter ``by`` (the e-stop input) keep the e-stop while ``why()`` gives a reason (its circuit
        open): a release by anyone else is then refused with that reason. ``why`` runs under the loop's
        lock and must not block."""
        self._check_setter(by, "hold")
        self._holds[by] = why

    # ------------------------------------------------------------------ e-stop
    def estop(self, by: str, reason: str, now_unix_s: float) -> bool:
        """Set the e-stop (``by``: console, cli or input). True when newly set; False when it already held
        (the first setter and time are kept).

        Raises:
            CommandRejected: ``by`` may not set the e-stop, or ``reason`` is not a string.
        """
        self._check_setter(by, "set")
        text = _reason_text(reason, "estop")
        if self._estop is not None:
            log.info("emergency stop from %s: already set by %s", by, self._estop.by)
            return False
        self._estop = Halt("estop", text or f"emergency stop from {by}", by, float(now_unix_s))
        self._update()
        log.warning("EMERGENCY STOP set by %s: %s; every motion command refused until released",
                    by, self._estop.reason)
        return True

    def restore_estop(self, halt: Halt) -> bool:
        """Put back an e-stop kept across a restart (agent.ops.estopstore), its setter and time unchanged.
        True when set now; False when an e-stop already holds."""
        if halt.kind != "estop":
            raise CommandRejected(f"restore_estop: a {safe(halt.kind, 20)} halt is not an e-stop")
        if self._estop is not None:
            return False
        self._estop = Halt("estop", halt.reason, halt.by, halt.since_unix_s)
        self._update()
        log.warning("EMERGENCY STOP restored after a restart: %s; every motion command refused until released",
                    describe_halt(self._estop))
        return True

    def release_estop(self, by: str) -> Halt:
        """Release the e-stop (``by``: console, cli or input); returns the halt released. Moves nothing.

        Raises:
            CommandRejected: ``by`` may not release the e-stop.
            CommandDeclined: no e-stop is set (reason ``no_estop``); another setter still holds it
                (reason ``held``: the e-stop input's circuit is open, see :meth:`hold_while`).
        """
        self._check_setter(by, "release")
        halt = self._estop
        if halt is None:
            raise CommandDeclined("release_estop: no emergency stop is set", source=by, reason="no_estop")
        for holder, why in self._holds.items():
            reason = why() if holder != by else None
            if reason:
                raise CommandDeclined(f"release_estop: the e-stop {holder} still holds it: {reason}",
                                      source=by, reason="held")
        self._estop = None
        self._update()
        log.warning("emergency stop released by %s (it was %s); nothing moves until a fresh motion command",
                    by, describe_halt(halt))
        return halt

    @staticmethod
    def _check_setter(by: object, what: str) -> None:
        if not isinstance(by, str) or by not in ESTOP_SETTERS:
            raise CommandRejected(f"emergency stop: {safe(by, 40)} may not {what} it; "
                                  f"allowed: {', '.join(ESTOP_SETTERS)}", reason="not_allowed")

    # ------------------------------------------------------------------ failsafes
    def trip(self, kind: str, reason: str, now_unix_s: float) -> bool:
        """Set failsafe latch ``kind`` (battery, tilt, stall); True when newly set (logged once at WARNING).

        Idempotent while set and not cleared. Tripped again after ``condition_cleared`` but before the
        latch ended, it is in force again (cleared False, same since, the new reason).

        Raises:
            CommandRejected: unknown kind, or ``reason`` not a string.
        """
        if kind not in FAILSAFES:
            raise CommandRejected(f"unknown failsafe {safe(kind, 40)}; known: {', '.join(FAILSAFES)}")
        text = _reason_text(reason, kind)
        old = self._failsafes.get(kind)
        if old is not None and not old.cleared:
            return False
        since = old.since_unix_s if old is not None else float(now_unix_s)
        self._failsafes[kind] = Halt(kind, text, ROBOT, since)
        self._update()
        if old is None:
            log.warning("FAILSAFE %s: %s; tracks to zero, motion refused until it clears and a fresh "
                        "command arrives", kind, text)
        else:
            log.warning("FAILSAFE %s: in force again before it ended: %s", kind, text)
        return True

    def condition_cleared(self, kind: str) -> bool:
        """The condition of failsafe ``kind`` is gone: its latch ends with the next admitted motion command.
        True when a set latch became cleared; False when not set or already cleared."""
        halt = self._failsafes.get(kind)
        if halt is None or halt.cleared:
            return False
        self._failsafes[kind] = Halt(halt.kind, halt.reason, halt.by, halt.since_unix_s, cleared=True)
        self._update()
        log.info("failsafe %s: condition cleared; the latch ends with the next motion command", kind)
        return True

    def set_speed_cap(self, mps: float | None, reason: str = "") -> None:
        """A failsafe's track speed cap, m/s (None: no cap), applied from the next tick.

        Raises:
            CommandRejected: not None and not a positive finite number; ``reason`` not a string.
        """
        if mps is not None:
            if isinstance(mps, bool) or not isinstance(mps, (int, float)) or not math.isfinite(mps) or mps <= 0:
                raise CommandRejected(f"speed cap must be a positive finite number of m/s or None, got {mps!r}")
            mps = float(mps)
        text = _reason_text(reason, "speed cap") if mps is not None else ""
        if mps == self._cap and text == self._cap_reason:
            return
        self._cap, self._cap_reason = mps, text
        self._update()
        if mps is None:
            log.info("speed cap lifted")
        else:
            log.warning("speed cap %.3f m/s: %s", mps, text)

    def cap(self, limit_mps: float) -> float:
        """``limit_mps`` lowered to the speed cap in force, m/s."""
        return limit_mps if self._cap is None else min(limit_mps, self._cap)

    # ------------------------------------------------------------------ the transitions
    def refusal(self, source: str) -> str | None:
        """Why a motion command from ``source`` is refused now by a halt in force, or None.

        A failsafe latch whose condition cleared refuses nothing: the command that is admitted ends it.
        """
        if self._estop is not None:
            return (f"{describe_halt(self._estop)}; every motion command is refused until it is released "
                    "(console release, robot-agent estop --release, or the e-stop input closing)")
        for halt in self._failsafes.values():
            if not halt.cleared:
                return f"{describe_halt(halt)}; motion is refused until the condition clears"
        return None

    def admit(self, source: str, command: Command) -> None:
        """:meth:`check`, then :meth:`admitted`: a latched motion command (joint position,
        trajectory, gripper, reset) from ``source``. Caller holds the loop's lock.

        Raises:
            CommandDeclined: reason ``halted``.
        """
        self.check(source, command)
        self.admitted(source, command)

    def check(self, source: str, command: Command) -> None:
        """Refuse a motion command while a halt holds.

        Raises:
            CommandDeclined: reason ``halted``, naming the halt, its setter and since when.
        """
        why = self.refusal(source)
        if why is not None:
            raise CommandDeclined(f"{type(command).__name__} refused: {why}", source=source, reason="halted")

    def admitted(self, source: str, command: Command) -> None:
        """A motion command from ``source`` was accepted: it ends the cleared failsafe latches."""
        ended = [h for h in self._failsafes.values() if h.cleared]
        if ended:
            for halt in ended:
                del self._failsafes[halt.kind]
            self._update()
            log.info("failsafe latch ended by a fresh %s from %s: %s", type(command).__name__, source,
                     ", ".join(h.kind for h in ended))

    def setter(self) -> str:
        """Who set the halt in force (the e-stop's setter, or ``robot`` for a failsafe; "" for none)."""
        if self._estop is not None:
            return self._estop.by
        return ROBOT if any(not h.cleared for h in self._failsafes.values()) else ""

    def cause(self) -> str:
        """The halt in force in a few words, for a refusal: ``the emergency stop set by console``,
        ``the tilt failsafe`` ("" when none holds)."""
        if self._estop is not None:
            return f"the emergency stop set by {self._estop.by}"
        return " and ".join(f"the {h.kind} failsafe" for h in self._failsafes.values() if not h.cleared)

    # ------------------------------------------------------------------ the tick
    def latched(self) -> bool:
        """A halt holds (cleared failsafe latches included): base claims dropped, tracks at zero."""
        return self._estop is not None or bool(self._failsafes)

    def state(self) -> SafetyState:
        """The halts (e-stop first, then failsafes in FAILSAFES order) and the speed cap, for the snapshot."""
        return self._state

    def _update(self) -> None:
        halts = ((self._estop,) if self._estop is not None else ()) + tuple(
            self._failsafes[k] for k in FAILSAFES if k in self._failsafes)
        self._state = SafetyState(halts, self._cap, self._cap_reason)
