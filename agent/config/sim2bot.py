"""``sim2bot`` section: the agent as the simulator side of a Sim2Bot bridge.

See docs/sim2bot.md for what each setting changes on the wire.
"""

from __future__ import annotations

from typing import Annotated
from urllib.parse import urlparse

from pydantic import Field, StringConstraints, ValidationInfo, field_validator, model_validator

from agent.config.base import DelayS, Section

#: Most bridge rooms one agent serves (each costs two sockets, telemetry and its own streams).
MAX_ROOMS = 8
#: A room name the bridge keeps as it is (``bridge_server.normalize_room`` turns anything else
#: into ``default``).
RoomName = Annotated[str, StringConstraints(min_length=1, max_length=80, pattern=r"^[A-Za-z0-9._-]+$")]


class Sim2botConfig(Section):
    """Sim2Bot bridge connection (bridge protocol v1).

    Attributes:
        enabled: run the adapter.
        url: bridge control socket, ``ws://host:port/ws`` (or ``wss://``); frames go to the
            sibling ``/video``.
        room: pairing id (letters, digits, ``._-``, at most 80), or None for the bridge's
            default room. Sent in the hello and as the ``room`` query parameter.
        rooms: instead of ``room``, up to :data:`MAX_ROOMS` distinct rooms served at once (one
            control and one ``/video`` socket each): the bridge routes video per room, so one
            room per controller gives each controller only the formats it subscribed to.
        token: bridge token for non-loopback bridges, sent as ``Authorization: Bearer``.
        token_in_query: also send the token as the ``token`` query parameter (for proxies
            that drop headers; the query may end up in access logs).
        robot_id: the robot's ``id`` in the announced scene and in telemetry.
        telemetry_hz: telemetry polls per second (1..60): a packet goes out at a poll when the robot
            changed beyond noise since the last packet, or when ``telemetry_keepalive_s`` has passed.
        telemetry_keepalive_s: longest time between two telemetry packets while nothing changes, s
            (0: a packet at every poll, whatever changed).
        max_samples: most control-tick samples carried by one telemetry packet.
        max_message_bytes: larger incoming commands are rejected (the connection stays up).
        subscription_ttl_s: a camera subscription not renewed for this long stops, s.
        connect_timeout_s: WebSocket opening handshake timeout, s.
        ping_interval_s / ping_timeout_s: liveness of both sockets: a WebSocket ping every
            ping_interval_s, the link dropped when its pong has not come ping_timeout_s later, s
            (a dead bridge is noticed within their sum plus 0.5 s).
        refused_delay_s: pause before the next attempt after the bridge refused the robot
            (HTTP 401/403: a missing or wrong token), s.
        reconnect_delay_s / reconnect_delay_max_s: first and largest reconnect delay, s
            (doubled per failure, jittered, forever).
    """

    enabled: bool = False
    url: str = Field("ws://localhost:8765/ws", max_length=2048)
    room: RoomName | None = None
    rooms: list[RoomName] = Field(default_factory=list, max_length=MAX_ROOMS)
    token: str | None = Field(None, min_length=1, max_length=4096)
    token_in_query: bool = False
    robot_id: str = Field("tank", min_length=1, max_length=64, pattern=r"^[A-Za-z0-9._:-]+$")
    telemetry_hz: float = Field(30.0, ge=1.0, le=60.0)
    telemetry_keepalive_s: float = Field(1.0, ge=0.0, le=60.0)
    max_samples: int = Field(64, ge=1, le=256)
    max_message_bytes: int = Field(4 << 20, ge=1024, le=16 << 20)
    subscription_ttl_s: float = Field(3.0, ge=0.5, le=60.0)
    connect_timeout_s: DelayS = Field(5.0, le=60.0)
    ping_interval_s: float = Field(2.0, ge=0.2, le=60.0)
    ping_timeout_s: float = Field(3.0, ge=0.2, le=60.0)
    refused_delay_s: float = Field(60.0, ge=1.0, le=3600.0)
    reconnect_delay_s: DelayS = Field(0.5, le=60.0)
    reconnect_delay_max_s: DelayS = Field(10.0, le=600.0)

    @field_validator("url")
    @classmethod
    def _ws_url(cls, value: str) -> str:
        parsed = urlparse(value)
        if parsed.scheme not in ("ws", "wss"):
            raise ValueError(f"url must start with ws:// or wss://, got {value!r}")
        if not parsed.hostname:
            raise ValueError(f"url has no host: {value!r}")
        return value

    @field_validator("reconnect_delay_max_s")
    @classmethod
    def _max_delay(cls, value: float, info: ValidationInfo) -> float:
        first = info.data.get("reconnect_delay_s")
        if first is not None and value < first:
            raise ValueError(f"reconnect_delay_max_s {value} is below reconnect_delay_s {first}")
        return value

    @model_validator(mode="after")
    def _one_room_setting(self) -> Sim2botConfig:
        if self.rooms and self.room is not None:
            raise ValueError("set either room or rooms, not both")
        twice = sorted({r for r in self.rooms if self.rooms.count(r) > 1})
        if twice:
            raise ValueError(f"rooms lists {', '.join(twice)} more than once")
        return self

    @property
    def served_rooms(self) -> tuple[str | None, ...]:
        """The rooms to join, as configured: ``rooms``, else ``(room,)`` (None: the bridge's
        default room, no room sent on the wire)."""
        return tuple(self.rooms) or (self.room,)
