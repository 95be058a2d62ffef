"""agent/support/ratelimit.py: rate-limited log lines and reconnect backoff."""

from __future__ import annotations

import logging
import random
import threading

from agent.errors import CommandDeclined, CommandRejected, NonFiniteValue
from agent.support.ratelimit import RateLimitedLog, backoff_s, safe

LOGGER = "test.ratelimit"


def test_identical_warnings_are_rate_limited_with_a_count(caplog):
    now = [0.0]
    warn = RateLimitedLog(logging.getLogger(LOGGER), 10.0, max_keys=2, clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert warn(logging.WARNING, "bad q") and not warn(logging.WARNING, "bad q")
        assert warn(logging.WARNING, "bad qd")
        now[0] = 11.0
        assert warn(logging.WARNING, "bad q")
    assert [r.getMessage() for r in caplog.records] == [
        "bad q", "bad qd", "bad q (1 more like it since the last report)"]


def test_a_key_groups_lines_whose_details_differ_and_keys_are_bounded(caplog):
    now = [0.0]
    warn = RateLimitedLog(logging.getLogger(LOGGER), 5.0, max_keys=2, clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert warn.log(logging.WARNING, ("action", "oversize"), "rejected: %d bytes", 5000)
        assert not warn.log(logging.WARNING, ("action", "oversize"), "rejected: %d bytes", 7000)
        for i in range(100):                        # a flood of distinct keys: memory stays bounded
            warn.log(logging.WARNING, ("other", i), "x %d", i)
        assert len(warn._seen) == 2
        assert warn.log(logging.WARNING, ("action", "oversize"), "rejected: %d bytes", 9000)  # forgotten: logs
    assert caplog.records[0].getMessage() == "rejected: 5000 bytes"
    assert caplog.records[-1].getMessage() == "rejected: 9000 bytes"


def test_concurrent_callers_log_one_line_per_interval(caplog):
    warn = RateLimitedLog(logging.getLogger(LOGGER), 60.0)
    logged = []

    def hammer() -> None:
        logged.extend(ok for ok in (warn(logging.WARNING, "same") for _ in range(500)) if ok)

    with caplog.at_level(logging.WARNING, logger=LOGGER):
        threads = [threading.Thread(target=hammer) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert len(logged) == 1 and len(caplog.records) == 1


def test_backoff_doubles_caps_and_jitters_down():
    rng = random.Random(1)
    delays = [backoff_s(n, 0.5, 10.0, rng) for n in range(12)]
    assert 0.25 <= delays[0] <= 0.5 and all(d <= 10.0 for d in delays) and delays[-1] >= 5.0
    assert all(0.5 * min(10.0, 0.5 * 2 ** n) <= d <= min(10.0, 0.5 * 2 ** n) for n, d in enumerate(delays))


def test_the_traceback_of_the_handled_exception_is_kept(caplog):
    warn = RateLimitedLog(logging.getLogger(LOGGER), 60.0)
    with caplog.at_level(logging.ERROR, logger=LOGGER):
        for _ in range(3):
            try:
                raise RuntimeError("boom")
            except RuntimeError:
                warn.log(logging.ERROR, "bug", "failed", exc_info=True)
    assert len(caplog.records) == 1 and caplog.records[0].exc_info[0] is RuntimeError


def test_safe_escapes_what_could_forge_a_log_line_and_clips():
    assert safe("forward") == "forward"
    assert safe("a\nERROR forged\r\x1b[31m\x00") == "a\\nERROR forged\\r\\x1b[31m\\x00"
    assert safe("back\\slash") == "back\\\\slash"             # an escape cannot be faked either
    assert safe("\u2028line sep") == "\\u2028line sep"       # a Unicode line separator too
    assert safe("x" * 1000, 10) == "xxxxxxxxxx... (1000 chars)"
    assert safe(5) == "5" and safe(["a\n"]) == "['a\\\\n']"
    assert "\n" not in safe("\n" * 500, 20) and len(safe("\n" * 500, 20)) < 40


def test_rejections_are_rate_limited_by_source_and_reason_not_text(caplog):
    now = [0.0]
    lim = RateLimitedLog(logging.getLogger("t"), 10.0, clock=lambda: now[0])
    with caplog.at_level(logging.WARNING):
        for i in range(1000):                                  # junk that differs in every message
            lim.rejected(logging.WARNING, CommandRejected(f"bad key {i}", "artex"), "rejected: %s", i)
            lim.rejected(logging.WARNING, NonFiniteValue(f"vx {i}", "artex"), "rejected: %s", i)
        lim.rejected(logging.WARNING, CommandDeclined("latched", "sim2bot"), "declined")
        now[0] = 11.0
        lim.rejected(logging.WARNING, CommandRejected("again", "artex"), "rejected: %s", "again")
    lines = [r.getMessage() for r in caplog.records]
    assert lines[:3] == ["rejected: 0", "rejected: 0", "declined"]      # invalid, non_finite, sim2bot
    assert lines[3] == "rejected: again (999 more like it since the last report)"
    assert len(lines) == 4


def test_the_summary_names_the_distinct_details_it_held_back_bounded_and_escaped(caplog):
    """A later line of one key that names another JSON key or size is counted, and the next line logged
    says which (the operator reading the log learns what was held back, not only how many)."""
    now = [0.0]
    warn = RateLimitedLog(logging.getLogger(LOGGER), 10.0, clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert warn.log(logging.WARNING, "repeated", "key %r given twice", "vx", detail="key 'vx'")
        for key in ("omega", "vx", "omega", "x\nERROR forged"):
            assert not warn.log(logging.WARNING, "repeated", "key %r given twice", key, detail=f"key '{key}'")
        assert not warn.log(logging.WARNING, "repeated", "no detail")           # counted, not named
        now[0] = 10.0
        assert warn.log(logging.WARNING, "repeated", "key %r given twice", "a", detail="key 'a'")
        for n in range(20):                                                      # bounded: 8 named, then ...
            warn.log(logging.WARNING, "repeated", "message of %d bytes", 70000 + n, detail=f"{70000 + n} bytes")
        now[0] = 20.0
        assert warn.log(logging.WARNING, "repeated", "last")
    lines = [r.getMessage() for r in caplog.records]
    assert lines[1] == ("key 'a' given twice (5 more like it since the last report: key 'omega', key 'vx', "
                        "key 'x\\nERROR forged')")
    assert lines[2] == ("last (20 more like it since the last report: " +
                        ", ".join(f"{70000 + n} bytes" for n in range(8)) + ", ...)")
    assert all("\n" not in line for line in lines)
    assert warn.rejected(logging.WARNING, CommandRejected("x", "sim2bot", detail="key 'q'"), "r1")
    assert not warn.rejected(logging.WARNING, CommandRejected("y", "sim2bot", detail="key 'p'"), "r2")
    now[0] = 40.0
    assert warn.rejected(logging.WARNING, CommandRejected("z", "sim2bot"), "r3")
    assert caplog.records[-1].getMessage() == "r3 (1 more like it since the last report: key 'p')"
