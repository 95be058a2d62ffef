"""In-memory tail of the agent's log, served to ARTEX ``file`` requests.

:class:`LogTail` is a :class:`logging.Handler` that keeps the last
``max_bytes`` bytes of formatted log text, and separately the last
``max_bytes`` of ERROR-and-above records. It replaces the ``artex-robot``
SDK's ``all.log`` / ``error.log`` files (SDK ``Logger.request_file`` /
``Logger.clear``): the hub asks ``{"file": "log"}`` or ``{"file": "error"}``
and gets the text; ``{"file": "clear"}`` empties both.

The lead installs one on the root logger in ``agent/ops/logs.py``::

    tail = LogTail(max_bytes=cfg.artex.log_tail_kib * 1024)
    logging.getLogger().addHandler(tail)

Sizes count wire bytes: the text as python-socketio sends it inside JSON, where
every non-ASCII character is escaped to 6 bytes (``\\uXXXX``), so Cyrillic log
text takes three times its UTF-8 size (:func:`wire_size`).

Thread-safe (records arrive from every thread); memory is bounded by
``2 * max_bytes`` plus the per-record overhead.
"""

from __future__ import annotations

import json
import logging
from collections import deque

__all__ = ["DEFAULT_FORMAT", "LogTail", "clip_to_wire", "wire_size"]

#: Line format of the tail (one line per record, tracebacks follow on their own lines).
DEFAULT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def wire_size(text: str) -> int:
    """Bytes of ``text`` inside a JSON string as python-socketio sends it (``ensure_ascii``:
    a non-ASCII character is 6 bytes ``\\uXXXX``, 12 beyond the BMP; quotes, backslashes and
    control characters escaped)."""
    return len(json.dumps(text)) - 2


def clip_to_wire(text: str, limit: int) -> str:
    """The longest end of ``text`` whose :func:`wire_size` is at most ``limit``."""
    if wire_size(text) <= limit:
        return text
    lo, hi = 0, len(text)            # binary search on the start index: wire size falls as it grows
    while lo < hi:
        mid = (lo + hi) // 2
        if wire_size(text[mid:]) <= limit:
            hi = mid
        else:
            lo = mid + 1
    return text[lo:]


class _Tail:
    """Bounded wire-byte budget of text lines, oldest dropped first. Not locked: the handler locks."""

    def __init__(self, limit_bytes: int) -> None:
        self.limit = limit_bytes
        self.chunks: deque[tuple[str, int]] = deque()
        self.size = 0

    def add(self, chunk: str) -> None:
        size = wire_size(chunk)
        if size > self.limit:
            chunk = clip_to_wire(chunk, self.limit)
            size = wire_size(chunk)
        self.chunks.append((chunk, size))
        self.size += size
        while self.size > self.limit:
            self.size -= self.chunks.popleft()[1]

    def text(self, limit: int | None = None) -> str:
        """The newest lines within ``limit`` wire bytes (all of them when None)."""
        if limit is None or limit >= self.size:
            return "".join(c for c, _ in self.chunks)
        picked: list[str] = []
        total = 0
        for chunk, size in reversed(self.chunks):
            if total + size > limit:
                picked.append(clip_to_wire(chunk, limit - total))
                break
            picked.append(chunk)
            total += size
        return "".join(reversed(picked))

    def clear(self) -> None:
        self.chunks.clear()
        self.size = 0


class LogTail(logging.Handler):
    """Logging handler keeping the last ``max_bytes`` of log text and of ERROR+ text.

    Args:
        max_bytes: size of each tail, bytes on the wire (JSON-escaped text, :func:`wire_size`), >= 1; the config's
            ``artex.log_tail_kib * 1024``.
        level: lowest level recorded in the full tail (the error tail is ERROR+ regardless).
        fmt: ``logging.Formatter`` format string; ``DEFAULT_FORMAT`` when None
            (``setFormatter`` replaces it).

    Raises:
        ValueError: ``max_bytes`` below 1.
    """

    def __init__(self, max_bytes: int = 64 * 1024, level: int = logging.NOTSET, fmt: str | None = None) -> None:
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 1:
            raise ValueError(f"LogTail max_bytes must be an integer >= 1, got {max_bytes!r}")
        super().__init__(level)
        self.setFormatter(logging.Formatter(fmt or DEFAULT_FORMAT))
        self.max_bytes = max_bytes
        self._all = _Tail(max_bytes)
        self._errors = _Tail(max_bytes)

    def emit(self, record: logging.LogRecord) -> None:
        """Format ``record`` and append it to the tails (called under the handler lock)."""
        try:
            line = self.format(record) + "\n"
        except Exception:  # noqa: BLE001 - logging.Handler contract: a bad record never breaks the caller
            self.handleError(record)
            return
        self._all.add(line)
        if record.levelno >= logging.ERROR:
            self._errors.add(line)

    def log_text(self, limit: int | None = None) -> str:
        """The last ``max_bytes`` (or ``limit``) wire bytes of every record, oldest first (``file`` type ``log``)."""
        with self.lock:  # type: ignore[union-attr]
            return self._all.text(limit)

    def error_text(self, limit: int | None = None) -> str:
        """The last ``max_bytes`` (or ``limit``) wire bytes of ERROR and CRITICAL records (``file`` type ``error``)."""
        with self.lock:  # type: ignore[union-attr]
            return self._errors.text(limit)

    def clear(self) -> None:
        """Empty both tails (``file`` type ``clear``)."""
        with self.lock:  # type: ignore[union-attr]
            self._all.clear()
            self._errors.clear()

    def sizes(self) -> tuple[int, int]:
        """Wire bytes (JSON-escaped, see :func:`wire_size`) held in the full tail and the error tail."""
        with self.lock:  # type: ignore[union-attr]
            return self._all.size, self._errors.size
