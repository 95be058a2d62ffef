"""Giving freed heap memory back to the OS.

glibc keeps freed blocks of the main heap and of each thread's arena for reuse; after a burst
of large allocations (a flood of big messages, 8 MB video encodes) the process keeps that much
resident until something calls ``malloc_trim``. :func:`release_memory` does.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import logging

log = logging.getLogger(__name__)


@functools.cache
def _libc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.malloc_trim  # noqa: B018 (glibc only)
    except (OSError, AttributeError) as err:
        log.debug("malloc_trim unavailable: %s", err)
        return None
    return libc


def release_memory() -> None:
    """Return freed heap memory of every arena to the OS (glibc ``malloc_trim(0)``); a no-op
    without glibc. Blocking for up to a few ms on a large heap: call it off the event loop."""
    libc = _libc()
    if libc is not None:
        libc.malloc_trim(0)
