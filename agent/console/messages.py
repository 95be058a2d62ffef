"""Console page -> agent messages (pure translation, no I/O).

The page sends JSON text objects over its WebSocket:

=============================================== ==========================================
message                                         result
=============================================== ==========================================
``{"type": "drive", "vx": m/s, "omega": rad/s}`` :class:`Drive` (repeated while held); optional
                                                ``"press": true`` on the first of a new press
``{"type": "stop"}``                            :class:`~agent.commands.Stop`
``{"type": "take"}``                            :class:`TakeControl`: this tab wants to drive
``{"type": "estop"}``                           :class:`EStop`: set the emergency stop (STOP button)
``{"type": "release_estop"}``                   :class:`ReleaseEStop`: release it (after a confirm)
``{"type": "frame"}``                           :class:`FrameReady`: the page showed the last frame
=============================================== ==========================================

Everything is untrusted: :func:`parse` checks the type, the exact key set, that numbers are
finite (the agent.model constructor, once) and within the configured limits, and raises :class:`agent.errors.CommandError`
naming the field (``drive.vx 3.0 is outside -1.0..1.0 m/s``). A rejected message changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from agent.adapters.sim2bot_commands import decode as json_object
from agent.errors import CommandError, CommandRejected
from agent.support.ratelimit import safe
from agent.commands import BaseVelocity, Stop

SOURCE = "console"

#: Allowed keys per message type.
KEYS: dict[str, frozenset[str]] = {
    "drive": frozenset({"type", "vx", "omega", "press"}),
    "stop": frozenset({"type"}),
    "take": frozenset({"type"}),
    "estop": frozenset({"type"}),
    "release_estop": frozenset({"type"}),
    "frame": frozenset({"type"}),
}


@dataclass(frozen=True, slots=True)
class Limits:
    """Largest accepted magnitudes: ``vx_mps`` (m/s) and ``omega_radps`` (rad/s)."""

    vx_mps: float
    omega_radps: float


@dataclass(frozen=True, slots=True)
class FrameReady:
    """The page displayed the last frame and wants the newest one."""


@dataclass(frozen=True, slots=True)
class TakeControl:
    """This tab takes control of the console (from whichever tab holds it)."""


@dataclass(frozen=True, slots=True)
class EStop:
    """Set the emergency stop (ControlLoop.estop, by ``console``)."""


@dataclass(frozen=True, slots=True)
class ReleaseEStop:
    """Release the emergency stop (ControlLoop.release_estop, by ``console``)."""


@dataclass(frozen=True, slots=True)
class Drive:
    """A velocity command; ``press``: the first of a new press (key-down, touch, stick out of the
    dead zone), which re-engages the console after a stop (agent.console.session)."""

    velocity: BaseVelocity
    press: bool = False


Parsed = Drive | Stop | TakeControl | EStop | ReleaseEStop | FrameReady


def decode(raw: object, max_bytes: int) -> dict:
    """One WebSocket message -> a JSON object (the Sim2Bot adapter's checks, source ``console``).

    Raises:
        CommandError: binary or non-text message, longer than ``max_bytes`` (UTF-8), not JSON,
            nested too deeply, not an object, or a key given twice in an object
            (``{"type": "release_estop", "type": "estop"}``: refused, never resolved to the last
            one, which JSON parsers differ on; agent.support.jsonkeys.unique_keys).
    """
    try:
        data = json_object(raw, max_bytes)
    except CommandError as err:
        err.source = SOURCE
        raise
    return data


def _velocity(vx: object, omega: object) -> BaseVelocity:
    """``BaseVelocity(vx, omega)``: its constructor is the one finite check of both (agent.model;
    docs/architecture.md, "One check per command"); its refusal, which names the field, is named
    as the page's field (``drive.vx must be finite``)."""
    try:
        return BaseVelocity(vx=vx, omega=omega)     # type: ignore[arg-type]  # checked by the model
    except CommandError as err:
        raise type(err)(f"drive.{err}", SOURCE, err.reason) from None


def _bounded(where: str, value: float, limit: float, unit: str) -> None:
    """The console's own range (its sliders' limits): a finite ``value`` beyond it is refused."""
    if abs(value) > limit:
        raise CommandRejected(f"{where} {value:g} is outside -{limit:g}..{limit:g} {unit}", SOURCE)


def parse(message: dict, limits: Limits) -> Parsed:
    """Translate one decoded page message (see the module docstring).

    Raises:
        CommandError: unknown type, unknown or missing key, non-number, non-finite or
            out-of-limits ``vx`` / ``omega``.
    """
    kind = message.get("type")
    if not isinstance(kind, str) or kind not in KEYS:
        raise CommandRejected(f"unknown message type {safe(repr(kind), 40)}; known: {', '.join(KEYS)}", SOURCE)
    extra = sorted(safe(k, 40) for k in message if k not in KEYS[kind])
    if extra:
        raise CommandRejected(f"{kind} has unknown key(s) {', '.join(extra)}", SOURCE)
    if kind == "stop":
        return Stop()
    if kind == "frame":
        return FrameReady()
    if kind == "take":
        return TakeControl()
    if kind == "estop":
        return EStop()
    if kind == "release_estop":
        return ReleaseEStop()
    for key in ("vx", "omega"):
        if key not in message:
            raise CommandRejected(f"drive.{key} is missing", SOURCE)
    press = message.get("press", False)
    if not isinstance(press, bool):
        raise CommandRejected(f"drive.press must be true or false, not {safe(repr(press), 40)}", SOURCE)
    velocity = _velocity(message["vx"], message["omega"])
    _bounded("drive.vx", velocity.vx, limits.vx_mps, "m/s")
    _bounded("drive.omega", velocity.omega, limits.omega_radps, "rad/s")
    return Drive(velocity, press)
