"""``video`` section: the budgets of the video pipeline (agent.video, every video link).

All video budget settings live here (docs/architecture.md, "Video").
"""

from __future__ import annotations

from pydantic import Field

from agent.config.base import Section


class VideoConfig(Section):
    """Frame size, age and CPU budgets shared by every video link.

    Attributes:
        max_message_bytes: largest ARTEX message (``video``, ``file``) as python-socketio puts it on
            the wire, bytes; below python-socketio's default ``max_http_buffer_size`` (1,000,000)
            with margin. A bigger frame is re-encoded smaller or skipped.
        max_frame_age_s: a frame older than this (capture -> handed to the socket) is never sent, s.
        encode_cpu_share: share of one core the encoders may use (drop frames first), 0.05..1.
        link_max_mib_per_s: wire bytes per second one link may spend on video (a Sim2Bot ``/video``
            socket), MiB/s; a frame that would go over it is dropped (the stream's fps falls).
        link_cpu_share: share of one core one link may spend on video (encode + pack + send of its
            frames, drop frames first), 0.05..1.
        cache_max_mib: encoded bytes kept per camera, MiB.
        probe_period_s: while nobody watches a camera, one frame every this many s (health probe).
        idle_after_s: one frame request counts as someone watching for this long, s.
    """

    max_message_bytes: int = Field(900_000, ge=65_536, le=100_000_000)
    max_frame_age_s: float = Field(0.5, gt=0.0, le=10.0)
    encode_cpu_share: float = Field(0.3, ge=0.05, le=1.0)
    link_max_mib_per_s: float = Field(64.0, gt=0.0, le=10_000.0)
    link_cpu_share: float = Field(0.25, ge=0.05, le=1.0)
    cache_max_mib: float = Field(64.0, ge=1.0, le=4096.0)
    probe_period_s: float = Field(5.0, gt=0.0, le=60.0)
    idle_after_s: float = Field(3.0, gt=0.0, le=60.0)
