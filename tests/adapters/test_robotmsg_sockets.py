"""CURVE key loading and socket options (agent/adapters/robotmsg_sockets.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import zmq
import zmq.asyncio
import zmq.auth

from agent.adapters.robotmsg import RobotMsgAdapter
from agent.adapters.robotmsg_sockets import load_curve, open_socket
from agent.config import AgentConfig, ConfigError
from agent.config.robotmsg import CurveConfig, RobotMsgConfig, SocketConfig


@pytest.fixture
def certs(tmp_path: Path) -> Path:
    keys = tmp_path / "keys"
    keys.mkdir()
    zmq.auth.create_certificates(keys, "agent")
    zmq.auth.create_certificates(keys, "peer")
    (tmp_path / "authorized").mkdir()
    return tmp_path


def test_relative_paths_resolve_against_the_config_directory(certs):
    keys = load_curve(CurveConfig(secret_key_file="keys/agent.key_secret", server_key_file="keys/peer.key",
                                  authorized_keys_dir="authorized"), certs)
    public, secret = zmq.auth.load_certificate(certs / "keys" / "agent.key_secret")
    assert (keys.public, keys.secret) == (public, secret)
    assert keys.server_public == zmq.auth.load_certificate(certs / "keys" / "peer.key")[0]
    assert keys.authorized_dir == str(certs / "authorized")


@pytest.mark.parametrize(("curve", "path"), [
    ({"secret_key_file": "keys/missing.key_secret"}, "$.robot_msg.curve.secret_key_file"),
    ({"secret_key_file": "keys/agent.key"}, "$.robot_msg.curve.secret_key_file"),  # public only
    ({"secret_key_file": "keys/agent.key_secret", "server_key_file": "keys/nope.key"},
     "$.robot_msg.curve.server_key_file"),
    ({"secret_key_file": "keys/agent.key_secret", "authorized_keys_dir": "keys/agent.key"},
     "$.robot_msg.curve.authorized_keys_dir"),
])
def test_bad_key_material_is_a_config_error_naming_the_key(certs, curve, path):
    with pytest.raises(ConfigError) as info:
        load_curve(CurveConfig(**curve), certs)
    assert info.value.problems[0][0] == path


def test_the_adapter_refuses_to_start_without_its_keys(certs):
    cfg = AgentConfig.model_validate({"robot_msg": {"enabled": True, "curve": {"secret_key_file": "nope"}}})
    with pytest.raises(ConfigError):
        RobotMsgAdapter(cfg, robot=None, config_path=str(certs / "params.json"))


def test_subscriber_options():
    cfg = RobotMsgConfig(max_frame_bytes=4096, rcvhwm=7, reconnect_delay_s=0.2, reconnect_delay_max_s=3.0)
    ctx = zmq.asyncio.Context()
    try:
        sock = open_socket(ctx, zmq.SUB, SocketConfig(address="tcp://127.0.0.1:*", topic="act"), cfg, None)
        assert sock.getsockopt(zmq.MAXMSGSIZE) == 8192
        assert sock.getsockopt(zmq.RCVHWM) == 7 and sock.getsockopt(zmq.LINGER) == 0
        assert (sock.getsockopt(zmq.RECONNECT_IVL), sock.getsockopt(zmq.RECONNECT_IVL_MAX)) == (200, 3000)
        pub = open_socket(ctx, zmq.PUB, SocketConfig(address="tcp://127.0.0.1:*"), RobotMsgConfig(sndhwm=3), None)
        assert pub.getsockopt(zmq.SNDHWM) == 3
        with pytest.raises(zmq.ZMQError):
            open_socket(ctx, zmq.SUB, SocketConfig(address=sock.getsockopt(zmq.LAST_ENDPOINT).decode()), cfg, None)
    finally:
        ctx.destroy(linger=0)
