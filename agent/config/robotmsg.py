"""``robot_msg`` section: RobotState out, RobotAction and ControllerCommand in, over ZeroMQ.

Defaults follow ``robot_msg.ports`` (state 28400, controller command 28401,
action 28402) and bind on loopback: ZeroMQ without CURVE has no
authentication, so binding anywhere else needs either ``curve`` (encryption and,
with ``authorized_keys_dir``, client authentication) or an explicit
``allow_unauthenticated: true``. See docs/robot_msg.md for the wire mapping.
"""

from __future__ import annotations

import ipaddress
from typing import Literal
from urllib.parse import urlsplit

from pydantic import Field, field_validator, model_validator

from agent.config.base import DelayS, RateHz, Section

#: ``robot_msg.ports`` ROBOT_STATE, CONTROLLER_COMMAND, ROBOT_ACTION, copied: importing ``robot_msg``
#: loads every message module (~25 ms of each start, robot_msg on or off). A test checks they agree.
ROBOT_STATE_PORT, CONTROLLER_COMMAND_PORT, ROBOT_ACTION_PORT = 28400, 28401, 28402

#: What a ``ctrl_mode`` value can do (docs/robot_msg.md, "ctrl_mode").
CtrlAction = Literal["stop", "hold", "home"]


def _default_modes() -> dict[int, CtrlAction]:
    return {0: "stop", 1: "hold", 2: "home"}


def is_local_address(address: str) -> bool:
    """True when a ZeroMQ endpoint is reachable only from this machine (loopback TCP, ipc, inproc)."""
    scheme, _, rest = address.partition("://")
    if scheme in ("ipc", "inproc"):
        return True
    host = urlsplit(f"//{rest}").hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class SocketConfig(Section):
    """One ZeroMQ socket.

    Attributes:
        address: endpoint, ``tcp://HOST:PORT`` or ``ipc://PATH``; a bound socket may use
            ``tcp://HOST:*`` (a free port; the adapter's ``status()`` shows which).
        mode: ``bind`` (the agent listens) or ``connect`` (the agent dials the peer).
        topic: when set, messages are two frames ``[topic, envelope]`` and a subscriber
            accepts only this exact topic; when None, one frame (a received two-frame
            message is accepted whatever its topic).
    """

    address: str = Field(max_length=256)
    mode: Literal["bind", "connect"] = "bind"
    topic: str | None = Field(None, min_length=1, max_length=255)

    @field_validator("address")
    @classmethod
    def _endpoint(cls, value: str) -> str:
        scheme, sep, rest = value.partition("://")
        if not sep or scheme not in ("tcp", "ipc") or not rest:
            raise ValueError(f"address must be tcp://HOST:PORT or ipc://PATH, got {value!r}")
        if scheme == "tcp":
            host, colon, port_text = rest.rpartition(":")
            if port_text == "*" and host:
                return value
            parts = urlsplit(f"//{rest}")
            try:
                port = parts.port
            except ValueError:
                port = None
            if not parts.hostname or port is None or not 1 <= port <= 65535:
                raise ValueError(f"tcp address needs a host and a port 1..65535 (or * to bind "
                                 f"any free port), got {value!r}")
        return value

    @model_validator(mode="after")
    def _wildcard_port(self) -> "SocketConfig":
        if self.mode == "connect" and self.address.endswith(":*"):
            raise ValueError(f"a connecting socket needs a port, got {self.address!r}")
        return self


class CurveConfig(Section):
    """CURVE encryption and authentication (ZeroMQ RFC 26), certificates in ``zmq.auth`` format.

    Relative paths are resolved against the directory of params.json.

    Attributes:
        secret_key_file: the agent's certificate with its secret key (``*.key_secret`` written
            by ``zmq.auth.create_certificates``). Bound sockets are CURVE servers with it;
            connecting sockets are CURVE clients with it.
        authorized_keys_dir: bound sockets accept only clients whose public certificate
            (``*.key``) is in this directory. None: any client that knows the agent's public
            key (encrypted, but clients are not authenticated).
        server_key_file: public certificate of the peer that connecting sockets dial;
            required when any socket connects.
    """

    secret_key_file: str = Field(min_length=1, max_length=4096)
    authorized_keys_dir: str | None = Field(None, min_length=1, max_length=4096)
    server_key_file: str | None = Field(None, min_length=1, max_length=4096)


class RobotMsgConfig(Section):
    """robot_msg over ZeroMQ PUB/SUB. Loopback by default: ZeroMQ here has no authentication.

    Attributes:
        enabled: run the adapter.
        state: PUB socket for RobotState (default ``tcp://127.0.0.1:28400``, bind).
        command: SUB socket for ControllerCommand (default ``tcp://127.0.0.1:28401``, bind).
        action: SUB socket for RobotAction (default ``tcp://127.0.0.1:28402``, bind).
        state_hz: RobotState publish rate, Hz.
        encoding: ``binary`` (R2) or ``json`` envelopes for what the agent sends; received
            envelopes may be either (told apart by their first byte).
        max_frame_bytes: larger received messages are rejected and counted (``oversize``),
            read part by part and never copied; frames over twice this never enter memory
            (ZMQ_MAXMSGSIZE drops the connection), and a message over twice this (bytes, or parts at 64 B each)
            drops the socket's peers too (agent/adapters/robotmsg_guard.py).
        rcvhwm / sndhwm: ZeroMQ high-water marks, messages (small: newest wins, no backlog).
        frame_id: RobotState reference frame (base body frame, x forward, y left, z up).
        odom_frame_id: frame of the odometry pose aux arrays.
        imu_world_frame_id: reference frame of the IMU orientation aux array.
        ctrl_modes: ControllerCommand ``ctrl_mode`` value -> ``stop`` | ``hold`` | ``home``;
            other values are rejected. Must contain at least one ``stop``.
        curve: CURVE keys; None = plain TCP.
        allow_unauthenticated: permit binding a non-loopback address without ``curve``.
        reconnect_delay_s / reconnect_delay_max_s: first and largest delay between attempts
            to bind/connect (jittered, forever); also ZeroMQ's own reconnect interval.
    """

    enabled: bool = False
    state: SocketConfig = Field(default_factory=lambda: SocketConfig(address=f"tcp://127.0.0.1:{ROBOT_STATE_PORT}"))
    command: SocketConfig = Field(
        default_factory=lambda: SocketConfig(address=f"tcp://127.0.0.1:{CONTROLLER_COMMAND_PORT}"))
    action: SocketConfig = Field(default_factory=lambda: SocketConfig(address=f"tcp://127.0.0.1:{ROBOT_ACTION_PORT}"))
    state_hz: RateHz = Field(50.0, le=1000)
    encoding: Literal["binary", "json"] = "binary"
    max_frame_bytes: int = Field(1 << 20, ge=1024, le=64 << 20)
    rcvhwm: int = Field(16, ge=1, le=10_000)
    sndhwm: int = Field(16, ge=1, le=10_000)
    frame_id: str = Field("base_link", min_length=1, max_length=128)
    odom_frame_id: str = Field("odom", min_length=1, max_length=128)
    imu_world_frame_id: str = Field("imu_world", min_length=1, max_length=128)
    ctrl_modes: dict[int, CtrlAction] = Field(default_factory=_default_modes, max_length=51)
    curve: CurveConfig | None = None
    allow_unauthenticated: bool = False
    reconnect_delay_s: DelayS = Field(0.1, le=60)
    reconnect_delay_max_s: DelayS = Field(5.0, le=600)

    @field_validator("ctrl_modes")
    @classmethod
    def _modes(cls, modes: dict[int, CtrlAction]) -> dict[int, CtrlAction]:
        bad = [m for m in modes if not 0 <= m <= 50]
        if bad:
            raise ValueError(f"ctrl_mode values must be 0..50 (the schema's range), got {bad}")
        if "stop" not in modes.values():
            raise ValueError("ctrl_modes needs at least one mode mapped to 'stop'")
        return modes

    @model_validator(mode="after")
    def _sockets(self) -> "RobotMsgConfig":
        named = {"state": self.state, "command": self.command, "action": self.action}
        bound = [s.address for s in named.values() if s.mode == "bind" and not s.address.endswith(":*")]
        if len(bound) != len(set(bound)):
            raise ValueError(f"two sockets bind the same address: {bound}")
        if self.reconnect_delay_max_s < self.reconnect_delay_s:
            raise ValueError(f"reconnect_delay_max_s {self.reconnect_delay_max_s} is below "
                             f"reconnect_delay_s {self.reconnect_delay_s}")
        exposed = [f"{n} ({s.address})" for n, s in named.items()
                   if s.mode == "bind" and not is_local_address(s.address)]
        if exposed and self.curve is None and not self.allow_unauthenticated:
            raise ValueError(f"{', '.join(exposed)} bind a non-loopback address without authentication; "
                             "configure robot_msg.curve or set robot_msg.allow_unauthenticated: true")
        if self.curve is not None and self.curve.server_key_file is None:
            connecting = [n for n, s in named.items() if s.mode == "connect"]
            if connecting:
                raise ValueError(f"curve.server_key_file is required: {', '.join(connecting)} connect(s) "
                                 "to a CURVE server")
        return self
