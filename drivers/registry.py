"""The drivers' registry: device kind -> config models, and per model its driver and emulator.

:data:`drivers.config.KINDS` lists the config models of each device kind
(``motor``, ``imu``, ``power``, ``servo``, ``camera``); each model names its
driver class and emulator class as ``"module:Class"``, imported here on use so
that loading the registry loads no driver. A new motor controller or sensor
is its driver module, its emulator module and its model in drivers/config.py
(plus one entry in ``KINDS``); nothing here changes.
"""

from __future__ import annotations

import importlib
from typing import Any, get_args

from drivers.config import KINDS
from drivers.section import DriverSection
from drivers.errors import DriverConfigError

__all__ = ["KINDS", "driver_class", "emulator_class", "kind_of", "model", "models"]


def kind_of(cls: type[DriverSection]) -> str:
    """The config ``kind`` value a model stands for (``"roboclaw"``), or "" for a model without one."""
    field = cls.model_fields.get("kind")
    return get_args(field.annotation)[0] if field is not None else ""


#: config ``kind`` value (``roboclaw``, ``mpu6050``...) -> its config model.
MODELS: dict[str, type[DriverSection]] = {
    kind_of(m): m for ms in KINDS.values() for m in ms if kind_of(m)}


def models(device_kind: str) -> tuple[type[DriverSection], ...]:
    """Config models of one device kind (``motor``, ``imu``...). Raises DriverConfigError when unknown."""
    try:
        return KINDS[device_kind]
    except KeyError:
        raise DriverConfigError(f"no device kind {device_kind!r}; known: {', '.join(KINDS)}") from None


def model(kind: str) -> type[DriverSection]:
    """The config model of a config ``kind`` value. Raises DriverConfigError for an unknown kind."""
    try:
        return MODELS[kind]
    except KeyError:
        raise DriverConfigError(f"no driver for kind {kind!r}; known: {', '.join(sorted(MODELS))}") from None


def _load(path: str) -> Any:
    module, name = path.split(":")
    return getattr(importlib.import_module(module), name)


def _model_of(cfg_or_kind: Any) -> type[DriverSection]:
    return model(cfg_or_kind) if isinstance(cfg_or_kind, str) else type(cfg_or_kind)


def driver_class(cfg_or_kind: Any) -> type:
    """The driver class of a config section or a config ``kind`` value (imported now)."""
    return _load(_model_of(cfg_or_kind).driver)


def emulator_class(cfg_or_kind: Any) -> type:
    """The emulator class (wire-level, ``from_config(cfg, physics)``) of a config section or ``kind``."""
    return _load(_model_of(cfg_or_kind).emulator)
