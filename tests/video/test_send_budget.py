"""SendBudget: a link's video spending (bytes/s, CPU share) over a sliding window; drops, never delays."""

from __future__ import annotations

from agent.config import video as video_config
from agent.testing.clock import VirtualClock
from agent.video import SendBudget


def test_frames_over_the_byte_rate_are_dropped_and_counted():
    clock = VirtualClock()
    budget = SendBudget(max_bytes_per_s=20_000_000, clock=clock.time)
    sent = 0
    for _ in range(30):                      # 30 fps of 8.3 MB asked for, 20 MB/s allowed
        if budget.admit(8_300_000, 0.0):
            budget.spend(8_300_000, 0.0)
            sent += 1
        clock.advance(1 / 30)
    assert sent == 2 and budget.dropped == 28
    assert budget.usage()["bytes_per_s"] == 16_600_000


def test_frames_over_the_cpu_share_are_dropped():
    clock = VirtualClock()
    budget = SendBudget(cpu_share=0.25, clock=clock.time)
    sent = 0
    for _ in range(100):                     # 100 frames of 20 ms CPU in 1 s: at most 0.25 s of it
        if budget.admit(1000, 0.02):
            budget.spend(1000, 0.02)
            sent += 1
        clock.advance(0.01)
    assert 12 <= sent <= 13 and budget.dropped == 100 - sent


def test_a_frame_bigger_than_the_budget_still_goes_out_once_per_window():
    clock = VirtualClock()
    budget = SendBudget(max_bytes_per_s=1_000_000, clock=clock.time)
    assert budget.admit(8_300_000, 0.0)
    budget.spend(8_300_000, 0.0)
    clock.advance(0.5)
    assert not budget.admit(8_300_000, 0.0)
    clock.advance(0.6)                       # the window emptied: the next one goes
    assert budget.admit(8_300_000, 0.0)


def test_the_link_budget_comes_from_the_video_section():
    cfg = video_config.VideoConfig(link_max_mib_per_s=2.0, link_cpu_share=0.1)
    budget = SendBudget.from_config(cfg)
    assert budget.max_bytes_per_s == 2 * 1024 * 1024 and budget.cpu_share == 0.1
