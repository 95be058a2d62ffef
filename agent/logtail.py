"""In-memory tail of the agent's log, served to ARTEX ``file`` requests.

:class:`LogTail` is a :class:`logging.Handler` that keeps the last
``max_bytes`` bytes (UTF-8) of formatted log text, and separately the last
``max_bytes`` of ERROR-and-above records. It replaces the ``artex-robot``
SDK's ``all.log`` / ``error.log`` files (SDK ``Logger.request_file`` /
``Logger.clear``): the hub asks ``{"file": "log"}`` or ``{"file": "error"}``
and gets the text; ``{"file": "clear"}`` empties both.

The lead installs one on the root logger in ``agent/__main__.py``::

    tail = LogTail(max_bytes=cfg.artex.log_tail_kib * 1024)
    logging.getLogger().addHandler(tail)

Thread-safe (records arrive from every thread); memory is bounded by
``2 * max_bytes`` plus the per-record overhead.
"""

from __future__ import annotations

import logging
from collections import deque

__all__ = ["DEFAULT_FORMAT", "LogTail"]

#: Line format of the tail (one line per record, tracebacks follow on their own lines).
DEFAULT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class _Tail:
    """Bounded byte budget of text chunks, oldest dropped first. Not locked: the handler locks."""

    def __init__(self, limit_bytes: int) -> None:
        self.limit = limit_bytes
        self.chunks: deque[bytes] = deque()
        self.size = 0

    def add(self, chunk: bytes) -> None:
        if len(chunk) > self.limit:
            chunk = _clip_utf8(chunk[-self.limit:])
        self.chunks.append(chunk)
        self.size += len(chunk)
        while self.size > self.limit:
            self.size -= len(self.chunks.popleft())

    def text(self) -> str:
        return b"".join(self.chunks).decode("utf-8", errors="replace")

    def clear(self) -> None:
        self.chunks.clear()
        self.size = 0


def _clip_utf8(data: bytes) -> bytes:
    """Drop UTF-8 continuation bytes left at the start after cutting a multi-byte character."""
    i = 0
    while i < len(data) and i < 4 and (data[i] & 0xC0) == 0x80:
        i += 1
    return data[i:]


class LogTail(logging.Handler):
    """Logging handler keeping the last ``max_bytes`` of log text and of ERROR+ text.

    Args:
        max_bytes: size of each tail, bytes of UTF-8 text, >= 1; the config's
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
            line = (self.format(record) + "\n").encode("utf-8", errors="replace")
        except Exception:  # noqa: BLE001 - logging.Handler contract: a bad record never breaks the caller
            self.handleError(record)
            return
        self._all.add(line)
        if record.levelno >= logging.ERROR:
            self._errors.add(line)

    def log_text(self) -> str:
        """The last ``max_bytes`` of every record, oldest first (``file`` type ``log``)."""
        with self.lock:  # type: ignore[union-attr]
            return self._all.text()

    def error_text(self) -> str:
        """The last ``max_bytes`` of ERROR and CRITICAL records (``file`` type ``error``)."""
        with self.lock:  # type: ignore[union-attr]
            return self._errors.text()

    def clear(self) -> None:
        """Empty both tails (``file`` type ``clear``)."""
        with self.lock:  # type: ignore[union-attr]
            self._all.clear()
            self._errors.clear()

    def sizes(self) -> tuple[int, int]:
        """Bytes held in the full tail and the error tail."""
        with self.lock:  # type: ignore[union-attr]
            return self._all.size, self._errors.size
