"""Console page -> agent messages (pure translation, no I/O).

The page sends JSON text objects over its WebSocket:

=============================================== ==========================================
message                                         result
=============================================== ==========================================
``{"type": "drive", "vx": m/s, "omega": rad/s}`` :class:`~agent.model.BaseVelocity` (repeated while held)
``{"type": "stop"}``                            :class:`~agent.model.Stop`
``{"type": "frame"}``                           :class:`FrameReady`: the page showed the last frame
=============================================== ==========================================

Everything is untrusted: :func:`parse` checks the type, the exact key set, that numbers are
finite and within the configured limits, and raises :class:`agent.errors.CommandError`
naming the field (``drive.vx 3.0 is outside -1.0..1.0 m/s``). A rejected message changes nothing.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

from agent.errors import CommandError
from agent.model import BaseVelocity, Stop

SOURCE = "console"

#: Allowed keys per message type.
KEYS: dict[str, frozenset[str]] = {
    "drive": frozenset({"type", "vx", "omega"}),
    "stop": frozenset({"type"}),
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


Parsed = BaseVelocity | Stop | FrameReady


def _clip(value: object, limit: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def decode(raw: object, max_bytes: int) -> dict:
    """One WebSocket message -> a JSON object.

    Raises:
        CommandError: binary or non-text message, longer than ``max_bytes`` (UTF-8), not JSON,
            nested too deeply, or not an object.
    """
    if not isinstance(raw, str):
        raise CommandError(f"expected a JSON text message, got {type(raw).__name__}", SOURCE)
    if len(raw) > max_bytes or len(raw.encode("utf-8", "surrogatepass")) > max_bytes:
        raise CommandError(f"message of {len(raw)} characters exceeds {max_bytes} bytes", SOURCE)
    try:
        data = json.loads(raw)
    except RecursionError as err:
        raise CommandError("message nests too deeply", SOURCE) from err
    except ValueError as err:
        raise CommandError(f"message is not valid JSON: {err}", SOURCE) from err
    if not isinstance(data, dict):
        raise CommandError(f"message must be a JSON object, got {type(data).__name__}", SOURCE)
    return data


def _bounded(where: str, value: object, limit: float, unit: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise CommandError(f"{where} must be a number, got {type(value).__name__} {_clip(value)}", SOURCE)
    try:
        out = float(value)
    except OverflowError as err:
        raise CommandError(f"{where} is out of range", SOURCE) from err
    if not math.isfinite(out):
        raise CommandError(f"{where} must be finite, got {out!r}", SOURCE)
    if abs(out) > limit:
        raise CommandError(f"{where} {out:g} is outside -{limit:g}..{limit:g} {unit}", SOURCE)
    return out


def parse(message: dict, limits: Limits) -> Parsed:
    """Translate one decoded page message (see the module docstring).

    Raises:
        CommandError: unknown type, unknown or missing key, non-number, non-finite or
            out-of-limits ``vx`` / ``omega``.
    """
    kind = message.get("type")
    if not isinstance(kind, str) or kind not in KEYS:
        raise CommandError(f"unknown message type {_clip(kind)}; known: {', '.join(KEYS)}", SOURCE)
    extra = sorted(str(k)[:40] for k in message if k not in KEYS[kind])
    if extra:
        raise CommandError(f"{kind} has unknown key(s) {', '.join(extra)}", SOURCE)
    if kind == "stop":
        return Stop()
    if kind == "frame":
        return FrameReady()
    for key in ("vx", "omega"):
        if key not in message:
            raise CommandError(f"drive.{key} is missing", SOURCE)
    return BaseVelocity(vx=_bounded("drive.vx", message["vx"], limits.vx_mps, "m/s"),
                        omega=_bounded("drive.omega", message["omega"], limits.omega_radps, "rad/s"))
