"""Console page messages: every bad shape is rejected with the field named; good ones translate."""

from __future__ import annotations

import json
import math
import secrets

import pytest

from agent.config import loads
from agent.config.console import GENERATE_TOKEN, ConsoleConfig, is_loopback
from agent.errors import ConfigError
from agent.console.auth import refusal
from agent.console.messages import Drive, FrameReady, Limits, TakeControl, decode, parse
from agent.errors import CommandError
from agent.commands import BaseVelocity, Stop

LIMITS = Limits(vx_mps=1.0, omega_radps=2.0)


def test_good_messages_translate() -> None:
    assert parse(decode('{"type": "drive", "vx": 0.5, "omega": -1}', 1024), LIMITS) == Drive(BaseVelocity(0.5, -1.0))
    assert parse({"type": "drive", "vx": 0.5, "omega": 0, "press": True}, LIMITS) == Drive(BaseVelocity(0.5, 0.0), True)
    assert parse({"type": "stop"}, LIMITS) == Stop()
    assert parse({"type": "take"}, LIMITS) == TakeControl()
    assert parse({"type": "frame"}, LIMITS) == FrameReady()


@pytest.mark.parametrize("raw, words", [
    (b'{"type": "stop"}', "binary message of 16 bytes"),
    ("x" * 2000, "exceeds max_message_bytes=1024"),
    ("{nope", "not valid JSON"),
    ("[1, 2]", "must be a JSON object"),
])
def test_decode_rejects(raw: object, words: str) -> None:
    with pytest.raises(CommandError, match=words) as info:
        decode(raw, 1024)
    assert info.value.source == "console"


def test_decode_rejects_deep_nesting() -> None:
    with pytest.raises(CommandError, match="nests too deeply"):
        decode("[" * 100_000 + "]" * 100_000, 1 << 20)


@pytest.mark.parametrize("message, words", [
    ({"type": "fly"}, "unknown message type 'fly'"),
    ({"vx": 1}, "unknown message type None"),
    ({"type": "drive", "vx": 0.1}, r"drive.omega is missing"),
    ({"type": "drive", "vx": "1", "omega": 0}, "drive.vx must be a number, got str"),
    ({"type": "drive", "vx": True, "omega": 0}, "drive.vx must be a number, got bool"),
    ({"type": "drive", "vx": math.nan, "omega": 0}, "drive.vx must be finite"),
    ({"type": "drive", "vx": 0, "omega": math.inf}, "drive.omega must be finite"),
    ({"type": "drive", "vx": 1.5, "omega": 0}, r"drive.vx 1.5 is outside -1..1 m/s"),
    ({"type": "drive", "vx": 0, "omega": -2.1}, r"drive.omega -2.1 is outside -2..2 rad/s"),
    ({"type": "drive", "vx": 10 ** 400, "omega": 0}, "out of range"),
    ({"type": "stop", "vx": 1}, "stop has unknown key"),
    ({"type": "drive", "vx": 0, "omega": 0, "joints": [1]}, "drive has unknown key"),
    ({"type": "drive", "vx": 0, "omega": 0, "press": 1}, "drive.press must be true or false, not 1"),
    ({"type": "take", "tab": 2}, "take has unknown key"),
])
def test_parse_rejects(message: dict, words: str) -> None:
    with pytest.raises(CommandError, match=words) as info:
        parse(message, LIMITS)
    assert info.value.source == "console"


def test_loopback_rule() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("localhost") and is_loopback("::1") and is_loopback("127.3.2.1")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.5") and not is_loopback("robot.local")
    assert refusal(ConsoleConfig(host="127.0.0.1")) is None
    assert refusal(ConsoleConfig(host="0.0.0.0", token=STRONG)) is None
    why = refusal(ConsoleConfig(host="0.0.0.0"))
    assert why is not None and "NOT started" in why and "http://0.0.0.0:8080/?token=<console.token>" in why


def test_config_defaults_and_console_source() -> None:
    cfg = loads('{"control": {"sources": {"artex": {"priority": 5}}}}')
    assert not cfg.console.enabled and cfg.console.host == "127.0.0.1"
    assert cfg.control.sources["console"].priority == 40   # filled in for a table that predates it
    assert cfg.source_timeout_s("console") == 0.5
    with pytest.raises(Exception, match="console.token"):
        loads('{"console": {"token": "short"}}')


STRONG = "kV3q9ZtR0bWm-Lx7Yp2Hc_Ue5Na8Jd4G"     # 32 random URL-safe characters


@pytest.mark.parametrize("token, words", [
    ("aaaaaaaa", "8 characters; at least 20"),
    ("s3cret-token-42", "15 characters; at least 20"),
    ("a" * 40, "too easy to guess"),
    ("abcdefghijklmnopqrstuvwxyz", "too easy to guess"),
    ("password-password-password", "too easy to guess"),
    ("01234567890123456789012", "too easy to guess"),
    ("has space in it 0123456789", "only A-Z a-z 0-9"),
    ("x" * 257, "at most 256"),
])
def test_weak_tokens_are_refused_at_load_with_the_way_to_make_one(token: str, words: str) -> None:
    with pytest.raises(ConfigError) as info:
        loads(json.dumps({"console": {"enabled": True, "host": "0.0.0.0", "token": token}}))
    (path, message), = info.value.problems
    assert path == "$.console.token" and words in message
    if len(token) <= 256:
        assert GENERATE_TOKEN in message and 'secrets.token_urlsafe(32)' in message
    assert token not in str(info.value)                 # a secret, even a bad one, stays out of logs


def test_generated_tokens_are_accepted() -> None:
    for _ in range(20):
        token = secrets.token_urlsafe(32)
        assert loads(json.dumps({"console": {"token": token}})).console.token == token
    assert loads(json.dumps({"console": {"token": secrets.token_hex(16)}})).console.token
    assert loads(json.dumps({"console": {"token": STRONG}})).console.token == STRONG
