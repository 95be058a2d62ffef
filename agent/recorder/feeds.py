"""The recorder's two small tasks on the event loop: link states and camera frames.

Both only read and await (an adapter's ``status()``, the video hub's ``next_encoded``) and hand what
they got to the recorder's bounded queues; the recorder thread does the rest (agent.recorder.recorder).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

log = logging.getLogger(__name__)

#: link states are read this often, s
LINK_POLL_S = 0.1


async def watch_links(recorder: Any, adapters: dict[str, Any]) -> None:
    """Queue every change of a link's state (adapter ``status()``: state, connected, last error) as a
    ``/links`` event (``connect``, ``drop``, or the new state) until cancelled."""
    seen: dict[str, tuple[str, bool]] = {}
    while True:
        for name, adapter in list(adapters.items()):
            try:
                st = adapter.status()
                state = getattr(st.state, "value", str(st.state))
                key = (state, bool(st.connected))
            except Exception:  # noqa: BLE001 - an adapter's status bug must not stop the watch
                continue
            if seen.get(name) != key:
                before = seen.get(name)
                seen[name] = key
                event = "connect" if key[1] else ("drop" if before is not None and before[1] else state)
                recorder.event("/links", time.time(), {"link": name, "state": state, "connected": key[1],
                                                       "event": event, "last_error": str(st.last_error or "")})
        await asyncio.sleep(LINK_POLL_S)


async def watch_camera(recorder: Any, video: Any, camera_id: str, fps: float, quality: int) -> None:
    """Queue one JPEG of ``camera_id`` every ``1/fps`` s until cancelled.

    The frame is asked for in ARTEX's own format (``FrameFormat("jpeg", quality=artex.jpeg_quality)``):
    the hub encodes a frame once per format, so while ARTEX streams the recorder gets ARTEX's JPEG.
    """
    from agent.video import FrameFormat
    fmt = FrameFormat("jpeg", quality=quality)
    period, after = 1.0 / fps, 0
    loop = asyncio.get_running_loop()
    while True:
        started = loop.time()
        try:
            enc = await video.next_encoded(camera_id, fmt, after, period * 2)
        except Exception as err:  # noqa: BLE001 - a camera error: skip this frame, keep going
            log.debug("recorder: camera %s: %s", camera_id, err)
            enc = None
        if enc is not None:
            after = enc.seq
            recorder.frame(camera_id, enc.t_unix_s, bytes(enc.data))
        await asyncio.sleep(max(0.0, period - (loop.time() - started)))
