"""Shared base for config sections: strict, frozen pydantic models with finite floats, and the
shared constrained types (the drivers' base, re-exported)."""

from __future__ import annotations

import os
from pathlib import Path

from drivers.section import DelayS, RateHz  # noqa: F401
from drivers.section import DriverSection as Section  # noqa: F401


def state_directory() -> Path | None:
    """The service's state directory, ``$STATE_DIRECTORY`` (systemd ``StateDirectory=``; its first
    entry), or None outside systemd."""
    state = os.environ.get("STATE_DIRECTORY", "").split(":")[0]
    return Path(state) if state else None
