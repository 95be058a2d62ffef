"""Fixtures for tests that run the CLI's logging setup, and for tests that open devices and threads."""

from __future__ import annotations

import logging

import pytest

from agent.ops.logs import LogQueueHandler, _stop_listener


@pytest.fixture
def root_handlers():
    """Restore the root logger's handlers and level after the test (stopping added logging threads)."""
    root = logging.getLogger()
    before, level = list(root.handlers), root.level
    yield root
    for h in list(root.handlers):
        if h not in before:
            root.removeHandler(h)
            if isinstance(h, LogQueueHandler):
                _stop_listener(h)
    root.setLevel(level)


@pytest.fixture
def closing():
    """A list the test appends what it opened to (emulators, workers, devices); each is closed after the
    test, the last opened first."""
    made: list = []
    yield made
    for obj in reversed(made):
        obj.close()
