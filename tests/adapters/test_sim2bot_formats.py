"""Two real ``sim2bot.Robot`` controllers on one camera in different formats (issue 11).

What the v1 bridge allows (docs/sim2bot.md, "Two controllers, two formats"): the bridge
relays every ``/video`` message to every controller in the room and the reference reader
keys frames by camera id only, so each controller also sees the other's format; the agent
guarantees that each controller's own format keeps flowing at its rate, and that the other
controller's ``camera_unsubscribe`` neither interrupts it nor keeps the other format alive.
"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from agent.adapters.sim2bot_video import UNSUBSCRIBE_GRACE_S
from agent.testing.running_agent import running_agent
from agent.testing.sim2bot_bridge import Bridge, agent_params, controller

pytestmark = pytest.mark.filterwarnings("ignore:connect\\(\\) must be used as a context manager")


@pytest.fixture(scope="module")
def bridge():
    with Bridge() as b:
        yield b


class Reader:
    """Reads a CameraStream on a thread, keeping (arrival time, codec, width, height) of every frame."""

    def __init__(self, stream) -> None:
        self.stream = stream
        self.frames: list[tuple[float, int, int, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            frame = self.stream.read(0.2)
            if frame is not None:
                self.frames.append((time.monotonic(), frame.codec, frame.width, frame.height))

    def of(self, codec: int, width: int) -> list[float]:
        return [t for t, c, w, _ in self.frames if c == codec and w == width]

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2)


def max_gap(times: list[float], start: float, end: float) -> float:
    inside = [start] + [t for t in times if start <= t <= end] + [end]
    return max(b - a for a, b in zip(inside, inside[1:]))


async def test_two_formats_each_flow_and_one_unsubscribe_does_not_stop_the_other(bridge):
    async with running_agent(agent_params(bridge)) as agent, controller(bridge) as a, controller(bridge) as b:
        stream_a = a.camera("model:0", fps=10, width=160, height=120, quality=0.6)
        stream_b = b.camera("model:0", fps=10, width=64, height=48, codec="raw")
        reader_a, reader_b = Reader(stream_a), Reader(stream_b)
        try:
            await asyncio.sleep(2.0)
            assert len(reader_a.of(0, 160)) >= 8, "A's JPEG 160x120 does not flow"
            assert len(reader_b.of(2, 64)) >= 8, "B's raw 64x48 does not flow"
            assert {(c, w, h) for _, c, w, h in reader_a.frames} <= {(0, 160, 120), (2, 64, 48)}
            closed = time.monotonic()
            await asyncio.to_thread(stream_b.close)          # B unsubscribes model:0
            await asyncio.sleep(UNSUBSCRIBE_GRACE_S + 1.5)
            gap = max_gap(reader_a.of(0, 160), closed, closed + UNSUBSCRIBE_GRACE_S + 1.0)
            assert gap < 0.7, f"A's stream paused {gap:.2f} s after B's unsubscribe"
            late_raw = [t for t in reader_a.of(2, 64) if t > closed + UNSUBSCRIBE_GRACE_S + 0.5]
            assert late_raw == [], "B's format outlived its unsubscribe"
            status = agent.adapters["sim2bot"].status()
            streams = [name for name, v in status.detail["video"].items() if isinstance(v, dict) and "sent" in v]
            assert status["streams"] == 1 and streams == ["model:0 0 160x120@10"]
        finally:
            reader_a.close()
            reader_b.close()
            await asyncio.to_thread(stream_a.close)
