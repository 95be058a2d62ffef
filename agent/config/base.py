"""Shared base for config sections: strict, frozen pydantic models with finite floats, and the
shared constrained types (the drivers' base, re-exported)."""

from __future__ import annotations

from drivers.config import DelayS, RateHz  # noqa: F401
from drivers.config import DriverSection as Section  # noqa: F401
