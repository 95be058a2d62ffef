"""``sim2bot`` section: the agent as the simulator side of a Sim2Bot bridge."""

from __future__ import annotations

from pydantic import Field

from agent.config.base import Section


class Sim2botConfig(Section):
    """Sim2Bot bridge connection.

    Attributes:
        url: bridge control socket, ``ws://host:port/ws``; frames go to the sibling ``/video``.
        room: pairing id (letters, digits, ``._-``), or None for the default room.
        token: bridge token for non-loopback bridges (sent as a Bearer header).
        telemetry_hz: telemetry packets per second (1..60).
    """

    enabled: bool = False
    url: str = "ws://localhost:8765/ws"
    room: str | None = Field(None, max_length=80, pattern=r"^[A-Za-z0-9._-]+$")
    token: str | None = None
    telemetry_hz: float = Field(30.0, ge=1.0, le=60.0)
    robot_id: str = "tank"
