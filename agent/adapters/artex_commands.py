"""ARTEX ``command`` events -> agent commands (pure translation, no I/O).

An ARTEX hub sends ``command`` events shaped ``{"author": str, "payload": {TYPE: COMMAND}}``
(ARTEX protocol page, "command"). :func:`parse_command` checks everything
(type, shape, size, finiteness) and returns one :class:`ArtexCommand`, or raises
:class:`agent.errors.CommandError` whose message names what was wrong and where
(``payload.drive.vx must be finite, got nan``). The command table is in docs/artex.md:

=========== ======================================== ===================================
TYPE        COMMAND                                  result
=========== ======================================== ===================================
``com``     ``"stop"``                               :class:`~agent.commands.Stop`
``com``     a name in ``cfg.artex.commands``         :class:`~agent.commands.BaseVelocity`
``drive``   ``{"vx": m/s, "omega": rad/s}``          :class:`~agent.commands.BaseVelocity`
``tracks``  ``{"left": -1..1, "right": -1..1}``      :class:`~agent.commands.TrackDuty`
``file``    ``"log"`` / ``"error"`` / ``"clear"``    :class:`FileRequest`
``web_settings`` ``{key: value, ...}``               :class:`WebSettings` (checked by artex_settings)
=========== ======================================== ===================================

Motion commands are velocity commands: the control loop's watchdog stops the
tracks 0.5 s (``watchdog.velocity_timeout_s``) after the last one, so the hub
must repeat them while the motion should last.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from agent.config.artex import BUILTIN_STOP, MotionConfig
from agent.errors import CommandError, CommandRejected, NonFiniteValue
from agent.commands import BaseVelocity, Command, Stop, TrackDuty, finite_number
from agent.support.ratelimit import safe

__all__ = [
    "file_answer",
    "COMMAND_TYPES",
    "FILE_TYPES",
    "MAX_SETTINGS_KEYS",
    "MAX_TEXT_CHARS",
    "ArtexCommand",
    "FileRequest",
    "WebSettings",
    "describe",
    "is_stop",
    "is_stop_event",
    "parse_command",
]

#: Longest string accepted anywhere in a command (author, names, setting values), characters.
MAX_TEXT_CHARS = 256
#: Most keys one ``web_settings`` command may carry.
MAX_SETTINGS_KEYS = 16
#: Most keys a ``command`` payload may carry (one command type plus keys that are ignored).
MAX_PAYLOAD_KEYS = 16
#: ``file`` requests: ``log`` and ``error`` answer with a ``file`` event, ``clear`` answers nothing.
FILE_TYPES = ("log", "error", "clear")


@dataclass(frozen=True, slots=True)
class FileRequest:
    """``{"file": kind}``: send the log tail (``log``), the error tail (``error``) or clear both."""

    kind: str


@dataclass(frozen=True, slots=True)
class WebSettings:
    """``{"web_settings": {...}}``: settings to apply and persist, raw scalar values in arrival order."""

    values: tuple[tuple[str, bool | int | float | str | None], ...]


@dataclass(frozen=True, slots=True)
class ArtexCommand:
    """One parsed ``command`` event.

    Attributes:
        author: the hub's ``author`` field ("" when absent).
        kind: the payload TYPE (``com``, ``drive``, ``tracks``, ``file``, ``web_settings``).
        action: an agent command for the control loop, a FileRequest, or WebSettings.
        ignored: payload keys next to the command TYPE that are not command types (the SDK ignores
            them too; the adapter obeys the command and logs a warning naming them).
    """

    author: str
    kind: str
    action: Command | FileRequest | WebSettings
    ignored: tuple[str, ...] = ()


def describe(value: object, limit: int = 40) -> str:
    """Short, bounded description of an untrusted value for log messages: type and clipped repr
    (``repr`` escapes newlines and control characters, so the text stays one log line)."""
    if isinstance(value, (str, bytes, bytearray)) and len(value) > limit:
        return f"{type(value).__name__} of length {len(value)}"
    text = repr(value)
    if len(text) > limit:
        text = text[:limit] + "..."
    return f"{type(value).__name__} {text}"


def is_stop(data: object) -> bool:
    """The ``command`` event carries a stop: ``payload.com == "stop"`` whatever else the payload or
    the event holds (``{"com": "stop", "extra": 1}``: the SDK obeys it), or ``com: "stop"`` at the
    top level, or such an object among several event arguments. Stop always wins."""
    if isinstance(data, list):
        return any(is_stop(item) for item in data[:8])
    if not isinstance(data, dict):
        return False
    payload = data.get("payload")
    return data.get("com") == BUILTIN_STOP or (isinstance(payload, dict) and payload.get("com") == BUILTIN_STOP)


def is_stop_event(event: list) -> bool:
    """A decoded Socket.IO event ``[name, *args]`` is a ``command`` that :func:`is_stop` calls a stop
    (its one argument, or the list of several, as the adapter's ``command`` handler reads them)."""
    return len(event) > 1 and event[0] == "command" and is_stop(event[1] if len(event) == 2 else event[1:])


def _text(where: str, value: object, limit: int = MAX_TEXT_CHARS) -> str:
    if not isinstance(value, str):
        raise CommandRejected(f"{where} must be a string, got {describe(value)}", "artex")
    if len(value) > limit:
        raise CommandRejected(f"{where} is {len(value)} characters long, at most {limit} allowed", "artex")
    return value


def _object(where: str, value: object, keys: tuple[str, ...]) -> dict[str, object]:
    """A dict whose keys are all among ``keys`` (so its size is bounded too)."""
    if not isinstance(value, dict):
        raise CommandRejected(f"{where} must be an object, got {describe(value)}", "artex")
    for key in value:
        if key not in keys:
            raise CommandRejected(f"{where} has unknown key {describe(key)}; allowed: {', '.join(keys)}", "artex")
    return value


def _com(value: object, commands: Mapping[str, MotionConfig]) -> Command:
    name = _text("payload.com", value, 64)
    if name == BUILTIN_STOP:
        return Stop()
    motion = commands.get(name)
    if motion is None:
        known = ", ".join([BUILTIN_STOP, *commands])
        raise CommandRejected(f"payload.com: unknown command {name!r}; known: {known}", "artex")
    return BaseVelocity(motion.vx, motion.omega)


def _drive(value: object) -> Command:
    body = _object("payload.drive", value, ("vx", "omega"))
    if not body:
        raise CommandRejected("payload.drive must carry vx (m/s) and/or omega (rad/s)", "artex")
    vx = _numeric("payload.drive.vx", body.get("vx", 0.0))
    omega = _numeric("payload.drive.omega", body.get("omega", 0.0))
    return _drive_command(vx, omega)


def _tracks(value: object) -> Command:
    body = _object("payload.tracks", value, ("left", "right"))
    for side in ("left", "right"):
        if side not in body:
            raise CommandRejected(f"payload.tracks.{side} is missing (duty -1..1)", "artex")
    left = _numeric("payload.tracks.left", body["left"])
    right = _numeric("payload.tracks.right", body["right"])
    try:
        return TrackDuty(left, right)       # the one finite check of left and right (agent.model)
    except NonFiniteValue as err:
        raise NonFiniteValue(f"payload.tracks.{err}", err.source) from None
    except CommandError as err:
        raise CommandRejected(f"payload.tracks: {err}", "artex") from err


def _numeric(where: str, value: object) -> int | float:
    """``value`` when it is a number (its finiteness is the model's to check); a non-number is
    described as the hub sent it."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise CommandRejected(f"{where} must be a number, got {describe(value)}", "artex")
    return value


def _drive_command(vx: int | float, omega: int | float) -> BaseVelocity:
    """``BaseVelocity(vx, omega)``: its constructor is the one finite check of both (agent.model;
    docs/architecture.md, "One check per command"); its refusal, which names the field, is named
    by the field's path in the event (``payload.drive.vx must be finite``)."""
    try:
        return BaseVelocity(vx, omega)
    except CommandError as err:
        raise type(err)(f"payload.drive.{err}", err.source, err.reason) from None


def _number(where: str, value: object) -> float:
    """A finite number (agent.commands.finite_number) for a value that becomes no model value; a
    non-number is described as the hub sent it."""
    return finite_number(where, _numeric(where, value))


def _file(value: object) -> FileRequest:
    kind = _text("payload.file", value, 16)
    if kind not in FILE_TYPES:
        raise CommandRejected(f"payload.file: unknown request {kind!r}; known: {', '.join(FILE_TYPES)}", "artex")
    return FileRequest(kind)


def _web_settings(value: object) -> WebSettings:
    if not isinstance(value, dict):
        raise CommandRejected(f"payload.web_settings must be an object, got {describe(value)}", "artex")
    if not value:
        raise CommandRejected("payload.web_settings is empty", "artex")
    if len(value) > MAX_SETTINGS_KEYS:
        raise CommandRejected(f"payload.web_settings has {len(value)} keys, at most {MAX_SETTINGS_KEYS} allowed", "artex")
    out: list[tuple[str, bool | int | float | str | None]] = []
    for key, item in value.items():
        key = _text("payload.web_settings key", key, 64)
        where = f"payload.web_settings.{safe(key, 64)}"
        if isinstance(item, str):
            item = _text(where, item)
        elif isinstance(item, float):
            item = _number(where, item)
        elif item is not None and not isinstance(item, (bool, int, float)):
            raise CommandRejected(f"{where} must be a number, boolean or string, got {describe(item)}", "artex")
        out.append((key, item))
    return WebSettings(tuple(out))


_PARSERS = {
    "drive": _drive,
    "tracks": _tracks,
    "file": _file,
    "web_settings": _web_settings,
}

#: Payload TYPEs the adapter understands.
COMMAND_TYPES = ("com", *_PARSERS)


def parse_command(data: object, commands: Mapping[str, MotionConfig]) -> ArtexCommand:
    """Check and translate one ``command`` event's data.

    Args:
        data: the event's data as received (untrusted): ``{"author": str, "payload": {TYPE: COMMAND}}``.
            Other top-level keys are ignored; the payload must hold exactly one TYPE; its other keys
            (at most 16 in all) are ignored and listed in :attr:`ArtexCommand.ignored`, as the SDK
            obeys ``{"com": "forward", "extra": 1}``; two TYPEs are refused (ambiguous). A malformed
            ``author`` rejects the command, except a ``stop`` (stop always wins; author ""): any
            event :func:`is_stop` accepts is a stop, whatever else it carries.
        commands: ``cfg.artex.commands``, the ``com`` name -> twist table (``stop`` is built in).

    Returns:
        The parsed command; motion actions are already-validated agent commands.

    Raises:
        CommandError: naming the offending field (``payload.tracks.left duty must be within -1..1``).
    """
    if is_stop(data):
        author = data.get("author") if isinstance(data, dict) else None
        return ArtexCommand(author if isinstance(author, str) and len(author) <= MAX_TEXT_CHARS else "",
                            "com", Stop())
    if not isinstance(data, dict):
        raise CommandRejected(f"command must be an object, got {describe(data)}", "artex")
    if "payload" not in data:
        raise CommandRejected("command has no payload", "artex")
    payload = data["payload"]
    if not isinstance(payload, dict):
        raise CommandRejected(f"payload must be an object, got {describe(payload)}", "artex")
    if not payload:
        raise CommandRejected("payload is empty; it must hold exactly one command type "
                              f"({', '.join(COMMAND_TYPES)})", "artex")
    if len(payload) > MAX_PAYLOAD_KEYS:
        raise CommandRejected(f"payload has {len(payload)} keys, at most {MAX_PAYLOAD_KEYS} allowed", "artex")
    kinds = [k for k in payload if k in COMMAND_TYPES]
    if len(kinds) > 1:
        # the SDK takes the first key in JSON order; which one a hub UI meant is a guess, so refuse
        raise CommandRejected(f"payload holds {len(kinds)} command types ({', '.join(kinds)}); it must hold "
                              "exactly one (ambiguous: which one was meant is unknown, nothing was done)", "artex")
    if not kinds:
        kind = _text("payload type", next(iter(payload)), 64)
        raise CommandRejected(f"payload: unknown command type {kind!r}; known: {', '.join(COMMAND_TYPES)}", "artex")
    kind = kinds[0]
    value = payload[kind]
    ignored = tuple(safe(str(k), 64) for k in payload if k != kind)
    action = _com(value, commands) if kind == "com" else _PARSERS[kind](value)
    author = data.get("author")
    try:
        author = "" if author is None else _text("author", author)
    except CommandError:
        if not isinstance(action, Stop):
            raise
        author = ""  # stop always wins: a malformed author does not block it
    return ArtexCommand(author, kind, action, ignored)


#: Wire bytes of a ``file`` answer besides its content (event, namespace, keys, type).
FILE_OVERHEAD = 128


def file_answer(logs: object, kind: str, max_message_bytes: int) -> dict[str, str]:
    """The ``file`` answer payload ``{"type": kind, "content": text}`` for a ``log`` / ``error`` request.

    Args:
        logs: the agent.support.logtail.LogTail, or None (empty content).
        kind: ``log`` or ``error``.
        max_message_bytes: the ``video`` section's message budget, bytes on the wire; the content
            keeps the newest lines that fit (JSON-escaped size, agent.support.logtail.wire_size).
    """
    if logs is None:
        return {"type": kind, "content": ""}
    limit = max(0, max_message_bytes - FILE_OVERHEAD)
    text = logs.log_text(limit) if kind == "log" else logs.error_text(limit)  # type: ignore[attr-defined]
    return {"type": kind, "content": text}
