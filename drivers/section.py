"""The base of every driver config section and the constrained types its fields share (pydantic,
strict, frozen): unknown keys are errors, floats finite, numbers JSON numbers, bools JSON bools,
addresses in hex / octal / decimal. The sections themselves are in drivers/config.py.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, ClassVar, Union

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

I2cBus = Union[int, str]


def _int_or_hex(value: Any) -> Any:
    """``"0x68"``, ``"0o150"``, ``"104"`` -> 104 (Python literal rules); anything else is left to pydantic."""
    if isinstance(value, str):
        try:
            return int(value.strip(), 0)
        except ValueError:
            raise ValueError(f"address must be a number such as 0x68 or 104, got {value[:40]!r}") from None
    return value


# Shared constrained types (one place for the bounds every config number needs). Floats are
# finite everywhere: DriverSection sets allow_inf_nan=False, so Infinity / NaN never load.
#: Device address: an int, or a string in hex / octal / decimal (``"0x68"``); range per field.
Address = Annotated[int, BeforeValidator(_int_or_hex)]
#: Serial line rate, baud (pyserial's standard rates span 50..4 000 000; below 300 nothing we drive).
Baud = Annotated[int, Field(ge=300, le=4_000_000)]
#: A rate, Hz: at least 0.1 (one read in 10 s); upper bound per field.
RateHz = Annotated[float, Field(ge=0.1)]
#: A delay or timeout, s: at least 10 ms (a smaller one would spin); upper bound per field.
DelayS = Annotated[float, Field(ge=0.01)]
#: A joint angle, rad: within one turn either way.
AngleRad = Annotated[float, Field(ge=-2 * math.pi, le=2 * math.pi)]


#: stands in for a bool or string given to a number field (see DriverSection)
_NOT_A_NUMBER = object()


def _boolean(field: Any) -> bool:
    """A bool field (Optional included)."""
    args = getattr(field.annotation, "__args__", None) or (field.annotation,)
    return bool in args and all(a in (bool, type(None)) for a in args)


def _numeric(field: Any) -> bool:
    """A plain int/float field (Optional included) without a parser of its own (``Address``)."""
    if any(isinstance(m, BeforeValidator) for m in field.metadata):
        return False
    args = getattr(field.annotation, "__args__", None) or (field.annotation,)
    return any(a in (int, float) for a in args) and all(a in (int, float, type(None)) for a in args)


#: The config field that names where a device is, per :attr:`DriverSection.transport`.
_ENDPOINT_FIELDS = {"serial": "port", "i2c": "bus", "gpio": "chip"}


class DriverSection(BaseModel):
    """A config section: unknown keys are errors, values are immutable after load, floats finite,
    a number field takes a JSON number only (not ``true`` or ``"8080"``, which pydantic's lax
    mode would turn into 1 and 8080) and a bool field ``true`` or ``false`` only (not ``"yes"``
    or ``1``)."""

    # defer_build: a model's validator is built when it first validates (the whole params.json tree
    # at once on load), not when its class is defined: importing every section costs a start little
    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True, allow_inf_nan=False,
                              defer_build=True)

    #: How the driver reaches its device: ``serial`` (its ``port`` field), ``i2c`` (``bus``),
    #: ``gpio`` (``chip``), or ``""``: the driver opens its own source (a camera) or the section
    #: is part of another (a servo joint, a battery).
    transport: ClassVar[str] = ""

    @property
    def endpoint(self) -> int | str:
        """The value naming where the device is: its ``port``, ``bus`` or ``chip`` (by
        :attr:`transport`); "" for a section without a transport of its own."""
        field = _ENDPOINT_FIELDS.get(self.transport)
        return getattr(self, field) if field else ""

    @model_validator(mode="before")
    @classmethod
    def _numbers_are_numbers(cls, data: Any) -> Any:
        """A bool or string given to a number field, or anything but a bool to a bool field, becomes
        a value no number or bool type accepts, so pydantic reports it at that field's path
        ("Input should be a valid number" / "... a valid boolean")."""
        if not isinstance(data, dict):
            return data
        bad = [key for key, field in cls.model_fields.items()
               if (isinstance(data.get(field.alias or key), (bool, str)) and _numeric(field))
               or (_boolean(field) and (field.alias or key) in data
                   and not isinstance(data[field.alias or key], bool)
                   and not (data[field.alias or key] is None and type(None) in getattr(field.annotation, "__args__", ())))]
        return {**data, **{field: _NOT_A_NUMBER for field in bad}} if bad else data
