"""JSON objects with unique keys: a key given twice is refused, never resolved.

``json.loads`` keeps the last value of a repeated key (``{"vx": 0, "vx": 0.9}`` is ``{"vx": 0.9}``);
other parsers keep the first, so a peer cannot be sure what such a message means. The agent's
readers of peer messages and of its config (the console, Sim2Bot, ARTEX packets, params.json) parse
with :func:`unique_keys` as their ``object_pairs_hook`` and refuse the message on :class:`RepeatedKey`.
:func:`first_keys` is the other reading, for a caller that must look at both (the ARTEX adapter
obeys a stop in either: docs/artex.md, "command").
"""

from __future__ import annotations

from typing import Any

from agent.support.ratelimit import safe

__all__ = ["RepeatedKey", "first_keys", "unique_keys"]

#: keys of the offending object named in the error, at most
SHOWN_KEYS = 8


class RepeatedKey(ValueError):
    """A JSON object gives ``key`` twice. ``keys``: that object's keys in text order; :attr:`where`
    names them (escaped and clipped) so a reader can find the object in the message."""

    def __init__(self, key: str, keys: list[str]) -> None:
        self.key = key
        self.keys = keys
        super().__init__(f"key {safe(key, 40)!r} given twice in one message ({self.where}); each key once")

    @property
    def where(self) -> str:
        """``in the object with keys a, b, b`` (at most :data:`SHOWN_KEYS` of them)."""
        shown = ", ".join(safe(k, 40) for k in self.keys[:SHOWN_KEYS])
        more = f", ... ({len(self.keys)} keys)" if len(self.keys) > SHOWN_KEYS else ""
        return f"in the object with keys {shown}{more}"


def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``object_pairs_hook``: the object as a dict; raises :class:`RepeatedKey` at a key given twice
    (``{"type": "release_estop", "type": "estop"}``)."""
    data: dict[str, Any] = {}
    for key, value in pairs:
        if key in data:
            raise RepeatedKey(key, [k for k, _ in pairs])
        data[key] = value
    return data


def first_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``object_pairs_hook``: the first value of a repeated key wins (``json.loads`` keeps the last)."""
    data: dict[str, Any] = {}
    for key, value in pairs:
        data.setdefault(key, value)
    return data
