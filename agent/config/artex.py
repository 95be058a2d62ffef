"""``artex`` section: the agent's own ARTEX settings beyond the SDK's top-level keys.

The SDK's keys (``server``, ``port``, ``max_send_freq``...) stay at the top
level of params.json with the SDK's meaning and defaults (see agent.config).
"""

from __future__ import annotations

from pydantic import Field

from agent.config.base import Section


class MotionConfig(Section):
    """What one ``{"com": NAME}`` command does: a body twist held under the watchdog.

    Attributes:
        vx: forward speed, m/s. omega: yaw rate, rad/s (+ left).
    """

    vx: float = Field(0.0, ge=-20, le=20)
    omega: float = Field(0.0, ge=-20, le=20)


def _default_commands() -> dict[str, MotionConfig]:
    return {
        "forward": MotionConfig(vx=0.3),
        "back": MotionConfig(vx=-0.3),
        "left": MotionConfig(omega=1.0),
        "right": MotionConfig(omega=-1.0),
    }


class ArtexConfig(Section):
    """ARTEX robot role.

    Attributes:
        commands: ``com`` name -> motion; ``stop`` is built in and always stops.
        log_tail_kib: ``file`` log/error content is the last this many KiB.
        jpeg_quality: video JPEG quality (the SDK's 80).
        reconnect_delay_s / reconnect_delay_max_s: first and largest reconnect delay, s (jittered, forever).
    """

    commands: dict[str, MotionConfig] = Field(default_factory=_default_commands)
    log_tail_kib: int = Field(64, ge=1, le=4096)
    jpeg_quality: int = Field(80, ge=1, le=100)
    reconnect_delay_s: float = Field(1.0, gt=0, le=60)
    reconnect_delay_max_s: float = Field(5.0, gt=0, le=600)
