"""agent/__main__.py: the CLI's logging setup (one non-blocking handler, a writer thread)."""

from __future__ import annotations

import json
import logging
import time

import pytest

from agent.__main__ import LogQueueHandler, _stop_listener, setup_logging
from agent.config import loads


@pytest.fixture
def root_handlers():
    """Restore the root logger's handlers and level after the test."""
    root = logging.getLogger()
    before, level = list(root.handlers), root.level
    yield root
    for h in root.handlers:
        if h not in before:
            root.removeHandler(h)
            if isinstance(h, LogQueueHandler):
                _stop_listener(h)
    root.setLevel(level)


def test_callers_only_enqueue_and_the_writer_thread_fills_file_and_tail(tmp_path, root_handlers):
    cfg = loads(json.dumps({"logger_type": "file", "log_dir": str(tmp_path), "logger_level": "info"}))
    before = list(root_handlers.handlers)
    tail = setup_logging(cfg, None)
    added = [h for h in root_handlers.handlers if h not in before]
    # the only handler callers run is the queue's: stderr, file and tail are written by the listener thread
    assert len(added) == 1 and isinstance(added[0], LogQueueHandler) and added[0].listener is not None
    logging.getLogger("agent.test").info("written by the logging thread %d", 42)
    _stop_listener(added[0])          # flushes
    assert "written by the logging thread 42" in (tmp_path / "robot-agent.log").read_text()
    assert "INFO agent.test: written by the logging thread 42" in tail.log_text()


def test_a_full_queue_drops_records_instead_of_blocking(root_handlers):
    handler = LogQueueHandler(__import__("queue").Queue(2))
    record = logging.LogRecord("agent.test", logging.INFO, __file__, 1, "x", None, None)
    t0 = time.monotonic()
    for _ in range(5):
        handler.handle(record)
    assert time.monotonic() - t0 < 5.0 and handler.dropped == 3 and handler.queue.qsize() == 2
