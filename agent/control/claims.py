"""The arbiter's claim table (agent.control.arbitration.Arbiter): a dict that counts its changes.

The arbiter keeps, per channel, the winner it found and the span of time it holds for; it reuses it
while :attr:`Claims.version` is unchanged (the tick, the scheduler's wait and every command ask
who drives; the claims change only with a command, a stop, a halt or a timeout).
"""

from __future__ import annotations

from typing import Any


class Claims(dict):
    """(channel, source) -> agent.control.arbitration.Claim, counting its changes in :attr:`version`: the arbiter reuses a
    channel's winner while the claims did not change and no claim crossed its deadline (every way to
    change a dict goes through a method here that counts it)."""

    __slots__ = ("version",)

    def __init__(self) -> None:
        super().__init__()
        self.version = 0

    def __setitem__(self, key: tuple[str, str], claim: Any) -> None:
        self.version += 1
        super().__setitem__(key, claim)

    def __delitem__(self, key: tuple[str, str]) -> None:
        self.version += 1
        super().__delitem__(key)

    def pop(self, key: tuple[str, str], *default):     # type: ignore[override]
        self.version += 1
        return super().pop(key, *default)

    def _refuse(self, *args, **kwargs):
        raise TypeError("the arbiter's claims change through __setitem__, __delitem__ and pop only (counted)")

    popitem = clear = update = setdefault = __ior__ = _refuse     # type: ignore[assignment]
