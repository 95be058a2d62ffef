"""Cameras: capture, shared encoding and budgets (docs/architecture.md, "Video").

- :mod:`agent.video.frames`: :class:`Frame`, :class:`FrameFormat`, :class:`EncodedFrame`, :func:`encode`;
- :mod:`agent.video.capture`: :class:`Capture`, the hub's capture component: a device thread per camera, supervision, capture-on-demand with a health probe;
- :mod:`agent.video.hub`: :class:`VideoHub`, the shared latest-frame hub and encode cache;
- :mod:`agent.video.budget`: encoder CPU share, per-link send budget, message wire size, per-link pacing;
- :mod:`agent.video.wsframes`: big binary WebSocket messages as masked fragments (client side).

The names below load their module when first used (PEP 562): an adapter taking
``FrameFormat`` does not load the hub, its capture threads and OpenCV in a config
without cameras.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent.support.lazy import lazy_names

_WHERE = {
    "agent.video.budget": ("CpuBudget", "LinkPacer", "LinkRate", "SendBudget", "fit_ladder", "json_wire_size",
                           "socketio_wire_size"),
    "agent.video.frames": ("ENCODERS", "EncodedFrame", "Frame", "FrameFormat", "content_digest", "encode"),
    "agent.video.hub": ("CACHE_MAX_BYTES", "MAX_CACHED_ENCODES", "VideoHub", "hub_from_config"),
}

if TYPE_CHECKING:
    from agent.video.budget import (CpuBudget, LinkPacer, LinkRate, SendBudget, fit_ladder, json_wire_size,
                                    socketio_wire_size)
    from agent.video.frames import ENCODERS, EncodedFrame, Frame, FrameFormat, content_digest, encode
    from agent.video.hub import CACHE_MAX_BYTES, MAX_CACHED_ENCODES, VideoHub, hub_from_config

__getattr__ = lazy_names(__name__, _WHERE)

__all__ = ["CACHE_MAX_BYTES", "ENCODERS", "MAX_CACHED_ENCODES", "CpuBudget", "EncodedFrame", "Frame",
           "FrameFormat", "LinkPacer", "SendBudget", "VideoHub", "content_digest", "encode", "fit_ladder",
           "hub_from_config", "json_wire_size", "socketio_wire_size"]
