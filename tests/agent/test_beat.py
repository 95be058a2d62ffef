"""agent/support/beat.py: the event loop's periodic pauses share wake-ups and keep their rates.

Run on agent.testing.clock.VirtualTimeLoop (a real asyncio loop on virtual time): no wall-clock
waits, and the loop counts each time it would have slept until a timer (a wake-up of its thread).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from agent.support import beat
from agent.testing.clock import VirtualTimeLoop

Sleep = Callable[[float], Awaitable[object]]


def run(main: Callable[[VirtualTimeLoop], Awaitable[object]], start: float = 1000.003) -> VirtualTimeLoop:
    loop = VirtualTimeLoop(start)
    try:
        loop.run_until_complete(main(loop))
    finally:
        loop.close()
    return loop


async def scheduled(loop: asyncio.AbstractEventLoop, sleep: Sleep, period: float, end: float,
                    woke: list[float]) -> None:
    """A sender on a schedule (``due += period``), as Sim2Bot telemetry and camera pacing are."""
    due = loop.time()
    while True:
        due += period
        if due >= end:
            return
        await sleep(due - loop.time())
        woke.append(loop.time())


async def after_work(loop: asyncio.AbstractEventLoop, sleep: Sleep, period: float, end: float,
                     woke: list[float]) -> None:
    """A sender pausing one period after its work (ARTEX telem); the work takes 3 ms."""
    while loop.time() + period < end:
        await sleep(period)
        woke.append(loop.time())
        loop.now += 0.003       # type: ignore[attr-defined]


async def publisher(loop: asyncio.AbstractEventLoop, period: float, end: float, woke: list[float]) -> None:
    """A fixed-rate publisher on its own slots ``k * period`` (robot_msg's RobotState)."""
    while True:
        next_t = beat.slot_index(loop.time(), period) * period
        if next_t >= end:
            return
        fired = loop.create_future()
        loop.call_at(next_t, fired.set_result, None)
        await fired
        woke.append(loop.time())


def senders(sleep: Sleep, seconds: float = 2.0) -> tuple[VirtualTimeLoop, dict[str, list[float]]]:
    woke: dict[str, list[float]] = {"state 50 Hz": [], "telemetry 30 Hz": [], "camera 20 fps": [],
                                    "telem 10 Hz": []}

    async def main(loop: VirtualTimeLoop) -> None:
        end = loop.time() + seconds
        await asyncio.gather(publisher(loop, 0.02, end, woke["state 50 Hz"]),
                             scheduled(loop, sleep, 1 / 30, end, woke["telemetry 30 Hz"]),
                             scheduled(loop, sleep, 1 / 20, end, woke["camera 20 fps"]),
                             after_work(loop, sleep, 0.1, end, woke["telem 10 Hz"]))
    return run(main), woke


def test_senders_at_four_rates_wake_the_loop_only_at_the_fastest_ones_slots():
    loop, woke = senders(beat.sleep)
    # 100 slots in 2 s: every other sender wakes in a slot the 50 Hz publisher wakes in anyway
    assert loop.wakeups <= 101, loop.wakeups
    alone, _ = senders(asyncio.sleep)           # each on its own timer: the loop woke for each
    assert alone.wakeups >= 170, alone.wakeups
    for name, times in woke.items():
        assert all(abs(t - beat.nearest_slot(t)) < 0.0035 for t in times), name   # on the grid (+ 3 ms work)


def test_each_sender_keeps_its_rate_and_is_at_most_half_a_slot_off():
    _, woke = senders(beat.sleep)
    counts = {name: len(times) for name, times in woke.items()}
    assert counts == {"state 50 Hz": pytest.approx(100, abs=1), "telemetry 30 Hz": pytest.approx(60, abs=1),
                      "camera 20 fps": pytest.approx(40, abs=1), "telem 10 Hz": pytest.approx(20, abs=1)}
    start = 1000.003
    for period, name in ((1 / 30, "telemetry 30 Hz"), (1 / 20, "camera 20 fps")):
        for k, t in enumerate(woke[name], 1):
            assert abs(t - (start + k * period)) <= beat.SLOT_S / 2 + 1e-9, (name, k, t)
    gaps = [b - a for a, b in zip(woke["telem 10 Hz"], woke["telem 10 Hz"][1:])]
    assert all(g == pytest.approx(0.1, abs=1e-6) for g in gaps), gaps    # 3 ms of work, still 10 Hz


def test_a_pause_shorter_than_a_slot_ends_as_asked():
    got: list[float] = []

    async def main(loop: VirtualTimeLoop) -> None:
        t0 = loop.time()
        await beat.sleep(0.005)
        got.append(loop.time() - t0)
        await beat.sleep(0.0)
        await beat.sleep(-1.0)
        got.append(loop.time() - t0)
    loop = run(main)
    assert got == [pytest.approx(0.005, abs=1e-9), pytest.approx(0.005, abs=1e-9)]
    assert loop.wakeups == 1


def test_a_long_pause_ends_on_the_nearest_slot_with_its_result():
    got: list[tuple[float, object]] = []

    async def main(loop: VirtualTimeLoop) -> None:
        for delay in (0.02, 0.031, 0.049, 0.25):
            asked = loop.time() + delay
            result = await beat.sleep(delay, result=delay)
            got.append((loop.time() - asked, result))
            assert loop.time() == pytest.approx(beat.nearest_slot(loop.time()), abs=1e-9)
    run(main)
    assert [r for _, r in got] == [0.02, 0.031, 0.049, 0.25]
    assert all(abs(off) <= beat.SLOT_S / 2 + 1e-9 for off, _ in got), got


def test_a_cancelled_pause_leaves_no_timer_behind():
    async def main(loop: VirtualTimeLoop) -> None:
        pause = asyncio.ensure_future(beat.sleep(0.5))
        await asyncio.sleep(0)
        pause.cancel()
        with pytest.raises(asyncio.CancelledError):
            await pause
        # no wall time (VirtualTimeLoop): one wake-up; the cancelled pause's slot (0.5 s) wakes nobody
        await asyncio.sleep(2.0)
    loop = run(main)
    assert loop.wakeups == 1 and loop.now == pytest.approx(1002.003)


def test_slots_of_a_fixed_rate_publisher_are_strictly_later_and_on_its_period():
    assert beat.slot_index(0.0, 0.02) == 1
    assert beat.slot_index(0.0399, 0.02) == 2
    assert beat.slot_index(1000.0, 0.02) * 0.02 > 1000.0
    assert beat.slot_index(1000.001, 0.02) * 0.02 == pytest.approx(1000.02)
    assert beat.nearest_slot(0.031) == pytest.approx(0.04) and beat.nearest_slot(0.029) == pytest.approx(0.02)
