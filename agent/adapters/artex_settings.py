"""ARTEX ``web_settings``: the whitelist, its validation, and atomic persistence to params.json.

The ``artex-robot`` SDK only logs "nothing happens" for ``web_settings``; the
agent applies a documented whitelist (docs/artex.md):

================= ============================ ========== ===============================================
key               params.json location         kept       meaning
================= ============================ ========== ===============================================
``max_speed_mps`` ``artex.max_speed_mps``      persisted  speed limit, m/s, <= ``base.max_speed_mps`` (robot.set_limits)
``max_send_freq`` ``max_send_freq``            persisted  seconds between telem/video sends (a period)
``jpeg_quality``  ``artex.jpeg_quality``       persisted  video JPEG quality, 1..100
``telem_can``     ``telem_can``                until      telemetry stream on/off
                                               restart
``video_can``     ``video_can``                until      video stream on/off
                                               restart
================= ============================ ========== ===============================================

The stream switches last until the agent restarts and are never written (:func:`persistent`):
a hub UI written for the SDK, where ``web_settings`` only logs, must not switch a robot's
streams off for good; at start the adapter warns when params.json itself keeps a stream off.

``base.max_speed_mps`` itself is never written: it is the track speed at full
duty (the duty scale), not a limit.

The write goes through a symlinked params.json to the link's final target (the
link stays a link), through a temporary file named ``.<target>.robot-agent-XXXXXXXX.tmp``
in the target's directory; no handled error leaves one behind, and
:func:`remove_stale_temp_files` (run at agent start) removes those a killed
process left, by that pattern only. A ``web_settings`` command is all-or-nothing: one unknown key or invalid value
rejects the whole command (logged error naming the key) and nothing changes.
Values are type-checked strictly (JSON booleans for switches, numbers for
numbers) and range-checked by the config's own pydantic models.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from agent.adapters.artex_commands import WebSettings, describe
from agent.support.atomicfile import write_text_atomically
from agent.config import BOM, AgentConfig, problems_of, read_text
from agent.errors import CommandRejected, ConfigError
from agent.support.jsonkeys import unique_keys

__all__ = ["WEB_SETTINGS", "SettingSpec", "persist_settings", "persistent", "remove_stale_temp_files", "temp_file_pattern",
           "validate_settings"]

log = logging.getLogger(__name__)

#: Marks the temporary files of settings writes: ``.<file name>.robot-agent-XXXXXXXX.tmp``.
TEMP_TAG = "robot-agent-"
TEMP_SUFFIX = ".tmp"


@dataclass(frozen=True, slots=True)
class SettingSpec:
    """Where a ``web_settings`` key lives in params.json and what JSON type it takes.

    Attributes:
        section: params.json section holding the key (``artex``), None = top level.
        field: the key inside that section.
        kind: ``bool``, ``int`` or ``float`` (an int is accepted for a float).
        persist: written into params.json when accepted (False: applies until restart).
    """

    section: str | None
    field: str
    kind: type
    persist: bool = True


#: The ``web_settings`` whitelist: hub key -> params.json location.
WEB_SETTINGS: dict[str, SettingSpec] = {
    "max_speed_mps": SettingSpec("artex", "max_speed_mps", float),
    "max_send_freq": SettingSpec(None, "max_send_freq", float),
    "jpeg_quality": SettingSpec("artex", "jpeg_quality", int),
    "telem_can": SettingSpec(None, "telem_can", bool, persist=False),
    "video_can": SettingSpec(None, "video_can", bool, persist=False),
}


def persistent(changes: Mapping[str, Any]) -> dict[str, Any]:
    """The accepted changes that are written into params.json (the stream switches are not)."""
    return {k: v for k, v in changes.items() if WEB_SETTINGS[k].persist}


def _typed(key: str, value: object, kind: type) -> object:
    where = f"web_settings.{key}"
    if kind is bool:
        if not isinstance(value, bool):
            raise CommandRejected(f"{where} must be true or false, got {describe(value)}", "artex")
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise CommandRejected(f"{where} must be a number, got {describe(value)}", "artex")
    if kind is int and not isinstance(value, int):
        raise CommandRejected(f"{where} must be an integer, got {describe(value)}", "artex")
    return value


def _location(key: str) -> tuple[str, ...]:
    spec = WEB_SETTINGS[key]
    return (spec.section, spec.field) if spec.section else (spec.field,)


def validate_settings(cfg: AgentConfig, settings: WebSettings) -> tuple[AgentConfig, dict[str, Any]]:
    """Check a ``web_settings`` command against the whitelist and the config models.

    Args:
        cfg: the configuration now in force.
        settings: the parsed command (keys and raw scalar values).

    Returns:
        The new configuration and the accepted ``{key: value}`` changes (whitelist keys).

    Raises:
        CommandError: an unknown key, a wrong JSON type or a value the config rejects; the
            message names the key (``web_settings.max_send_freq: Input should be greater than 0``).
    """
    changes: dict[str, Any] = {}
    for key, value in settings.values:
        spec = WEB_SETTINGS.get(key)
        if spec is None:
            raise CommandRejected(f"web_settings: key {key!r} is not settable; allowed: {', '.join(WEB_SETTINGS)}",
                               "artex")
        changes[key] = _typed(key, value, spec.kind)
    data = cfg.model_dump()
    for key, value in changes.items():
        *section, field = _location(key)
        (data[section[0]] if section else data)[field] = value
    try:
        new_cfg = AgentConfig.model_validate(data)
    except ValidationError as err:
        by_path = {"$." + ".".join(_location(k)): k for k in changes}
        problems = [f"web_settings.{by_path.get(path, path)}: {msg}" for path, msg in problems_of(err)]
        raise CommandRejected("; ".join(problems), "artex") from err
    limit, full = new_cfg.artex.max_speed_mps, new_cfg.base.max_speed_mps
    if limit is not None and limit > full:
        raise CommandRejected(f"web_settings.max_speed_mps: {limit} m/s is above base.max_speed_mps {full} m/s "
                           "(the track speed at full duty)", "artex")
    return new_cfg, changes


async def accept_settings(cfg: AgentConfig, settings: WebSettings,
                          config_path: str | None) -> tuple[AgentConfig, dict[str, Any], str]:
    """Validate ``settings`` against ``cfg`` and persist the keys that are kept (off the event loop).

    Returns:
        (the new config, the changes by key, where they went: a sentence for the log).

    Raises:
        CommandError: invalid settings (:func:`validate_settings`), or the config file could not be
            written (``CommandRejected``, nothing applied).
    """
    new_cfg, changes = validate_settings(cfg, settings)
    stored = persistent(changes)
    until_restart = sorted(set(changes) - set(stored))
    where = "not persisted: no config file"
    if config_path and stored:
        try:
            await asyncio.to_thread(persist_settings, config_path, stored)
        except (ConfigError, OSError) as err:
            raise CommandRejected(f"nothing applied: cannot write {config_path}: {err}", "artex") from err
        where = f"{', '.join(stored)} persisted to {config_path}"
    if until_restart:
        where += f"; {', '.join(until_restart)} until the agent restarts (stream switches are never stored)"
    return new_cfg, changes, where


def _indent_of(text: str) -> str | None:
    """The indentation unit of a JSON document (None for a one-line document)."""
    m = re.search(r"\n([ \t]+)\S", text)
    return m.group(1) if m else None


def persist_settings(path: str | os.PathLike[str], changes: Mapping[str, Any]) -> None:
    """Write whitelisted changes into params.json atomically, keeping every other key, the key order,
    the indentation, Windows line ends and a leading UTF-8 byte order mark (:data:`agent.config.BOM`).

    Reads the raw JSON (not the model, so defaults are not written out), updates the keys at
    their :data:`WEB_SETTINGS` locations (a missing section is appended), writes a temporary
    file (:func:`temp_file_pattern`) in the directory of the file's final target (``path`` with
    every symlink resolved: a symlinked params.json stays a link and its target is updated),
    fsyncs it, ``os.replace``-s it over the target and fsyncs that directory. On any error the
    temporary file is removed. Blocking: call it off the event loop.

    Args:
        path: params.json path.
        changes: ``{key: value}`` as returned by :func:`validate_settings`.

    Raises:
        ConfigError: the file cannot be read, is not a JSON object, or a section is not an object.
        OSError: the file cannot be written (the original is then unchanged).
    """
    p = Path(path)
    real = Path(os.path.realpath(p))
    try:
        text = read_text(real, keep_bom=True)   # as the agent reads it at start: a FIFO or device refused
        bom = BOM if text.startswith(BOM) else ""   # a BOM (Notepad's) stays: the file keeps its form
        data = json.loads(text[len(bom):], object_pairs_hook=unique_keys)
    except ValueError as err:                   # ConfigError, JSONDecodeError, RepeatedKey
        raise ConfigError(f"{p}: cannot update settings: {err}") from err
    if not isinstance(data, dict):
        raise ConfigError(f"{p}: top level must be an object")
    for key, value in changes.items():
        *section, field = _location(key)
        target = data
        if section:
            target = data.setdefault(section[0], {})
            if not isinstance(target, dict):
                raise ConfigError(f"{p}: section {section[0]!r} must be an object")
        target[field] = value
    out = bom + json.dumps(data, indent=_indent_of(text), ensure_ascii=False) + "\n"
    if "\r\n" in text:                         # Windows line ends (Notepad's, with its BOM) stay too
        out = out.replace("\n", "\r\n")     # (json.dumps escapes a newline inside a string: none here)
    _atomic_write(real, out)


def temp_file_pattern(name: str) -> re.Pattern[str]:
    """The names of the temporary files a settings write of the file ``name`` makes beside it:
    ``.<name>.robot-agent-XXXXXXXX.tmp`` (XXXXXXXX: :func:`tempfile.mkstemp`'s random part)."""
    return re.compile(rf"\.{re.escape(name)}\.{TEMP_TAG}[a-z0-9_]{{8}}{re.escape(TEMP_SUFFIX)}")


def _atomic_write(target: Path, text: str) -> None:
    """Replace ``target`` (no symlink) with ``text`` atomically, via a temporary file beside it."""
    write_text_atomically(target, text, prefix=f".{target.name}.{TEMP_TAG}", suffix=TEMP_SUFFIX,
                          mode=target.stat().st_mode & 0o7777, durable=True)


def remove_stale_temp_files(path: str | os.PathLike[str]) -> list[Path]:
    """Remove the temporary files settings writes of ``path`` left behind (a process killed
    mid-write): only regular files named by :func:`temp_file_pattern`, only in the directory a
    write uses (that of ``path``'s final target, symlinks resolved). Call it at start, before
    anything writes the settings; blocking (off the event loop). Never raises: a file that cannot
    be listed or removed is logged and left.

    Returns:
        The files removed.
    """
    target = Path(os.path.realpath(path))
    pattern = temp_file_pattern(target.name)
    removed: list[Path] = []
    try:
        entries = [e for e in os.scandir(target.parent)
                   if pattern.fullmatch(e.name) and e.is_file(follow_symlinks=False)]
    except OSError as err:
        log.warning("cannot look for stale settings temp files in %s: %s", target.parent, err)
        return removed
    for entry in entries:
        try:
            os.unlink(entry.path)
        except FileNotFoundError:
            continue
        except OSError as err:
            log.warning("cannot remove stale settings temp file %s: %s", entry.path, err)
            continue
        removed.append(Path(entry.path))
    if removed:
        log.info("removed %d temporary file(s) an interrupted settings write left beside %s: %s",
                 len(removed), target, ", ".join(p.name for p in removed))
    return removed
