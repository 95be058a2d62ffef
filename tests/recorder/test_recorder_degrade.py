"""A full disk under the running agent: the tank keeps driving, the recorder is degraded (logged once,
shown in the status), and every file left behind opens with the ``mcap`` reader. The disk is a real
small tmpfs where root may mount one, and everywhere an ``ENOSPC`` from the writer's file object once
the recordings pass 150 kB."""

from __future__ import annotations

import asyncio
import contextlib
import errno
from pathlib import Path

import pytest
from mcap.reader import make_reader

from agent.commands import BaseVelocity
from agent.recorder.writer import _File, recordings
from agent.ops.status import gather
from agent.testing.running_agent import running_agent, sim_config
from tests.recorder.test_writer import small_tmpfs

pytestmark = pytest.mark.timeout(120)


@contextlib.contextmanager
def injected_full_disk(path: Path, monkeypatch, limit: int = 150_000):
    real, total = _File.write, [0]

    def write(self, data):
        if total[0] + len(data) > limit and len(data) > 64:      # the 50-byte tail still fits, as on a disk
            n = max(0, limit - total[0])                        # whose full chunk was cut back
            real(self, bytes(data)[:n])
            total[0] += n
            raise OSError(errno.ENOSPC, "No space left on device")
        total[0] += len(data)
        return real(self, data)
    monkeypatch.setattr(_File, "write", write)
    path.mkdir()
    yield path


@pytest.mark.parametrize("disk_kind", ["tmpfs", "injected"])
async def test_a_full_disk_leaves_the_agent_driving_and_the_recorder_degraded(tmp_path, caplog, monkeypatch,
                                                                                disk_kind):
    full = small_tmpfs(tmp_path / "disk", "192k") if disk_kind == "tmpfs" else \
        injected_full_disk(tmp_path / "disk", monkeypatch)
    with full as disk:
        cfg = sim_config(recorder={"enabled": True, "dir": str(disk), "frame_fps": 10, "chunk_max_s": 0.2})
        async with running_agent(cfg) as agent:
            async def drive_until(pred, timeout_s: float) -> bool:
                async def step() -> bool:
                    agent.control.submit("artex", BaseVelocity(0.4, 0.0))
                    return bool(pred())
                for _ in range(int(timeout_s / 0.05)):
                    if await step():
                        return True
                    await asyncio.sleep(0.05)
                return bool(pred())

            assert await drive_until(lambda: agent.recorder.degraded, 30), agent.recorder.status()
            assert "No space left" in agent.recorder.degraded
            assert gather(agent)["recorder"]["degraded"] == agent.recorder.degraded
            # the tank still obeys: it drives, and stops on a stop
            assert await drive_until(lambda: agent.physics.vx_mps > 0.2, 10), "the tank did not drive"
            before = agent.recorder.status()["bytes_written"]
            assert await drive_until(lambda: False, 0.5) is False
            assert agent.recorder.status()["bytes_written"] == before          # nothing written after
        assert sum("recording stopped" in r.getMessage() for r in caplog.records) == 1
        files = recordings(disk)
        assert files
        for path in files:
            with open(path, "rb") as fh:
                topics = {ch.topic for _, ch, _ in make_reader(fh).iter_messages()}
            assert "/drive" in topics
