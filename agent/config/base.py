"""Shared base for config sections: strict, frozen pydantic models."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    """A config section: unknown keys are errors, values are immutable after load."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)
