"""``robot-agent selftest``: check every configured device on the robot, for a field engineer.

Run it with the tracks off the ground and the agent stopped (it opens the devices itself).
Each configured device is opened, read and checked:

=========  ===================================================================================
motor      opens, answers a feedback read; battery voltage (when reported) above 0
motion     (after confirmation) each track alone at ``duty`` for ``pulse_s``, re-sent every 0.1 s
           (the controller's own serial timeout stops it otherwise); its encoder counts must
           change the way of the duty (rising for forward duty: counts running backwards FAIL,
           naming the fix: swap the encoder A/B or the motor leads, ``invert_left/right``); then zero, confirmed by the encoder speeds falling to about 0 (a controller
           without encoders: the zero command acknowledged)
imu        one sample: ``|accel|`` within 1 m/s^2 of g (9.81) at rest, gyro finite
power      bus voltage above 0 V
servo      the chip answers (open reads its registers back); no servo is moved
estop      the e-stop input's line is requested and reads closed (an open circuit fails: press
           and release the button, check the wiring; docs/hardware.md "E-stop input")
camera     each camera opens and delivers a frame of the configured kind
=========  ===================================================================================

The motion test asks first (``--yes`` skips the question); with no terminal to ask on and
no ``--yes`` it is skipped with a line saying so. The result is a pass/fail table; exit 0 when
nothing failed, 1 otherwise (a skipped check is not a failure), 2 for a config error.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agent.config import AgentConfig
from agent.devices.build import Buses, build_driver
from drivers.camera import Camera
from drivers.errors import DriverError
from drivers.transport import Openers

G_MPS2 = 9.80665
#: Motion test: how often the duty is re-sent, and how long zero may take to show, s.
RESEND_S = 0.1
SETTLE_S = 2.0

PASS, FAIL, SKIP = "PASS", "FAIL", "SKIP"


@dataclass(frozen=True)
class Check:
    """One row of the table: device, what was checked, PASS/FAIL/SKIP and the evidence or reason."""

    device: str
    what: str
    result: str
    detail: str


def table(checks: list[Check]) -> str:
    """The checks as an aligned text table with a header."""
    rows = [("device", "check", "result", "detail")] + [(c.device, c.what, c.result, c.detail) for c in checks]
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    return "\n".join(f"{r[0]:<{widths[0]}}  {r[1]:<{widths[1]}}  {r[2]:<{widths[2]}}  {r[3]}".rstrip()
                     for r in rows)


def summary(checks: list[Check]) -> str:
    """The last line: failures first, then the skipped checks named (a skip is not a pass)."""
    failed = sum(c.result == FAIL for c in checks)
    skipped = [f"{c.device} {c.what}" for c in checks if c.result == SKIP]
    untested = f"; NOT tested: {', '.join(skipped)}" if skipped else ""
    if failed:
        return f"selftest: {failed} failed{untested}"
    return f"selftest: no failures{untested}" if skipped else "selftest: all passed"


def exit_code(checks: list[Check]) -> int:
    """0 when no check failed, else 1."""
    return 1 if any(c.result == FAIL for c in checks) else 0


# --------------------------------------------------------------------------- per device


def _imu(drv: Any) -> tuple[bool, str]:
    s = drv.read()
    g = math.hypot(*s.accel_mps2)
    ok = abs(g - G_MPS2) < 1.0 and all(math.isfinite(w) for w in s.gyro_radps)
    return ok, f"|accel| {g:.2f} m/s^2 (expect {G_MPS2:.2f} at rest), gyro max {max(map(abs, s.gyro_radps)):.3f} rad/s"


def _power(drv: Any) -> tuple[bool, str]:
    s = drv.read()
    if s.voltage_v is None:
        return False, "bus voltage 0 V: battery not connected to the monitor's VIN-/VBUS?"
    percent = "-" if s.percent is None else f"{s.percent:.0f}"
    return s.voltage_v > 0, f"{s.voltage_v:.2f} V, {s.current_a:.3f} A, battery {percent} %"


def _servo(drv: Any) -> tuple[bool, str]:
    return True, f"chip answered at 0x{drv.cfg.address:02x} (no servo moved)"


def _motor(drv: Any) -> tuple[bool, str]:
    fb = drv.read_feedback()
    counts = "-" if fb.left_counts is None else f"{fb.left_counts}/{fb.right_counts}"
    battery = "-" if fb.battery_v is None else f"{fb.battery_v:.1f} V"
    ok = fb.battery_v is None or fb.battery_v > 0
    return ok, f"battery {battery}, encoder counts L/R {counts}, status {fb.status_text or 'ok'}"


def _estop(drv: Any) -> tuple[bool, str]:
    closed = drv.read()
    where = f"{drv.path} line {drv.cfg.line!r}"
    if closed:
        return True, f"circuit closed on {where} (e-stop released)"
    return False, f"circuit OPEN on {where}: e-stop pressed, a wire off, or bias/closed_level wrong"


READS: dict[str, Callable[[Any], tuple[bool, str]]] = {"motor": _motor, "imu": _imu, "power": _power,
                                                       "servo": _servo, "estop": _estop}


def check_device(kind: str, make: Callable[[], Any], read: Callable[[Any], tuple[bool, str]],
                 then: Callable[[Any], list[Check]] | None = None) -> list[Check]:
    """Open what ``make`` builds, run ``read`` (and ``then`` while it is open), close it."""
    drv = None
    try:
        drv = make()
        drv.open()
        ok, detail = read(drv)
        rows = [Check(kind, "open + read", PASS if ok else FAIL, detail)]
        return rows + (then(drv) if then is not None and ok else [])
    except (DriverError, OSError, ValueError) as err:
        return [Check(kind, "open + read", FAIL, str(err) or type(err).__name__)]
    finally:
        if drv is not None:
            drv.close()


# --------------------------------------------------------------------------- motion


def _drive(drv: Any, left: float, right: float, seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        drv.set_duty(left, right)
        time.sleep(min(RESEND_S, max(0.0, end - time.monotonic())))


def _counts(drv: Any) -> tuple[int | None, int | None]:
    fb = drv.read_feedback()
    return fb.left_counts, fb.right_counts


def motion_checks(drv: Any, duty: float, pulse_s: float) -> list[Check]:
    """Pulse each track alone, then zero and confirm zero (see the module docstring)."""
    rows = []
    for track, (left, right) in (("left", (duty, 0.0)), ("right", (0.0, duty))):
        before = _counts(drv)
        try:
            _drive(drv, left, right, pulse_s)
        finally:
            drv.stop()
        after = _counts(drv)
        side = 0 if track == "left" else 1
        if before[side] is None:
            rows.append(Check("motor", f"pulse {track} track", PASS, f"{duty:.2f} duty for {pulse_s:g} s "
                              "acknowledged (no encoders: watch the track move)"))
            continue
        rows.append(_direction(track, duty, before[side], after[side]))
    return rows + [_confirm_zero(drv)]


#: Encoder counts a pulse must move a track by to count as moved (noise, backlash).
MIN_COUNTS = 5


def _direction(track: str, duty: float, before: int, after: int) -> Check:
    """The pulse row: the track moved, and its encoder counts ran the way of its duty.

    Forward duty must give rising counts. Counts that run against the duty mean the motor and
    its encoder disagree: the motor leads are reversed or the encoder's A/B channels are swapped
    (the most common bring-up mistake); the detail names the fix for each case.
    """
    delta = after - before
    what = f"pulse {track} track"
    moved = f"{track} encoder counts {before} -> {after} ({delta:+d}) for duty {duty:+.2f}"
    if abs(delta) < MIN_COUNTS:
        return Check("motor", what, FAIL, moved + ": track did not move (wiring, E-stop, motor power?)")
    if (delta > 0) != (duty > 0):
        return Check("motor", what, FAIL, moved + ": counts ran against the duty (motor and encoder disagree). "
                     f"If the {track} track moved forward, swap its encoder's A and B wires; if it moved backward, "
                     f"swap its motor leads (or set drivers.motor.invert_{track}: true AND swap the encoder A/B)")
    return Check("motor", what, PASS, moved + f"; the track must have moved forward (backward: set "
                 f"drivers.motor.invert_{track}: true)")


def _confirm_zero(drv: Any) -> Check:
    drv.stop()
    deadline = time.monotonic() + SETTLE_S
    while True:
        fb = drv.read_feedback()
        if fb.left_cps is None:
            return Check("motor", "zero duty", PASS, "zero commanded and acknowledged (no speed feedback)")
        if max(abs(fb.left_cps), abs(fb.right_cps)) < 1.0:
            return Check("motor", "zero duty", PASS, f"tracks stopped (speeds {fb.left_cps:.0f}/{fb.right_cps:.0f} counts/s)")
        if time.monotonic() > deadline:
            return Check("motor", "zero duty", FAIL, f"still moving {SETTLE_S:g} s after zero: "
                         f"{fb.left_cps:.0f}/{fb.right_cps:.0f} counts/s")
        time.sleep(RESEND_S)


# --------------------------------------------------------------------------- all


def run_checks(cfg: AgentConfig, *, motion: bool, sim: Any = None, duty: float = 0.15,
               pulse_s: float = 0.5) -> list[Check]:
    """Check every configured device (module docstring). ``sim``: the simulated tank serving ``sim://``.

    Args:
        motion: run the motor pulse test (the caller has asked for confirmation).
        duty: pulse duty, 0..1. pulse_s: pulse length per track, s.
    """
    buses = Buses(sim.openers() if sim is not None else Openers())
    checks: list[Check] = []
    try:
        for kind, dcfg in cfg.drivers.devices():
            then = (lambda drv: motion_checks(drv, duty, pulse_s)) if kind == "motor" and motion else None
            checks += check_device(kind, lambda: build_driver(kind, dcfg, buses), READS[kind], then)
            if kind == "motor" and not motion:
                checks.append(Check("motor", "pulse tracks", SKIP, "motion test not confirmed"))
        for cam in cfg.drivers.cameras:
            checks += check_device(f"camera.{cam.id}", lambda: build_driver(f"camera.{cam.id}", cam, buses), _frame)
    finally:
        buses.close()
    return checks


def _frame(cam: Camera) -> tuple[bool, str]:
    image, _ = cam.read()
    return True, f"{image.shape[1]}x{image.shape[0]} frame through {cam.kind}"


def run(cfg: AgentConfig, *, yes: bool, ask: Callable[[str], str] | None, write: Callable[[str], Any],
        duty: float = 0.15, pulse_s: float = 0.5) -> int:
    """The ``selftest`` command: confirm the motion test, run every check, write the table; exit code.

    Args:
        yes: run the motion test without asking.
        ask: prompt function (``input``) when a terminal can answer, else None (motion skipped).
        write: line writer (``print``).
    """
    motion = yes
    if not yes and cfg.drivers.motor is not None:
        if ask is None:
            write("motion test skipped: no terminal to confirm on and no --yes")
        else:
            answer = ask(f"Tracks off the ground? Pulse each track at {duty:.0%} duty for {pulse_s:g} s [y/N] ")
            motion = answer.strip().lower() in ("y", "yes")
    from agent.devices.simtank import SimTank, serves
    sim = SimTank(cfg) if serves(cfg) else None
    try:
        checks = run_checks(cfg, motion=motion, sim=sim, duty=duty, pulse_s=pulse_s)
    finally:
        if sim is not None:
            sim.close()
    write(table(checks))
    code = exit_code(checks)
    write(summary(checks))
    return code
