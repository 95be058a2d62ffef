"""agent/support/logtail.py: the bounded in-memory log tail behind ARTEX ``file`` requests."""

from __future__ import annotations

import logging
import threading

import pytest

from agent.support.logtail import LogTail


@pytest.fixture
def logger():
    lg = logging.getLogger("test.logtail")
    lg.setLevel(logging.DEBUG)
    lg.propagate = False
    yield lg
    lg.handlers.clear()


def attach(logger, **kw) -> LogTail:
    tail = LogTail(**kw)
    logger.addHandler(tail)
    return tail


def test_log_and_error_tails(logger):
    tail = attach(logger)
    logger.info("motor ok")
    logger.error("motor lost: %s", "EIO")
    logger.warning("imu degraded")
    text = tail.log_text()
    assert "INFO test.logtail: motor ok" in text and "imu degraded" in text and "motor lost: EIO" in text
    assert text.index("motor ok") < text.index("motor lost") < text.index("imu degraded")
    assert "motor lost: EIO" in tail.error_text() and "motor ok" not in tail.error_text()


def test_exceptions_are_included(logger):
    tail = attach(logger)
    try:
        raise ValueError("bad duty")
    except ValueError:
        logger.exception("tick failed")
    assert "ValueError: bad duty" in tail.error_text()


def test_bounded_keeps_the_newest(logger):
    tail = attach(logger, max_bytes=1024)
    for i in range(1000):
        logger.info("line %04d", i)
    text = tail.log_text()
    assert len(text.encode()) <= 1024
    assert "line 0999" in text and "line 0000" not in text
    assert tail.sizes()[0] <= 1024


def test_one_huge_record_is_clipped_to_its_tail_on_a_character_boundary(logger):
    tail = attach(logger, max_bytes=100)
    logger.error("start " + "я" * 500 + " end")
    text = tail.error_text()
    assert text.endswith(" end\n") and "\ufffd" not in text
    assert len(text.encode()) <= 100


def test_clear(logger):
    tail = attach(logger)
    logger.error("x")
    tail.clear()
    assert tail.log_text() == "" and tail.error_text() == "" and tail.sizes() == (0, 0)
    logger.info("after")
    assert "after" in tail.log_text()


def test_thread_safe(logger):
    tail = attach(logger, max_bytes=4096)

    def spam(n):
        for i in range(300):
            logger.error("thread %d msg %d", n, i)
            tail.log_text()

    threads = [threading.Thread(target=spam, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for text in (tail.log_text(), tail.error_text()):
        assert len(text.encode()) <= 4096
        assert all(line.count("msg") == 1 for line in text.splitlines()[1:])


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "64"])
def test_bad_size(bad):
    with pytest.raises(ValueError):
        LogTail(max_bytes=bad)


def test_sizes_count_json_escaped_wire_bytes() -> None:
    """Cyrillic is 2 bytes of UTF-8 but 6 on the wire (``\\uXXXX``, as python-socketio sends it)."""
    from socketio import packet

    from agent.support.logtail import clip_to_wire, wire_size

    text = "Привет, мир \"q\"\n" * 3
    encoded = packet.Packet(packet.EVENT, data=["file", {"content": text}], namespace="/robot").encode()
    empty = packet.Packet(packet.EVENT, data=["file", {"content": ""}], namespace="/robot").encode()
    assert wire_size(text) == len(encoded) - len(empty)
    clipped = clip_to_wire(text, 100)
    assert text.endswith(clipped) and wire_size(clipped) <= 100 < wire_size(text[-len(clipped) - 1:])


def test_cyrillic_tail_keeps_within_its_wire_budget() -> None:
    from agent.support.logtail import wire_size

    logger = logging.getLogger("test.logtail.cyrillic")
    tail = attach(logger, max_bytes=10_000)
    for i in range(500):
        logger.warning("сообщение номер %d: двигатель в норме", i)
    text = tail.log_text()
    assert wire_size(text) <= 10_000 and tail.sizes()[0] == wire_size(text)
    assert "номер 499" in text and "номер 0:" not in text
    assert wire_size(tail.log_text(2_000)) <= 2_000 and tail.log_text(2_000).endswith("в норме\n")
