"""robot_msg: which received messages apply, and in which order.

:class:`LatestWins` keeps the newest message of each :func:`intent` in one drained batch (every stop
kept); :class:`StopOrder` keeps a stop from the command socket ahead of the motion its sender
published before it on the action socket. Pure, no sockets: agent/adapters/robotmsg.py runs them on
what robotmsg_inbound.py decoded.
"""

from __future__ import annotations

from collections.abc import Mapping

import robot_msg as rm

from agent.adapters.robotmsg_inbound import Rejected, Translation
from agent.commands import BaseVelocity

#: A RobotAction that moves something, received this soon after a stop from the command socket,
#: may have been sent before that stop (ZeroMQ orders each socket, not the two): refused, s.
STOP_ORDER_GUARD_S = 0.1


def stops(message: object, modes: Mapping[int, str]) -> bool:
    """True for a ControllerCommand whose ``ctrl_mode`` stops: never dropped by latest-wins."""
    return (isinstance(message, rm.ControllerCommand) and message.ctrl_mode is not None
            and modes.get(message.ctrl_mode) == "stop")


def _present(obj: object) -> tuple[str, ...]:
    """Names of the fields present (not None) on a generated robot_msg dataclass, recursively."""
    if obj is None or not hasattr(obj, "__dataclass_fields__"):
        return ()
    names: list[str] = []
    for name in obj.__dataclass_fields__:
        value = getattr(obj, name)
        if name != "metadata" and value is not None:
            inner = _present(value)
            names.extend(f"{name}.{n}" for n in inner) if inner else names.append(name)
    return tuple(names)


def intent(message: object) -> tuple[type, tuple[str, ...]]:
    """Latest-wins key: the message type and which fields it sets.

    A stream of ``u_rt`` actions shares one key (only the newest applies); a ``q_traj``
    action and a ``u_rt`` action have different keys, so one never drops the other. A
    ``u_rt`` of zeros is a kind of its own: it is how a controller latched out by another
    source's stop re-engages (docs/safety.md), so the drive that follows it in the same
    batch does not supersede it.
    """
    fields = _present(message)
    if isinstance(message, rm.RobotAction) and message.real_time_action is not None:
        u_rt = message.real_time_action.u_rt
        if u_rt and all(v == 0.0 for v in u_rt):
            fields += ("u_rt=0",)
    return type(message), fields


class LatestWins:
    """Latest-wins over one drained batch, offered newest first.

    Keeps the newest message per :func:`intent` and every stop; everything else
    offered is superseded. Offering newest first lets the caller stop decoding
    older frames once it has what it needs.

    Args:
        modes: ``ctrl_modes`` (to recognise stops).
    """

    def __init__(self, modes: Mapping[int, str]) -> None:
        self._modes = modes
        self._kept: dict[tuple[type, tuple[str, ...]], tuple[int, object]] = {}
        self._stops: list[tuple[int, object]] = []
        self.superseded = 0

    def offer(self, index: int, message: object) -> None:
        """Offer the message that arrived at position ``index`` (offer in decreasing ``index``)."""
        key = intent(message)
        if key not in self._kept:
            self._kept[key] = (index, message)
        elif stops(message, self._modes):
            self._stops.append((index, message))
        else:
            self.superseded += 1

    def kept(self) -> list[object]:
        """The messages to apply, in arrival order."""
        return [m for _, m in sorted([*self._kept.values(), *self._stops], key=lambda pair: pair[0])]


# --------------------------------------------------------------------------- two sockets, one stop


class StopOrder:
    """Keeps a robot_msg stop ahead of the motion its sender published before it.

    The stop (ControllerCommand, command socket) and the motion (RobotAction, action socket)
    travel on two connections that ZeroMQ does not order against each other, so a ``u_rt`` sent
    just before a stop can arrive after it, and the stopper's next motion command drives
    (docs/safety.md, "One source name, several senders"). After a stop, a RobotAction that moves
    something is refused as ``before_stop`` when its ``metadata.send_time`` is not after the
    stop's (both stamped on the same clock), or, without comparable stamps, when it arrives
    within ``guard_s`` of the stop. A zero ``u_rt`` (the re-engage) always passes.

    Args:
        guard_s: window after a stop without comparable stamps, s (``STOP_ORDER_GUARD_S``).
    """

    def __init__(self, guard_s: float = STOP_ORDER_GUARD_S) -> None:
        self._guard_s = guard_s
        self._at: float | None = None
        self._sent: rm.Timestamp | None = None

    def stopped(self, message: object, now: float) -> None:
        """A stop from ``message`` (a ControllerCommand) was applied at ``now`` (monotonic, s)."""
        self._at = now
        self._sent = _send_time(message)

    def check(self, message: object, translation: Translation, now: float) -> None:
        """Raise ``Rejected("before_stop")`` for a RobotAction that may predate the last stop."""
        if self._at is None or not isinstance(message, rm.RobotAction) or not _moves(translation):
            return
        sent, stop = _send_time(message), self._sent
        if sent is not None and stop is not None and (sent.clock_kind, sent.clock_id) == \
                (stop.clock_kind, stop.clock_id):
            if sent.seconds <= stop.seconds:
                raise Rejected("before_stop", f"RobotAction sent at {sent.seconds:.6f} s, not after the stop "
                                              f"sent at {stop.seconds:.6f} s ({sent.clock_kind} clock)")
            return
        age = now - self._at
        if age < self._guard_s:
            raise Rejected("before_stop", f"RobotAction {age * 1e3:.0f} ms after a stop, within "
                                          f"{self._guard_s * 1e3:.0f} ms and without a metadata.send_time "
                                          "to order it: it may have been sent before the stop")


def _send_time(message: object) -> rm.Timestamp | None:
    metadata = getattr(message, "metadata", None)
    return metadata.send_time if metadata is not None else None


def _moves(translation: Translation) -> bool:
    return any(not (isinstance(c, BaseVelocity) and c.vx == 0.0 and c.omega == 0.0) for c in translation.commands)
