"""The logging of the command line (agent.__main__): one non-blocking handler, one writer thread.

Logs go to stderr with a timestamp; under systemd (stderr is the journal stream named by
``JOURNAL_STREAM``) they go to the journal instead, without a timestamp of their own, with the
record's priority and the structured fields ``DEVICE=``, ``SOURCE=``, ``FAULT=`` taken from the
record's ``device``, ``source`` and ``fault`` extras (``log.error(..., extra={"device": "motor"})``),
through systemd-python's ``JournalHandler`` (or ``<N>`` priority prefixes when it is not installed).
Handlers are configured here (:func:`setup_logging`, called by agent.__main__) and nowhere else.
Records are written by one logging thread (``QueueHandler`` -> ``QueueListener``), so no caller,
the event loop least of all, ever waits for stderr, the journal or a log file.
"""

from __future__ import annotations

import atexit
import logging
import logging.handlers
import os
import queue
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agent.config import AgentConfig

#: Records waiting for the logging thread; when it is full, new records are dropped and counted.
LOG_QUEUE_SIZE = 10_000


def _level(name: str) -> int:
    from agent.config import ConfigError, log_level

    try:
        return log_level(name)
    except ValueError as err:
        raise ConfigError(str(err), [("$.logger_level", str(err))]) from None


class LogQueueHandler(logging.handlers.QueueHandler):
    """Hands records to the logging thread without ever blocking: a full queue drops the record.

    Attributes:
        dropped: records dropped because the queue was full.
        listener: the ``QueueListener`` writing the records (``listener.stop()`` flushes).
    """

    def __init__(self, q: queue.Queue) -> None:
        super().__init__(q)
        self.dropped = 0
        self.listener: logging.handlers.QueueListener | None = None

    def enqueue(self, record: logging.LogRecord) -> None:
        try:
            self.queue.put_nowait(record)
        except queue.Full:
            self.dropped += 1


def _stop_listener(handler: LogQueueHandler) -> None:
    """Flush and stop the logging thread (at exit)."""
    listener, handler.listener = handler.listener, None
    if listener is not None:
        try:
            listener.stop()
        except queue.Full:  # the end marker did not fit; the thread is a daemon and ends with the process
            pass
    if handler.dropped:
        sys.stderr.write(f"robot-agent: {handler.dropped} log records dropped (log queue full)\n")


#: libraries whose DEBUG logging dumps every frame; held at INFO even with --log-level debug
QUIET_LIBRARIES = ("websockets", "engineio", "socketio", "aiohttp.access", "asyncio")


#: record extras copied to journal fields of the same name in capitals
JOURNAL_FIELDS = ("device", "source", "fault")
SYSLOG_IDENTIFIER = "robot-agent"


def under_journald() -> bool:
    """True when stderr is the journal stream systemd connected (``JOURNAL_STREAM`` = its device:inode)."""
    want = os.environ.get("JOURNAL_STREAM", "")
    try:
        st = os.fstat(sys.stderr.fileno())
    except (OSError, ValueError, AttributeError):
        return False
    return bool(want) and want == f"{st.st_dev}:{st.st_ino}"


class JournalFields(logging.Filter):
    """Copies the record's ``device`` / ``source`` / ``fault`` extras to ``DEVICE`` / ``SOURCE`` / ``FAULT``
    (the names journal fields must have); the record is always passed on."""

    def filter(self, record: logging.LogRecord) -> bool:
        for name in JOURNAL_FIELDS:
            value = getattr(record, name, None)
            if value is not None:
                setattr(record, name.upper(), str(value))
        return True


class PriorityPrefix(logging.Formatter):
    """``<N>logger: message`` with the syslog priority N, which journald reads from a stream."""

    def format(self, record: logging.LogRecord) -> str:
        level = record.levelno
        pri = 2 if level >= logging.CRITICAL else 3 if level >= logging.ERROR else \
            4 if level >= logging.WARNING else 6 if level >= logging.INFO else 7
        return f"<{pri}>" + super().format(record)


def console_handler(journal: bool | None = None, sender=None) -> logging.Handler:
    """The handler for the console: the journal under systemd (see the module docstring), else stderr.

    Args:
        journal: force the choice (default: :func:`under_journald`).
        sender: ``systemd.journal.send`` or a stand-in with its signature (tests).
    """
    if not (under_journald() if journal is None else journal):
        handler: logging.Handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        return handler
    try:
        from systemd import journal as sd_journal  # type: ignore[import-not-found]
    except ImportError:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(PriorityPrefix("%(name)s: %(message)s"))
        return handler
    handler = sd_journal.JournalHandler(sender_function=sender or sd_journal.send,
                                        SYSLOG_IDENTIFIER=SYSLOG_IDENTIFIER)
    handler.addFilter(JournalFields())
    handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
    return handler


def setup_logging(cfg: AgentConfig | None, override: str | None):
    """Configure the root logger once: stderr, the ARTEX log tail, optionally a file. Returns the tail.

    The root logger gets one :class:`LogQueueHandler`; a ``QueueListener`` thread formats and
    writes the records to the real handlers (stopped and flushed at exit).
    """
    from agent.support.logtail import LogTail

    level = _level(override) if override else _level(cfg.logger_level) if cfg else logging.INFO
    root = logging.getLogger()
    root.setLevel(level)
    fmt = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    tail = LogTail(max_bytes=(cfg.artex.log_tail_kib if cfg else 64) * 1024)
    tail.setFormatter(fmt)
    handlers: list[logging.Handler] = [console_handler(), tail]
    if cfg is not None and cfg.file_log_dir is not None:
        Path(cfg.file_log_dir).mkdir(parents=True, exist_ok=True)
        fh = logging.handlers.RotatingFileHandler(Path(cfg.file_log_dir).resolve() / "robot-agent.log",
                                                  maxBytes=5 << 20, backupCount=3)
        fh.setFormatter(fmt)
        handlers.append(fh)
    handler = LogQueueHandler(queue.Queue(LOG_QUEUE_SIZE))
    handler.listener = logging.handlers.QueueListener(handler.queue, *handlers, respect_handler_level=True)
    handler.listener.start()
    atexit.register(_stop_listener, handler)
    root.addHandler(handler)
    for name in QUIET_LIBRARIES:  # their debug output is one line per frame/packet: keep it at INFO
        logging.getLogger(name).setLevel(max(level, logging.INFO))
    return tail
