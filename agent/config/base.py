"""Shared base for config sections: strict, frozen pydantic models (the drivers' base, re-exported)."""

from __future__ import annotations

from drivers.config import DriverSection as Section  # noqa: F401
