"""The ``robot_msg`` config section (agent/config/robotmsg.py)."""

from __future__ import annotations

import json

import pytest
from robot_msg import ports

from agent.config import ConfigError, loads
from agent.config.robotmsg import RobotMsgConfig, is_local_address


def section(**kw) -> RobotMsgConfig:
    return loads(json.dumps({"robot_msg": kw})).robot_msg


def problems(**kw) -> list[tuple[str, str]]:
    with pytest.raises(ConfigError) as info:
        section(**kw)
    return info.value.problems


def test_defaults_are_the_library_ports_bound_on_loopback():
    cfg = RobotMsgConfig()
    assert cfg.state.address == f"tcp://127.0.0.1:{ports.ROBOT_STATE}"
    assert cfg.command.address == f"tcp://127.0.0.1:{ports.CONTROLLER_COMMAND}"
    assert cfg.action.address == f"tcp://127.0.0.1:{ports.ROBOT_ACTION}"
    assert {s.mode for s in (cfg.state, cfg.command, cfg.action)} == {"bind"}
    assert cfg.encoding == "binary" and cfg.max_frame_bytes == 1 << 20 and not cfg.enabled
    assert cfg.ctrl_modes == {0: "stop", 1: "hold", 2: "home"} and cfg.curve is None


def test_a_full_section_loads():
    cfg = section(enabled=True, state_hz=100, encoding="json", max_frame_bytes=4096,
                  state={"address": "tcp://127.0.0.1:5000", "topic": "state"},
                  command={"address": "ipc:///tmp/rm-cmd", "mode": "connect"},
                  action={"address": "tcp://[::1]:5002"},
                  ctrl_modes={"3": "stop", "4": "home"},
                  curve={"secret_key_file": "keys/agent.key_secret", "server_key_file": "keys/peer.key"})
    assert cfg.state.topic == "state" and cfg.command.mode == "connect"
    assert cfg.ctrl_modes == {3: "stop", 4: "home"}
    assert cfg.curve.secret_key_file == "keys/agent.key_secret"


def test_a_bound_socket_may_take_any_free_port():
    assert section(state={"address": "tcp://127.0.0.1:*"}).state.address == "tcp://127.0.0.1:*"


@pytest.mark.parametrize(("address", "local"), [
    ("tcp://127.0.0.1:1", True), ("tcp://localhost:1", True), ("tcp://[::1]:1", True),
    ("tcp://127.5.0.1:1", True), ("ipc:///run/rm", True),
    ("tcp://0.0.0.0:1", False), ("tcp://*:1", False), ("tcp://192.168.1.10:1", False),
    ("tcp://eth0:1", False),
])
def test_local_addresses(address, local):
    assert is_local_address(address) is local


def test_exposing_a_socket_needs_curve_or_an_explicit_choice():
    found = problems(action={"address": "tcp://0.0.0.0:28402"})
    assert found[0][0] == "$.robot_msg" and "allow_unauthenticated" in found[0][1]
    assert section(action={"address": "tcp://0.0.0.0:28402"}, allow_unauthenticated=True).action
    assert section(action={"address": "tcp://*:28402"}, curve={"secret_key_file": "k"}).curve
    assert section(action={"address": "tcp://10.0.0.2:28402", "mode": "connect"}).action


@pytest.mark.parametrize(("kw", "path", "text"), [
    ({"state": {"address": "udp://127.0.0.1:1"}}, "$.robot_msg.state.address", "tcp://"),
    ({"state": {"address": "tcp://127.0.0.1"}}, "$.robot_msg.state.address", "port"),
    ({"state": {"address": "tcp://127.0.0.1:70000"}}, "$.robot_msg.state.address", "port"),
    ({"state": {"address": "tcp://127.0.0.1:1", "topic": ""}}, "$.robot_msg.state.topic", "at least 1"),
    ({"state": {"address": "tcp://127.0.0.1:1", "mode": "listen"}}, "$.robot_msg.state.mode", "bind"),
    ({"encoding": "msgpack"}, "$.robot_msg.encoding", "binary"),
    ({"max_frame_bytes": 10}, "$.robot_msg.max_frame_bytes", "1024"),
    ({"state_hz": 0}, "$.robot_msg.state_hz", "greater than or equal to 0.1"),
    ({"ctrl_modes": {"0": "hold"}}, "$.robot_msg.ctrl_modes", "stop"),
    ({"ctrl_modes": {"51": "stop"}}, "$.robot_msg.ctrl_modes", "0..50"),
    ({"ctrl_modes": {"0": "stop", "1": "dance"}}, "$.robot_msg.ctrl_modes.1", "stop"),
    ({"reconnect_delay_s": 2, "reconnect_delay_max_s": 1}, "$.robot_msg", "below"),
    ({"curve": {"secret_key_file": "k"}, "state": {"address": "tcp://10.0.0.1:1", "mode": "connect"}},
     "$.robot_msg", "server_key_file"),
    ({"command": {"address": "tcp://127.0.0.1:28402"}}, "$.robot_msg", "same address"),
    ({"stat_hz": 5}, "$.robot_msg.stat_hz", "state_hz"),
    ({"state": {"address": "tcp://127.0.0.1:*", "mode": "connect"}}, "$.robot_msg.state", "needs a port"),
    ({"state": {"address": "tcp://:*"}}, "$.robot_msg.state.address", "host"),
])
def test_bad_values_name_their_path(kw, path, text):
    found = problems(**kw)
    assert any(p == path and text in m for p, m in found), found
