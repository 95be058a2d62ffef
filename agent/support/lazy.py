"""Loading later what a start does not need: a package's names on first use, a library on first read.

- :func:`lazy_names`: a package's names loaded from their module when first used (PEP 562 module
  ``__getattr__``)::

      __getattr__ = lazy_names(__name__, {"agent.video.hub": ("VideoHub",), ...})

  Importing the package then costs nothing until a name is read; the first read imports its
  module, keeps the value in the package's globals and returns it (later reads do not come here).
  An unknown name raises AttributeError as a module attribute would.
- :func:`deferred_imports`: while inside, the first import of one of the named top-level modules
  gives it unexecuted (the standard library's ``importlib.util.LazyLoader``); its code runs at
  the first read of one of its attributes. For a library that another library imports at the top
  for a part the agent never calls (python-engineio's sync client imports requests and
  websocket-client; the agent's ARTEX adapter uses the asyncio client, agent.app).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import threading
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
        spec.loader = importlib.util.LazyLoader(spec.loader)
        return spec


_FINDER = _DeferringFinder()


@contextlib.contextmanager
def deferred_imports(names: Iterable[str]) -> Iterator[None]:
    """While inside, a first import of one of the top-level modules ``names`` (found on ``sys.path``)
    binds the module without running its code: that runs at the first read of any of its attributes
    (``importlib.util.LazyLoader``), in whatever thread reads it. On Python before 3.12.3 that first
    read is not thread-safe (CPython gh-114763: a second thread may see the module half-run) and a
    failed run leaves a half-made module behind: use it only for modules the agent never reads
    (python-socketio's sync-client libraries), as agent.app does. A module imported before stays as it
    is; one that is not installed fails to import as before. Unlike a plain import, an error in the
    module's own imports comes at that first read, not at the ``import`` statement.

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
