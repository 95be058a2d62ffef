"""Configuration: ``config/params.json`` loaded strictly into frozen models.

Top-level keys are the ``artex-robot`` SDK's own, with the SDK's meaning and
defaults, so a params.json written for the SDK loads unchanged:

============== ===================== =========================================
key            default               meaning
============== ===================== =========================================
name           "DefaultName"         passport name
type           "DefaultType"         passport type
telem_can      false                 robot sends telemetry
video_can      false                 robot sends video
server         "http://artex.arcon"  ARTEX hub URL (http or https, host only); "" or null turns ARTEX off
port           80                    hub port
max_send_freq  0.05                  seconds between telem/video sends (a period)
logger_type    "console"             "console" (stderr -> journald) or "file"
logger_level   "all"                 "all", "skip_TODO", or a logging level name
max_main_freq  0.1                   SDK main-loop period, s (kept for compatibility)
external       {}                    SDK externals (kept, unused)
============== ===================== =========================================

The agent's own sections: ``drivers``, ``base``, ``watchdog``, ``control``,
``artex``, ``sim2bot``, ``robot_msg``, ``console``, ``video``, ``failsafe``, ``recorder``, ``log_dir``. Unknown keys
inside the agent's sections are errors with a "did you mean" hint; unknown
top-level keys (the user's own, which the SDK ignores) are ignored with a
warning, unless they look like a misspelt known key. Every float must be finite
and every number lies within bounds (shared constrained types in
drivers/config.py); addresses may be written ``"0x68"``. Where the SDK is
sloppy the agent takes what the SDK takes, with a warning
(:attr:`AgentConfig.compat_warnings`): ``max_send_freq`` as a numeric string
(``"0.1"``, the SDK's ``float()``), ``logger_type: "file"`` without ``log_dir``
(the working directory, where the SDK writes its ``all.log``). :func:`load`
raises :class:`ConfigError` listing every problem with its JSON path.
"""

from __future__ import annotations

import difflib
import json
import logging
import os
import re
import sys
import typing
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, PrivateAttr, ValidationError, ValidationInfo, field_validator

from agent.config import crossfield
from agent.config.artex import ArtexConfig
from agent.config.base import Section
from agent.config.console import ConsoleConfig
from agent.config.control import BaseConfig, ControlConfig, WatchdogConfig
from agent.config.drivers import DriversConfig
from agent.config.failsafe import CHEMISTRY_CELL_V, FULL_CELL_V, FailsafeConfig
from agent.config.recorder import RecorderConfig
from agent.config.robotmsg import RobotMsgConfig
from agent.config.sim2bot import Sim2botConfig
from agent.support.jsonkeys import RepeatedKey, unique_keys
from agent.config.video import VideoConfig
from agent.errors import ConfigError
from agent.support.readfile import read_regular

__all__ = ["BOM", "AgentConfig", "ConfigError", "foreign_keys", "load", "loads", "log_level", "problems_of", "read_text"]

#: The SDK's ``logger_level`` values that are not logging level names, mapped onto levels.
SDK_LEVELS = {"all": logging.INFO, "skip_todo": logging.INFO}


def log_level(name: str) -> int:
    """A ``logger_level`` (or ``--log-level``) value -> logging level, case-insensitive.

    ``all`` and ``skip_TODO`` (the SDK's values) are INFO; otherwise a logging level name
    (``debug``, ``info``, ``warning``, ``error``, ``critical``).

    Raises:
        ValueError: an unknown name.
    """
    key = name.strip().lower()
    if key in SDK_LEVELS:
        return SDK_LEVELS[key]
    value = logging.getLevelName(key.upper())
    if isinstance(value, int):
        return value
    raise ValueError(f"unknown log level {name!r}; use all, skip_TODO, debug, info, warning, error or critical")


class AgentConfig(Section):
    """The whole params.json. See the module docstring for the SDK keys."""

    name: str = Field("DefaultName", min_length=1, max_length=128)
    type: str = Field("DefaultType", min_length=1, max_length=128)
    telem_can: bool = False
    video_can: bool = False
    server: str | None = "http://artex.arcon"
    port: int = Field(80, ge=1, le=65535)
    max_send_freq: float = Field(1 / 20, gt=0.0, le=60.0)
    logger_type: Literal["console", "file"] = "console"
    logger_level: str = "all"
    max_main_freq: float = Field(0.1, ge=0.001, le=60.0)
    external: dict[str, Any] = Field(default_factory=dict)

    drivers: DriversConfig = Field(default_factory=DriversConfig)
    base: BaseConfig = Field(default_factory=BaseConfig)
    watchdog: WatchdogConfig = Field(default_factory=WatchdogConfig)
    control: ControlConfig = Field(default_factory=ControlConfig)
    artex: ArtexConfig = Field(default_factory=ArtexConfig)
    sim2bot: Sim2botConfig = Field(default_factory=Sim2botConfig)
    robot_msg: RobotMsgConfig = Field(default_factory=RobotMsgConfig)
    console: ConsoleConfig = Field(default_factory=ConsoleConfig)
    video: VideoConfig = Field(default_factory=VideoConfig)
    failsafe: FailsafeConfig = Field(default_factory=FailsafeConfig)
    recorder: RecorderConfig = Field(default_factory=RecorderConfig)
    log_dir: str | None = Field(None, description="directory of robot-agent.log when logger_type is 'file'; "
                                "ARTEX `file` requests are served from memory (agent.support.logtail) either way")

    @field_validator("server")
    @classmethod
    def _hub_url(cls, value: str | None) -> str | None:
        # the SDK connects to f"{server}:{port}" with python-socketio: an http(s) URL with a host
        if value and not re.fullmatch(r"(?i)https?://(\[[0-9a-f:.]+\]|[^/\s:?#\[\]@]+)/?", value):
            raise ValueError(f"server must be an http:// or https:// URL of the hub's host, without port or "
                             f"path (the port is `port`), e.g. \"http://artex.arcon\"; got {value[:80]!r}")
        return value

    @field_validator("logger_level")
    @classmethod
    def _known_level(cls, value: str) -> str:
        log_level(value)  # checked at load, so check-config catches it, not only `run`
        return value

    @field_validator("failsafe")
    @classmethod
    def _failsafe_fits_the_robot(cls, value: FailsafeConfig, info: ValidationInfo) -> FailsafeConfig:
        """Thresholds left to the chemistry's defaults still keep critical below low; the low-battery
        speed is below the base's maximum (else it limits nothing)."""
        b = value.battery
        base, drivers = info.data.get("base"), info.data.get("drivers")
        if b.low_speed_mps is not None and base is not None and b.low_speed_mps >= base.max_speed_mps:
            raise ValueError(f"battery.low_speed_mps ({b.low_speed_mps} m/s) must be below base.max_speed_mps "
                             f"({base.max_speed_mps} m/s), or it limits nothing")
        battery = getattr(getattr(drivers, "power", None), "battery", None)
        if battery is not None and battery.chemistry in CHEMISTRY_CELL_V:
            low, crit, _ = b.cell_volts(battery.chemistry)
            if crit >= low:
                raise ValueError(f"battery: critical {crit} V per cell must be below low {low} V per cell "
                                 f"(a value left null is the {battery.chemistry} default)")
            full = FULL_CELL_V[battery.chemistry]
            for name, volts in (("low", low), ("critical", crit)):
                if volts >= full:
                    raise ValueError(
                        f"battery: {name} {volts} V per cell is at or above a full {battery.chemistry} cell "
                        f"({full} V at rest): the failsafe would hold on a full battery ("
                        f"{'the speed capped for good' if name == 'low' else 'the robot halted at once'}); "
                        f"set it below {full} V per cell")
        return value

    _ignored_keys: tuple[str, ...] = PrivateAttr(default=())

    _compat_warnings: tuple[str, ...] = PrivateAttr(default=())

    @property
    def file_log_dir(self) -> str | None:
        """Directory of robot-agent.log: ``log_dir``; with ``logger_type: "file"`` and no ``log_dir``
        the working directory ``"."`` (the SDK writes its ``all.log`` there); None when logging to the console."""
        if self.logger_type != "file":
            return None
        return self.log_dir or "."

    @property
    def compat_warnings(self) -> tuple[str, ...]:
        """SDK-compatible but sloppy values taken at load, one sentence each (logged at start)."""
        return self._compat_warnings

    @property
    def ignored_keys(self) -> tuple[str, ...]:
        """Foreign top-level keys dropped at load (see :func:`foreign_keys`)."""
        return self._ignored_keys

    def ignored_warning(self) -> str:
        """One line naming the foreign top-level keys dropped at load; "" when there were none."""
        keys = self._ignored_keys
        if not keys:
            return ""
        more = f" and {len(keys) - 20} more" if len(keys) > 20 else ""
        return ("ignoring top-level keys the agent does not use (the ARTEX SDK ignores them too): "
                + ", ".join(repr(k[:64]) for k in keys[:20]) + more)

    @property
    def artex_enabled(self) -> bool:
        """ARTEX is off when ``server`` is empty or null."""
        return bool(self.server)

    def source_timeout_s(self, source: str) -> float:
        """Velocity timeout for ``source``, s: its own, else ``watchdog.velocity_timeout_s``."""
        src = self.control.sources.get(source)
        if src is not None and src.timeout_s is not None:
            return src.timeout_s
        return self.watchdog.velocity_timeout_s


def _json_path(loc: tuple[Any, ...]) -> str:
    path = "$"
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path += f".{part}"
    return path


def _models_in(ann: Any) -> list[type[Section]]:
    """Every Section class inside an annotation (unions, lists, dicts, Optional)."""
    if isinstance(ann, type) and issubclass(ann, Section):
        return [ann]
    out: list[type[Section]] = []
    for a in typing.get_args(ann):
        out.extend(_models_in(a))
    return out


def _walk(loc: tuple[Any, ...]) -> tuple[tuple[Any, ...], type[Section] | None]:
    """Drop discriminator tags from a pydantic ``loc``; return it and the model owning the last key."""
    model: type[Section] | None = AgentConfig
    candidates: list[type[Section]] = []
    clean: list[Any] = []
    owner: type[Section] | None = AgentConfig
    dict_key = False
    for part in loc:
        if candidates and isinstance(part, str):
            tagged = [m for m in candidates if "kind" in m.model_fields
                      and part in typing.get_args(m.model_fields["kind"].annotation)]
            if tagged and (model is None or part not in model.model_fields):
                model, candidates = tagged[0], []
                continue
        clean.append(part)
        owner = model
        if dict_key:
            dict_key = False
            continue
        if isinstance(part, int) or model is None:
            continue
        field = model.model_fields.get(part)
        if field is None:
            model = None
            continue
        dict_key = typing.get_origin(field.annotation) is dict
        found = _models_in(field.annotation)
        candidates = found if len(found) > 1 else []
        model = found[0] if len(found) == 1 else None
    return tuple(clean), owner


#: pydantic's bound errors, shown in hex for addresses: error type -> (ctx key, words)
HEX_BOUNDS = {"less_than_equal": ("le", "at most"), "greater_than_equal": ("ge", "at least")}


def problems_of(err: ValidationError) -> list[tuple[str, str]]:
    """Turn a pydantic error into ``(json_path, message)`` pairs, with 'did you mean' for unknown keys."""
    out: list[tuple[str, str]] = []
    for e in err.errors():
        loc, model = _walk(tuple(e["loc"]))
        msg = e["msg"]
        if e["type"] == "extra_forbidden":
            key = str(loc[-1])
            msg = f"unknown key {key!r}"
            if model is not None:
                close = difflib.get_close_matches(key, list(model.model_fields), n=1, cutoff=0.6)
                if close:
                    msg += f"; did you mean {close[0]!r}?"
        elif e["type"] in HEX_BOUNDS and loc and loc[-1] == "address" and isinstance(e.get("input"), int):
            bound = e.get("ctx", {}).get(HEX_BOUNDS[e["type"]][0])
            msg = f"address 0x{e['input']:02x} is out of range: {HEX_BOUNDS[e['type']][1]} 0x{bound:02x}"
        elif e["type"] == "bool_type":
            msg = "must be true or false (a JSON boolean; not a string such as \"yes\" or a number)"
        elif e["type"] == "union_tag_invalid":
            msg = f"unknown kind {e.get('input', {}).get('kind') if isinstance(e.get('input'), dict) else e.get('input')!r}; {msg}"
        out.append((_json_path(loc), msg))
    return out


#: largest params.json read, bytes (a real one is a few KiB; /dev/zero must not hang the loader)
MAX_CONFIG_BYTES = 1 << 20


def _parse(text: str, origin: str) -> dict[str, Any]:
    """Strict JSON text -> the top-level object. Raises ConfigError for anything else (duplicate
    keys included), never a traceback."""
    try:
        data = json.loads(text, object_pairs_hook=unique_keys)
    except RepeatedKey as err:  # NaN and Infinity literals parse; every number field refuses them with its path
        why = f"duplicate key {err.key[:60]!r} {err.where} (the file would mean only its last value)"
        raise ConfigError(f"{origin}: {why}", [("$", why)]) from err
    except json.JSONDecodeError as err:
        raise ConfigError(f"{origin}: not valid JSON: {err}", [("$", f"line {err.lineno} column {err.colno}: {err.msg}")]) from err
    except ValueError as err:  # an integer beyond sys.get_int_max_str_digits(): say so in the file's terms
        why = f"unusable number: an integer of more than {sys.get_int_max_str_digits()} digits"
        raise ConfigError(f"{origin}: {why}", [("$", why)]) from err
    except RecursionError as err:
        raise ConfigError(f"{origin}: nested too deeply", [("$", "nested too deeply for the JSON parser")]) from err
    if not isinstance(data, dict):
        raise ConfigError(f"{origin}: top level must be an object", [("$", f"expected an object, got {type(data).__name__}")])
    return data


def foreign_keys(data: dict[str, Any]) -> list[str]:
    """Top-level keys that are neither the SDK's nor the agent's, nor a likely misspelling of one.

    A params.json written for the ARTEX SDK may carry the user's own keys (the SDK ignores them);
    the agent ignores them too, with a warning. A key close to a known one (``driver`` for
    ``drivers``) stays an error with a "did you mean".
    """
    known = list(AgentConfig.model_fields)
    return [k for k in data if k not in known and not difflib.get_close_matches(k, known, n=1, cutoff=0.75)]


def loads(text: str, origin: str = "<string>") -> AgentConfig:
    """Parse and validate params.json text. Raises ConfigError with every problem.

    Foreign top-level keys (:func:`foreign_keys`) are dropped; the config's ``ignored_keys``
    lists them and :meth:`AgentConfig.ignored_warning` words the warning the CLI shows. SDK
    leniencies taken are in :attr:`AgentConfig.compat_warnings`.
    """
    data = _parse(text, origin)
    ignored = foreign_keys(data)
    warnings = _sdk_leniency(data)
    mine = {k: v for k, v in data.items() if k not in ignored}
    try:
        cross = crossfield.problems(mine)
        cfg = AgentConfig.model_validate(mine)
    except ValidationError as err:
        # the models' own cross-field checks stop at the first; crossfield reports them all
        problems = [(p, m) for p, m in problems_of(err) if not any(w in m for w in crossfield.REPLACED)]
        _refuse(origin, problems + cross, err)
    except RecursionError as err:
        raise ConfigError(f"{origin}: nested too deeply", [("$", "nested too deeply to validate")]) from err
    if cross:
        _refuse(origin, cross, None)
    cfg._ignored_keys = tuple(ignored)
    cfg._compat_warnings = tuple(warnings)
    return cfg


def _refuse(origin: str, problems: list[tuple[str, str]], cause: BaseException | None) -> typing.NoReturn:
    lines = "\n".join(f"  {p}: {m}" for p, m in problems)
    raise ConfigError(f"{origin}: {len(problems)} problem(s)\n{lines}", problems) from cause


def _sdk_leniency(data: dict[str, Any]) -> list[str]:
    """Take what the SDK's ``load_defaults`` takes where it is sloppy (``data`` is updated in place);
    returns one warning per value taken. A value the SDK would not take either is left for the model
    to refuse with its JSON path."""
    warnings: list[str] = []
    freq = data.get("max_send_freq")
    if isinstance(freq, str):
        try:
            value = float(freq)  # the SDK: float(params.get("max_send_freq", 1/20))
        except ValueError:
            value = None
        if value is not None and value == value and abs(value) != float("inf"):
            data["max_send_freq"] = value
            warnings.append(f"max_send_freq is the string {freq[:40]!r}; taken as the number {value} (as the "
                            "SDK's float() does); write it as a JSON number")
    if data.get("logger_type") == "file" and not data.get("log_dir"):
        warnings.append("logger_type is 'file' without log_dir: robot-agent.log goes into the working "
                        "directory (the SDK writes its all.log there); set log_dir to choose the directory")
    return warnings


def load(path: str | os.PathLike[str]) -> AgentConfig:
    """Read and validate a params.json file. Raises ConfigError (missing file, not UTF-8 included)."""
    return loads(read_text(path), str(path))


#: the UTF-8 byte order mark Windows editors (Notepad) write at the start of a file, as text
BOM = "\ufeff"


def read_text(path: str | os.PathLike[str], *, keep_bom: bool = False) -> str:
    """The text of a params.json file: a regular file (agent.support.readfile) of at most
    :data:`MAX_CONFIG_BYTES`, UTF-8 with or without a leading byte order mark (:data:`BOM`: dropped,
    unless ``keep_bom``, for a writer that keeps the file's form). Raises ConfigError naming the problem."""
    p = Path(path)
    try:
        raw = read_regular(p, MAX_CONFIG_BYTES + 1)
        if len(raw) > MAX_CONFIG_BYTES:
            raise ConfigError(f"{p}: larger than {MAX_CONFIG_BYTES} bytes; not a params.json",
                              [("$", f"larger than {MAX_CONFIG_BYTES} bytes")])
        text = raw.decode("utf-8")             # (not utf-8-sig: an error's byte offset counts the BOM)
    except OSError as err:
        raise ConfigError(f"{p}: cannot read: {err.strerror}", [("$", f"cannot read {p}: {err.strerror}")]) from err
    except UnicodeDecodeError as err:
        where = f"byte {err.start}: {err.reason}"
        raise ConfigError(f"{p}: not UTF-8 text ({where})", [("$", f"not UTF-8 text ({where})")]) from err
    return text if keep_bom or not text.startswith(BOM) else text[1:]
