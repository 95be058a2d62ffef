"""ZeroMQ plumbing for the robot_msg adapter: socket options, CURVE keys, monitor events.

Kept apart from the protocol mapping so each part stays small. Socket options
(docs/robot_msg.md, "Configuration"): LINGER 0, small high-water marks (newest wins,
no backlog), ZMQ_MAXMSGSIZE on subscribers, ZeroMQ's own reconnect interval for
connecting sockets, and CURVE when keys are configured.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import zmq
import zmq.asyncio
import zmq.auth
from zmq.auth.asyncio import AsyncioAuthenticator

from agent.config.robotmsg import CurveConfig, RobotMsgConfig, SocketConfig
from agent.errors import ConfigError

log = logging.getLogger(__name__)

#: Monitor events that open or close a peer connection.
OPENED = (zmq.EVENT_ACCEPTED, zmq.EVENT_CONNECTED)
CLOSED = (zmq.EVENT_DISCONNECTED,)
HANDSHAKE_FAILED = tuple(getattr(zmq, name) for name in (
    "EVENT_HANDSHAKE_FAILED_NO_DETAIL", "EVENT_HANDSHAKE_FAILED_PROTOCOL", "EVENT_HANDSHAKE_FAILED_AUTH")
    if hasattr(zmq, name))


@dataclass(frozen=True, slots=True)
class CurveKeys:
    """Loaded CURVE material (Z85 bytes).

    Attributes:
        public, secret: the agent's key pair.
        server_public: the peer server's public key for connecting sockets, or None.
        authorized_dir: directory of authorized client certificates, or None (any client).
    """

    public: bytes
    secret: bytes
    server_public: bytes | None
    authorized_dir: str | None


def _resolve(path: str, base_dir: Path) -> Path:
    p = Path(path).expanduser()
    return p if p.is_absolute() else base_dir / p


def _certificate(curve: CurveConfig, key: str, base_dir: Path) -> tuple[bytes, bytes | None]:
    """(public, secret or None) from the certificate file named by ``curve.<key>``. Raises ConfigError."""
    path = _resolve(getattr(curve, key), base_dir)
    try:
        return zmq.auth.load_certificate(path)
    except (OSError, ValueError) as err:
        raise ConfigError(f"robot_msg.curve.{key} {path}: {err}", [(f"$.robot_msg.curve.{key}", str(err))]) from err


def load_curve(curve: CurveConfig, base_dir: Path) -> CurveKeys:
    """Read the certificates named in ``robot_msg.curve`` (paths relative to ``base_dir``).

    Raises:
        ConfigError: a file is missing, unreadable or holds no key of the needed kind.
    """
    where = "$.robot_msg.curve"
    if not zmq.has("curve"):
        raise ConfigError("robot_msg.curve is set but this libzmq has no CURVE support",
                          [(where, "libzmq built without CURVE")])
    public, secret = _certificate(curve, "secret_key_file", base_dir)
    if not secret:
        raise ConfigError(f"robot_msg.curve.secret_key_file {curve.secret_key_file} holds no secret key",
                          [(f"{where}.secret_key_file", "no secret-key line in the certificate")])
    server_public = None
    if curve.server_key_file is not None:
        server_public, _ = _certificate(curve, "server_key_file", base_dir)
    authorized = None
    if curve.authorized_keys_dir is not None:
        directory = _resolve(curve.authorized_keys_dir, base_dir)
        if not directory.is_dir():
            raise ConfigError(f"robot_msg.curve.authorized_keys_dir {directory} is not a directory",
                              [(f"{where}.authorized_keys_dir", "not a directory")])
        authorized = str(directory)
    return CurveKeys(public=public, secret=secret, server_public=server_public, authorized_dir=authorized)


def start_authenticator(ctx: zmq.asyncio.Context, keys: CurveKeys) -> AsyncioAuthenticator:
    """Run the ZAP handler for CURVE servers: only ``authorized_dir`` clients, or any client."""
    auth = AsyncioAuthenticator(ctx, log=logging.getLogger(f"{__name__}.zap"))
    auth.start()
    auth.configure_curve(domain="*", location=keys.authorized_dir or zmq.auth.CURVE_ALLOW_ANY)
    return auth


def open_socket(ctx: zmq.asyncio.Context, kind: int, scfg: SocketConfig, cfg: RobotMsgConfig,
                keys: CurveKeys | None, address: str | None = None) -> zmq.asyncio.Socket:
    """Create, configure and bind/connect one socket to ``address`` (default ``scfg.address``).
    Raises zmq.ZMQError (socket closed then)."""
    sock = ctx.socket(kind)
    try:
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.RECONNECT_IVL, max(1, int(cfg.reconnect_delay_s * 1000)))
        sock.setsockopt(zmq.RECONNECT_IVL_MAX, max(1, int(cfg.reconnect_delay_max_s * 1000)))
        if kind == zmq.SUB:
            sock.setsockopt(zmq.RCVHWM, cfg.rcvhwm)
            sock.setsockopt(zmq.MAXMSGSIZE, 2 * cfg.max_frame_bytes)
            sock.setsockopt(zmq.SUBSCRIBE, scfg.topic.encode() if scfg.topic else b"")
        else:
            sock.setsockopt(zmq.SNDHWM, cfg.sndhwm)
        if keys is not None:
            sock.curve_secretkey = keys.secret
            sock.curve_publickey = keys.public
            if scfg.mode == "bind":
                sock.curve_server = True
            else:
                sock.curve_serverkey = keys.server_public
        if scfg.mode == "bind":
            sock.bind(address or scfg.address)
        else:
            sock.connect(address or scfg.address)
    except zmq.ZMQError:
        sock.close(linger=0)
        raise
    return sock
