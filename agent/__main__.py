"""Command line: ``robot-agent`` / ``python -m agent``.

- ``robot-agent run [--config PATH]``: run the agent (default ``config/params.json``).
- ``robot-agent check-config PATH``: validate a params.json; prints every problem with its
  JSON path and exits 2 when there is any, 0 when the file is valid.
- ``robot-agent probe``: list serial ports, scan I2C buses for supported chips, list cameras,
  print a suggested ``drivers`` section.
- ``robot-agent status``: the health of the running agent as a table (agent.ops.status); exit 0
  healthy, 1 degraded, 2 no agent, 3 stale status.
- ``robot-agent estop [--release] [--reason TEXT]``: set or release the running agent's emergency
  stop through its control socket (agent.ops.estopctl); exit 0 done, 1 refused (release without an
  e-stop), 2 no agent running, 3 permission denied.
- ``robot-agent incidents`` / ``robot-agent export INCIDENT [-o FILE]``: the flight recorder's
  incidents and one incident's window as an MCAP file (agent.recorder.cli; docs/recorder.md).
- ``robot-agent selftest [--config PATH] [--yes]``: open, read and check every configured device,
  pulse each track after a confirmation (agent.devices.selftest); exit 0 all passed, 1 any failed.

``--log-level`` overrides params.json ``logger_level``; where the logs go and how: agent.ops.logs.
"""

from __future__ import annotations

from agent.support.sigint import EXIT_INTERRUPTED, GUARD

if __name__ == "__main__":      # `python -m agent`: Ctrl-C handled before the imports below (agent.support.sigint)
    GUARD.install()

import argparse  # noqa: E402
import asyncio  # noqa: E402
import gc  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import TYPE_CHECKING, Any  # noqa: E402

if TYPE_CHECKING:
    from agent.config import AgentConfig

DEFAULT_CONFIG = "config/params.json"
EXIT_CONFIG = 2

log = logging.getLogger(__name__)


def _config_and_logging(args: argparse.Namespace, level: str | None) -> tuple[AgentConfig | None, Any]:
    """Load ``args.config`` (problems to stderr: None) and set up logging; returns (config, log tail)."""
    from agent.config import ConfigError, load
    from agent.ops.logs import setup_logging
    try:
        cfg = load(args.config)
    except ConfigError as err:
        print(str(err), file=sys.stderr)
        return None, None
    tail = setup_logging(cfg, level)
    if cfg.ignored_keys:
        log.warning("%s: %s", args.config, cfg.ignored_warning())
    for warning in cfg.compat_warnings:
        log.warning("%s: %s", args.config, warning)
    return cfg, tail


def cmd_run(args: argparse.Namespace) -> int:
    # Start allocates what lives as long as the agent (modules, config, parts) and little garbage: the
    # cyclic collector stays off until the agent's startup freeze (agent.app) turns it on again, so
    # the imports and the hub connect do not pay a dozen full collections over a growing heap.
    gc.disable()
    try:
        cfg, tail = _config_and_logging(args, args.log_level)
        if cfg is None:
            return EXIT_CONFIG
        from agent.ops.service import run
        from agent.ops.status import status_path
        status_file = status_path(args.status_file)
        if args.status_file:    # `--status-file logs/status.json` in a fresh clone: no logs/ yet
            try:
                status_file.parent.mkdir(parents=True, exist_ok=True)
            except OSError as err:   # said by the status file's and control socket's own errors too
                log.warning("cannot make the directory of --status-file %s: %s", status_file, err)
        return asyncio.run(run(cfg, config_path=args.config, logs=tail, status_file=status_file))
    finally:
        gc.enable()


def cmd_status(args: argparse.Namespace) -> int:
    from agent.ops.status import report, status_path
    return report(status_path(args.status_file), print)


def cmd_estop(args: argparse.Namespace) -> int:
    from agent.ops.estopctl import command, socket_path
    from agent.ops.status import status_path
    path = Path(args.socket) if args.socket else socket_path(status_path(args.status_file))
    return command(path, args.release, args.reason, print)


def _recordings(args: argparse.Namespace) -> Path | None:
    from agent.config import ConfigError
    from agent.recorder.cli import recordings_dir
    try:
        return recordings_dir(args.dir, args.config)
    except ConfigError as err:
        print(str(err), file=sys.stderr)
        return None


def cmd_incidents(args: argparse.Namespace) -> int:
    from agent.recorder.cli import list_incidents
    directory = _recordings(args)
    return EXIT_CONFIG if directory is None else list_incidents(directory, print, args.json, args.last)


def cmd_export(args: argparse.Namespace) -> int:
    from agent.recorder.cli import export_incident
    directory = _recordings(args)
    if directory is None:
        return EXIT_CONFIG
    before, after = args.before_s, args.after_s
    if before is None or after is None:
        from agent.config import ConfigError, load
        from agent.config.recorder import RecorderConfig
        rc = RecorderConfig()
        if args.config:
            try:
                rc = load(args.config).recorder
            except ConfigError:
                pass
        before = rc.incident_before_s if before is None else before
        after = rc.incident_after_s if after is None else after
    return export_incident(directory, args.incident, args.output, before, after, print)


def cmd_check_config(args: argparse.Namespace) -> int:
    from agent.config import ConfigError, load
    try:
        cfg = load(args.path)
    except ConfigError as err:
        for path, message in err.problems:
            print(f"{args.path}: {path}: {message}")
        if not err.problems:
            print(str(err))
        return EXIT_CONFIG
    if cfg.ignored_keys:
        print(f"{args.path}: warning: {cfg.ignored_warning()}")
    for warning in cfg.compat_warnings:
        print(f"{args.path}: warning: {warning}")
    if cfg.console.enabled:
        from agent.console.auth import refusal
        why = refusal(cfg.console)
        if why:     # the agent runs without its console then (the robot does not depend on it)
            print(f"{args.path}: warning: $.console: {why}")
    from agent.config.control import priority_warnings
    for warning in priority_warnings(cfg.control):     # may be deliberate: a warning, not an error
        print(f"{args.path}: warning: $.control.sources: {warning}")
    from agent.control.failsafes import resolve as resolve_failsafes
    for warning in resolve_failsafes(cfg).warnings:     # a failsafe off for want of its device
        print(f"{args.path}: $.failsafe: {warning}")
    devices = [n for n in ("motor", "imu", "power", "servo") if getattr(cfg.drivers, n) is not None]
    print(f"{args.path}: ok (devices: {', '.join(devices) or 'none'}; cameras: {len(cfg.drivers.cameras)}; "
          f"artex: {'on' if cfg.artex_enabled else 'off'}, sim2bot: {'on' if cfg.sim2bot.enabled else 'off'}, "
          f"robot_msg: {'on' if cfg.robot_msg.enabled else 'off'})")
    return 0


def cmd_selftest(args: argparse.Namespace) -> int:
    cfg, _ = _config_and_logging(args, args.log_level or "warning")
    if cfg is None:
        return EXIT_CONFIG
    from agent.devices.selftest import run
    ask = _ask if sys.stdin is not None and sys.stdin.isatty() else None
    return run(cfg, yes=args.yes, ask=ask, write=print, duty=args.duty, pulse_s=args.pulse_s)


def _ask(prompt: str) -> str:
    """``input(prompt)``; end of input (Ctrl-D) is the answer "" (no), not an EOFError traceback."""
    try:
        return input(prompt)
    except EOFError:
        print()
        return ""


def cmd_probe(args: argparse.Namespace) -> int:
    from agent.ops.logs import setup_logging
    setup_logging(None, args.log_level or "warning")
    from agent.devices.probe import format_probe, probe
    result = probe([int(b) if str(b).isdigit() else b for b in args.bus])
    if args.json:
        print(json.dumps(result, indent=2, default=str))
    else:
        print(format_probe(result))
    return 0


def _bounded(low: float, high: float):
    """argparse type: a float in low..high."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{value:g} is outside {low:g}..{high:g}")
        return value
    return parse


def version() -> str:
    """The installed robot-agent's version (package metadata), else the source tree's pyproject.toml."""
    from importlib import metadata
    try:
        return metadata.version("robot-agent")
    except metadata.PackageNotFoundError:
        import re
        text = (Path(__file__).resolve().parent.parent / "pyproject.toml").read_text(encoding="utf-8")
        found = re.search(r'^version = "([^"]+)"', text, re.M)
        return found.group(1) if found else "unknown"


class _Version(argparse.Action):
    """``--version``: prints :func:`version` and exits; looked up only then (package metadata is a
    directory scan every start would pay)."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS,
                         help="show program's version number and exit")

    def __call__(self, parser: argparse.ArgumentParser, *args: Any) -> None:
        print(f"robot-agent {version()}")
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="robot-agent", description=__doc__.split("\n")[0])
    p.add_argument("--log-level", default=None, help="debug, info, warning, error (overrides logger_level)")
    p.add_argument("--version", action=_Version)
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="run the agent")
    r.add_argument("--config", default=DEFAULT_CONFIG, help=f"params.json (default {DEFAULT_CONFIG})")
    r.add_argument("--status-file", default=None,
                   help="health file for `robot-agent status` (default $ROBOT_AGENT_STATUS_FILE, "
                        "$RUNTIME_DIRECTORY/status.json, /run/robot-agent/status.json)")
    r.set_defaults(func=cmd_run)
    for sp in (r,):
        sp.add_argument("--log-level", default=argparse.SUPPRESS, help="as above, after the command")
    c = sub.add_parser("check-config", help="validate a params.json; exit 2 on problems")
    c.add_argument("path", nargs="?", default=DEFAULT_CONFIG)
    c.set_defaults(func=cmd_check_config)
    pr = sub.add_parser("probe", help="list serial ports, I2C chips and cameras; suggest a drivers section")
    pr.add_argument("--bus", action="append", default=None, help="I2C bus number or path (repeatable; default 1)")
    pr.add_argument("--json", action="store_true", help="machine-readable output")
    pr.set_defaults(func=cmd_probe)
    pr.add_argument("--log-level", default=argparse.SUPPRESS, help="as above, after the command")
    se = sub.add_parser("selftest", help="check every configured device, pulse the tracks; exit 1 on a failure")
    se.add_argument("--config", default=DEFAULT_CONFIG, help=f"params.json (default {DEFAULT_CONFIG})")
    se.add_argument("--yes", action="store_true", help="run the motion test without asking (tracks off the ground!)")
    se.add_argument("--duty", type=_bounded(0.05, 0.5), default=0.15, help="pulse duty, 0.05..0.5 (default 0.15)")
    se.add_argument("--pulse-s", type=_bounded(0.1, 3.0), default=0.5, help="pulse per track, 0.1..3 s (default 0.5)")
    se.add_argument("--log-level", default=argparse.SUPPRESS, help="as above, after the command")
    se.set_defaults(func=cmd_selftest)
    st = sub.add_parser("status", help="health of the running agent; exit 1 degraded, 2 no agent, 3 stale")
    st.add_argument("--status-file", default=None, help="as for run")
    st.set_defaults(func=cmd_status)
    es = sub.add_parser("estop", help="set the emergency stop of the running agent (--release: release it); "
                                      "exit 1 refused, 2 no agent, 3 permission denied")
    es.add_argument("--release", action="store_true", help="release the emergency stop (moves nothing)")
    es.add_argument("--reason", default="", help="why, shown on every channel (default: who ran it)")
    es.add_argument("--status-file", default=None, help="as for run: the control socket is beside it")
    es.add_argument("--socket", default=None, help="the control socket itself (default $ROBOT_AGENT_CONTROL_SOCKET, "
                                                  "else control.sock beside the status file)")
    es.set_defaults(func=cmd_estop)
    rec_help = ("recordings directory (default: recorder.dir of --config, $ROBOT_AGENT_RECORDINGS, "
                "$STATE_DIRECTORY/recordings, /var/lib/robot-agent/recordings)")
    inc = sub.add_parser("incidents", help="list the recorded incidents (e-stops, failsafes, stops, watchdog, "
                                           "lost devices and links); exit 1 none, 2 no recordings")
    inc.add_argument("--dir", default=None, help=rec_help)
    inc.add_argument("--config", default=None, help="params.json whose recorder.dir to read")
    inc.add_argument("--json", action="store_true", help="machine-readable output")
    inc.add_argument("--last", type=int, default=50, help="how many (default 50)")
    inc.set_defaults(func=cmd_incidents)
    ex = sub.add_parser("export", help="write one incident's window (recorder.incident_before_s / _after_s) "
                                       "as an MCAP file for Foxglove; exit 1 no such incident, 3 the "
                                       "output cannot be written")
    ex.add_argument("incident", help="incident id (or a unique prefix), from `robot-agent incidents`")
    ex.add_argument("-o", "--output", default=None, help="output file (default incident-<id>.mcap)")
    ex.add_argument("--dir", default=None, help=rec_help)
    ex.add_argument("--config", default=None, help="params.json whose recorder section to read")
    ex.add_argument("--before-s", type=_bounded(0, 3600), default=None, help="seconds before (default 30)")
    ex.add_argument("--after-s", type=_bounded(0, 3600), default=None, help="seconds after (default 10)")
    ex.set_defaults(func=cmd_export)
    return p


def main(argv: list[str] | None = None) -> int:
    """The command line; ``argv`` None: the process's own (its SIGINT then handled by agent.support.sigint)."""
    if argv is None:            # the `robot-agent` script: this module's imports ran unguarded
        GUARD.install()
    try:
        GUARD.catching()
        args = build_parser().parse_args(argv)
        if getattr(args, "bus", "unset") is None:
            args.bus = [1]
        code = args.func(args)
        sys.stdout.flush()  # a closed pipe shows here, inside the handler, not at exit
        return code
    except BrokenPipeError:  # `robot-agent status | head -1`: the reader left; no traceback
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, as a shell reports a writer whose reader left
    except KeyboardInterrupt:  # Ctrl-C at a prompt, or before `run` handles SIGINT (its imports): nothing
        print("\ninterrupted", file=sys.stderr)   # was driven then (`run` zeroes the motors on a SIGINT it saw)
        return EXIT_INTERRUPTED  # 128 + SIGINT, as a shell reports it
    finally:
        if argv is None:        # the exit status is decided: a Ctrl-C during the interpreter's exit changes nothing
            GUARD.done()


if __name__ == "__main__":
    sys.exit(main())
