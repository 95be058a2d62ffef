"""Loading later what a start does not need: a package's names on first use, a library on first read.

- :func:`lazy_names`: a package's names loaded from their module when first used (PEP 562 module
  ``__getattr__``)::

      __getattr__ = lazy_names(__name__, {"agent.video.hub": ("VideoHub",), ...})

  Importing the package then costs nothing until a name is read; the first read imports its
  module, keeps the value in the package's globals and returns it (later reads do not come here).
  An unknown name raises AttributeError as a module attribute would.
- :func:`deferred_imports`: while inside, the first import of one of the named top-level modules
  gives it unexecuted (``importlib.util.LazyLoader`` with a thread-safe module of ours,
  :class:`_LazyModule`); its code runs at the first read of one of its attributes. For a library
  that another library imports at the top for a part the agent never calls (python-engineio's sync
  client imports requests and websocket-client; the agent's ARTEX adapter uses the asyncio client,
  agent.app).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import threading
import types
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from types import ModuleType
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


class _LazyModule(types.ModuleType):
    """A module whose code runs at the first read of one of its attributes, once, under its lock: a
    second thread reading meanwhile waits for that run to end. Python 3.11's
    ``importlib.util._LazyModule`` lets the second thread see the module half-run (or fail with
    AttributeError) and may run its code twice; this is its 3.12.3 form, where CPython fixed that
    (gh-114763, https://github.com/python/cpython/issues/114763), for every Python the agent runs on."""

    def __getattribute__(self, attr: str) -> Any:
        spec = object.__getattribute__(self, "__spec__")
        state = spec.loader_state
        with state["lock"]:
            if object.__getattribute__(self, "__class__") is _LazyModule:   # else another thread loaded it
                plain = state["__class__"]
                if state["is_loading"]:     # the loading thread itself: the module's code, its imports
                    return plain.__getattribute__(self, attr)
                state["is_loading"] = True
                attrs = plain.__getattribute__(self, "__dict__")
                then = state["__dict__"]    # what was set on the module before its code ran stays set
                updated = {k: v for k, v in attrs.items() if k not in then or then[k] is not v}
                spec.loader.exec_module(self)
                if sys.modules.get(spec.name, self) is not self:
                    raise ValueError(f"module object for {spec.name!r} substituted in sys.modules during a lazy load")
                attrs.update(updated)
                if object.__getattribute__(self, "__class__") is _LazyModule:   # unless its code set its own
                    object.__setattr__(self, "__class__", plain)
        return getattr(self, attr)

    def __delattr__(self, attr: str) -> None:
        self.__getattribute__(attr)     # loads it (and raises AttributeError for a missing one)
        delattr(self, attr)


class _LockedLazyLoader(importlib.util.LazyLoader):
    """``importlib.util.LazyLoader`` making a :class:`_LazyModule` (the loader state it needs: the
    module's class and attributes before its code runs, a lock, whether its code is running)."""

    def exec_module(self, module: ModuleType) -> None:
        module.__spec__.loader = self.loader
        module.__loader__ = self.loader
        module.__spec__.loader_state = {"__dict__": module.__dict__.copy(), "__class__": module.__class__,
                                        "lock": threading.RLock(), "is_loading": False}
        module.__class__ = _LazyModule


class _DeferringFinder(importlib.abc.MetaPathFinder):
    """Finds the top-level modules named in :attr:`names` on ``sys.path`` with a LazyLoader around
    their own loader; any other module, or one it cannot find so, is left to the other finders."""

    def __init__(self) -> None:
        self.names: Counter[str] = Counter()
        self.lock = threading.Lock()

    def find_spec(self, fullname: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if path is not None or not self.names[fullname]:    # submodules load as they are
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return None     # not installed (or not a plain module): the usual import, and its error
        spec.loader = _LockedLazyLoader(spec.loader)
        return spec


_FINDER = _DeferringFinder()


@contextlib.contextmanager
def deferred_imports(names: Iterable[str]) -> Iterator[None]:
    """While inside, a first import of one of the top-level modules ``names`` (found on ``sys.path``)
    binds the module without running its code: that runs once, at the first read of any of its
    attributes (:class:`_LazyModule`), in whatever thread reads it; another thread reading meanwhile
    waits for the run to end. A failed run leaves a half-made module behind (as with the standard
    library's LazyLoader), and the run holds the module's lock while the module's own imports take
    the import system's locks: use it for modules the agent does not read (python-socketio's
    sync-client libraries), as agent.app does. A module imported before stays as it is; one that is
    not installed fails to import as before. Unlike a plain import, an error in the module's own
    imports comes at that first read, not at the ``import`` statement.

    The finder is put first on ``sys.meta_path`` at the first use and stays there (idle outside these
    blocks): taking it out while another thread walks ``sys.meta_path`` could make that walk skip a
    finder. Nested and concurrent blocks add up."""
    names = tuple(names)
    with _FINDER.lock:
        if _FINDER not in sys.meta_path:
            sys.meta_path.insert(0, _FINDER)
        _FINDER.names.update(names)
    try:
        yield
    finally:
        with _FINDER.lock:
            _FINDER.names.subtract(names)
