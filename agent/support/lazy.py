"""A package's names loaded from their module when first used (PEP 562 module ``__getattr__``).

    __getattr__ = lazy_names(__name__, {"agent.video.hub": ("VideoHub",), ...})

Importing the package then costs nothing until a name is read; the first read imports its
module, keeps the value in the package's globals and returns it (later reads do not come here).
An unknown name raises AttributeError as a module attribute would.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy_names(package: str, where: Mapping[str, tuple[str, ...]]) -> Callable[[str], Any]:
    """The ``__getattr__`` for ``package``: ``where`` maps a module's dotted name to the names it gives."""
    module_of = {name: module for module, names in where.items() for name in names}

    def __getattr__(name: str) -> Any:
        module = module_of.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__
