"""``artex`` section: the agent's own ARTEX settings beyond the SDK's top-level keys.

The SDK's keys (``server``, ``port``, ``max_send_freq``, ``telem_can``,
``video_can``...) stay at the top level of params.json with the SDK's meaning
and defaults (see agent.config). See docs/artex.md for the protocol mapping.
"""

from __future__ import annotations

from pydantic import Field, field_validator, model_validator

from agent.config.base import DelayS, Section

#: ``com`` name handled by the adapter itself (a Stop); it cannot be configured.
BUILTIN_STOP = "stop"


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


#: The smallest operator speed limit, m/s (as ``base.max_speed_mps``'s floor).
MIN_SPEED_LIMIT_MPS = 0.01


class ArtexConfig(Section):
    """ARTEX robot role.

    Attributes:
        commands: ``com`` name -> motion; ``stop`` is built in and always stops.
        log_tail_kib: ``file`` log/error content is the last this many KiB (<= 900: a python-socketio hub drops
            messages over 1 MB by default).
        jpeg_quality: video JPEG quality (the SDK's 80).
        reconnect_delay_s / reconnect_delay_max_s: first and largest reconnect delay, s (jittered, forever).
        connect_timeout_s: how long one connection attempt (Engine.IO + ``/robot`` namespace) may take, s.
        ping_interval_s: liveness: after this long without a byte from the hub the agent sends a
            WebSocket ping and drops the link when no pong comes within half of it, so a dead link is
            declared within 1.5 x ping_interval_s (6 s by default) of the last byte received, s.
        refused_delay_s: pause before the next attempt after the hub refused the robot (namespace
            connect rejected, or kicked twice in a row soon after connecting), s.
        telem_keepalive_s: telemetry is sent when it changed, and at least this often even when it did
            not (a hub may use it as "last seen"), s.
        max_speed_mps: operator speed limit, m/s, set from the ARTEX web UI (``web_settings``);
            applied with ``robot.set_limits`` when the adapter starts; None = no extra limit.
            Must not exceed ``base.max_speed_mps`` (the track speed at full duty).
    """

    commands: dict[str, MotionConfig] = Field(default_factory=_default_commands, max_length=64)
    log_tail_kib: int = Field(64, ge=1, le=900)
    jpeg_quality: int = Field(80, ge=1, le=100)
    reconnect_delay_s: DelayS = Field(1.0, le=60)
    reconnect_delay_max_s: DelayS = Field(5.0, le=600)
    connect_timeout_s: DelayS = Field(5.0, le=60)
    max_speed_mps: float | None = Field(None, gt=0, le=20)
    ping_interval_s: float = Field(4.0, ge=0.2, le=60)
    refused_delay_s: float = Field(60.0, ge=1, le=3600)
    telem_keepalive_s: float = Field(1.0, ge=0.05, le=60)

    @field_validator("commands")
    @classmethod
    def _command_names(cls, commands: dict[str, MotionConfig]) -> dict[str, MotionConfig]:
        for name in commands:
            if not 1 <= len(name) <= 64:
                raise ValueError(f"command name {name!r} must be 1..64 characters")
            if name == BUILTIN_STOP:
                raise ValueError(f"command name {BUILTIN_STOP!r} is built in (always a Stop) and cannot be configured")
        return commands

    @field_validator("max_speed_mps")
    @classmethod
    def _speed_floor(cls, limit: float | None) -> float | None:
        if limit is not None and limit < MIN_SPEED_LIMIT_MPS:   # 0 or below: refused by gt=0 first
            raise ValueError(f"{limit:g} m/s is below {MIN_SPEED_LIMIT_MPS} m/s, the smallest speed limit "
                             "(base.max_speed_mps has the same floor); a smaller one would leave the tank immobile")
        return limit

    @model_validator(mode="after")
    def _delays(self) -> ArtexConfig:
        if self.reconnect_delay_max_s < self.reconnect_delay_s:
            raise ValueError(f"reconnect_delay_max_s {self.reconnect_delay_max_s} is below "
                             f"reconnect_delay_s {self.reconnect_delay_s}")
        return self
