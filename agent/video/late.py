"""The cameras' VideoPort before their hub exists: what an adapter started early holds.

The agent starts the ARTEX adapter while the devices open, before OpenCV and the video hub load
(agent.app.Agent.start): its hub connection is not behind them. That adapter gets a
:class:`LateVideo` on the configured camera ids; the hub is handed to it once built
(:meth:`LateVideo.attach`) and every call goes to the hub from then on. Until then a wait for a
frame waits for the hub within its own timeout (None when the hub is not there by then), as a
wait on a camera that has no frame yet does. Loads neither OpenCV nor the hub.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

from agent.errors import CommandDeclined

if TYPE_CHECKING:
    from agent.ports import VideoPort
    from agent.video.frames import EncodedFrame, Frame, FrameFormat


class LateVideo:
    """A VideoPort (agent.ports) whose video hub arrives later.

    Args:
        camera_ids: the configured camera ids, in config order (``cfg.drivers.cameras``' ``id``).

    Attributes:
        hub: the attached hub, or None before :meth:`attach`.
    """

    def __init__(self, camera_ids: tuple[str, ...]) -> None:
        self._ids = tuple(camera_ids)
        self.hub: VideoPort | None = None
        self._attached = asyncio.Event()

    @property
    def camera_ids(self) -> tuple[str, ...]:
        """Configured camera ids, in config order."""
        return self._ids

    def attach(self, hub: VideoPort) -> None:
        """Hand over the video hub (on the event loop); waiting calls go on to it."""
        self.hub = hub
        self._attached.set()

    async def _hub(self, camera_id: str, timeout_s: float) -> tuple[VideoPort | None, float]:
        """(the hub, or None when it did not come within ``timeout_s``; the time left of it, s).

        Raises:
            CommandDeclined: ``camera_id`` is not configured (as the hub says it).
        """
        if self.hub is None and camera_id not in self._ids:
            raise CommandDeclined(f"unknown camera {camera_id!r}; known: {', '.join(self._ids) or 'none'}")
        if self.hub is not None:
            return self.hub, timeout_s
        start = time.monotonic()
        try:
            async with asyncio.timeout(max(0.0, timeout_s)):
                await self._attached.wait()
        except TimeoutError:
            return None, 0.0
        return self.hub, max(0.0, timeout_s - (time.monotonic() - start))

    async def next_frame(self, camera_id: str, after_seq: int, timeout_s: float) -> Frame | None:
        """The hub's :meth:`next_frame` (agent.ports.VideoPort); None when the hub is not there within
        ``timeout_s``."""
        hub, left = await self._hub(camera_id, timeout_s)
        return None if hub is None else await hub.next_frame(camera_id, after_seq, left)

    async def next_encoded(self, camera_id: str, fmt: FrameFormat, after_seq: int,
                           timeout_s: float) -> EncodedFrame | None:
        """The hub's :meth:`next_encoded`; None when the hub is not there within ``timeout_s``."""
        hub, left = await self._hub(camera_id, timeout_s)
        return None if hub is None else await hub.next_encoded(camera_id, fmt, after_seq, left)

    async def encoded_within(self, frame: Frame, fmt: FrameFormat, max_bytes: int,
                             level: int = 0) -> tuple[EncodedFrame | None, int]:
        """The hub's :meth:`encoded_within` (a frame comes from the hub, so it is there)."""
        await self._attached.wait()
        assert self.hub is not None
        return await self.hub.encoded_within(frame, fmt, max_bytes, level)
