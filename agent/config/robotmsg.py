"""``robot_msg`` section: RobotState out, RobotAction and ControllerCommand in, over ZeroMQ."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from agent.config.base import Section


class RobotMsgConfig(Section):
    """robot_msg over ZeroMQ. Loopback by default: ZeroMQ here has no authentication.

    Attributes:
        state_hz: RobotState publish rate, Hz.
        encoding: ``binary`` (R2) or ``json`` envelopes.
        max_frame_bytes: larger incoming frames are rejected.
    """

    enabled: bool = False
    state_hz: float = Field(50.0, gt=0, le=1000)
    encoding: Literal["binary", "json"] = "binary"
    max_frame_bytes: int = Field(1 << 20, ge=1024, le=64 << 20)
