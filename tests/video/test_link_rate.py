"""agent.video.LinkRate: the rate a link's video may use, learned from drains, on a virtual clock."""

from __future__ import annotations

import pytest

from agent.testing.clock import VirtualClock
from agent.video import LinkRate


def test_unlimited_until_a_slow_drain_then_cut_below_what_it_drained_at():
    clock = VirtualClock()
    rate = LinkRate(clock=clock.time)
    rate.drained(30_000, 0.01)
    assert rate.bps is None and rate.frame_bytes() is None and rate.spacing_s(30_000) == 0.0
    rate.drained(30_000, 0.5)                     # 60 kB/s drained: the path is full
    assert rate.bps == 0.7 * 60_000 and rate.cuts == 1
    assert rate.frame_bytes() == int(0.25 * 42_000) and rate.spacing_s(42_000) == pytest.approx(1.0)
    rate.drained(30_000, 0.5)                     # the same episode: no second cut at once
    assert rate.cuts == 1
    clock.advance(0.2)
    rate.drained(10_000, 0.5)
    assert rate.cuts == 2 and rate.bps == 0.7 * 20_000


def test_it_creeps_up_near_the_cut_and_recovers_fast_after():
    clock = VirtualClock()
    rate = LinkRate(clock=clock.time, settle_s=3.0, max_bps=1e6)
    rate.drained(10_000, 1.0)
    cut = rate.bps
    for _ in range(2):                            # within settle_s of the cut: +25 % a second
        clock.advance(1.0)
        rate.drained(1000, 0.001)
    assert rate.bps == pytest.approx(cut * 1.25 ** 2)
    steps = 0
    while rate.bps is not None:                   # then doubling every half second, to unlimited
        clock.advance(0.5)
        rate.drained(1000, 0.001)
        steps += 1
    assert steps <= 12                            # 140x from the cut within 8 s


def test_the_rate_never_falls_below_its_floor():
    rate = LinkRate(clock=VirtualClock().time, min_bps=4000.0)
    rate.drained(100, 10.0)
    assert rate.bps == 4000.0
