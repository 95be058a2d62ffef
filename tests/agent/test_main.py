"""agent/ops/logs.py: the CLI's logging setup (one non-blocking handler, a writer thread; the journal under systemd)."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time

import pytest

from agent.ops.logs import LogQueueHandler, PriorityPrefix, _stop_listener, console_handler, setup_logging
from agent.config import loads
from tests.conftest import ROOT


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


def test_under_systemd_records_go_to_the_journal_with_priority_and_fields_and_no_timestamp():
    pytest.importorskip("systemd.journal", reason="systemd-python (robot-agent[systemd]) is not installed")
    sent: list[tuple[str, dict]] = []
    handler = console_handler(journal=True, sender=lambda MESSAGE, **fields: sent.append((MESSAGE, fields)))
    logger = logging.getLogger("agent.devices.hardware")
    record = logger.makeRecord("agent.devices.hardware", logging.ERROR, __file__, 1, "motor: lost (%s)", ("no such port",),
                               None, extra={"device": "motor", "fault": "lost"})
    handler.handle(record)
    info = logger.makeRecord("agent.control", logging.INFO, __file__, 2, "source %s drives", ("artex",), None,
                             extra={"source": "artex"})
    handler.handle(info)
    (message, fields), (message2, fields2) = sent
    assert message == "agent.devices.hardware: motor: lost (no such port)"          # no second timestamp
    assert fields["PRIORITY"] == "3" and fields["DEVICE"] == "motor" and fields["FAULT"] == "lost"
    assert fields["SYSLOG_IDENTIFIER"] == "robot-agent" and "SOURCE" not in fields
    assert message2 == "agent.control: source artex drives"
    assert fields2["PRIORITY"] == "6" and fields2["SOURCE"] == "artex" and "DEVICE" not in fields2


def test_without_systemd_python_the_stream_carries_priority_prefixes():
    fmt = PriorityPrefix("%(name)s: %(message)s")
    for level, pri in ((logging.CRITICAL, 2), (logging.ERROR, 3), (logging.WARNING, 4), (logging.INFO, 6),
                       (logging.DEBUG, 7)):
        record = logging.LogRecord("agent.x", level, __file__, 1, "m", None, None)
        assert fmt.format(record) == f"<{pri}>agent.x: m"


@pytest.mark.parametrize("matching", [True, False])
def test_the_journal_is_used_only_when_stderr_is_the_stream_systemd_named(tmp_path, matching):
    err = tmp_path / "stderr"
    with open(err, "w") as f:
        st = os.fstat(f.fileno())
        stream = f"{st.st_dev}:{st.st_ino}" if matching else f"{st.st_dev}:{st.st_ino + 1}"
        res = subprocess.run([sys.executable, "-c", "from agent.ops.logs import under_journald as u; print(u())"],
                             cwd=ROOT, env=dict(os.environ, JOURNAL_STREAM=stream), stdout=subprocess.PIPE,
                             stderr=f, text=True, timeout=30)
    assert res.stdout.strip() == str(matching), err.read_text()


def test_status_into_a_closed_pipe_ends_without_a_traceback(tmp_path):
    """`robot-agent status | head -1`: the reader leaves before the table is written."""
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-m", "agent", "status", "--status-file", str(tmp_path / "none.json")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()
    _, err = proc.communicate(timeout=60)
    assert b"Traceback" not in err and b"BrokenPipe" not in err, err.decode()
