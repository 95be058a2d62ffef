"""The robot's own failsafes as pure detectors: readings and an injected time in, verdicts out.

Nothing here reads a clock or a device, or changes anything outside itself: the control loop
(agent.control.loop) hands each tick's readings to :meth:`Failsafes.update` and applies the
:class:`Verdict` through the safety latches (``trip``, ``condition_cleared``,
``set_speed_cap``; agent/control/safety.py). Settings: the ``failsafe`` config section
(agent/config/failsafe.py); the model and the defaults' sources: docs/safety.md, "Failsafes".

- battery (:class:`BatteryDetector`): the pack voltage (``V + I * sag_ohm``, averaged over
  ``average_s``) below ``low`` for ``low_for_s`` caps the speed; below ``critical`` for
  ``critical_for_s`` trips. Each recovers above its threshold plus the hysteresis.
- tilt (:class:`TiltDetector`): pitch or roll from the accelerometer's gravity vector over
  ``max_deg`` at every tick for ``for_s`` trips; clears below ``max_deg - clear_margin_deg``.
- stall (:class:`StallDetector`): a track commanded over ``duty`` whose encoder speed stays
  under ``speed_mps`` for ``for_s``, or a motor current over ``max_current_a`` for
  ``current_for_s``, trips; clears once no track pushes while stalled and no current is over.

A verdict names a failsafe in ``trips`` on the tick its condition has held for its time (again
after it cleared and came back), and in ``cleared`` on the tick a tripped condition ended.
Times are the loop's monotonic ``now``, s; samples are told apart by their own timestamps.
"""

from __future__ import annotations

import logging
import math
from collections import deque
from dataclasses import dataclass, field

from agent.config import AgentConfig
from agent.model import ImuSample, PowerSample
from drivers.base import MotorFeedback

log = logging.getLogger(__name__)

BATTERY, TILT, STALL = "battery", "tilt", "stall"
#: Motor kinds whose feedback has encoder speeds / motor currents (drivers/roboclaw.py cmd 79 / 49;
#: drivers/linemotor.py ``E`` lines carry counts and speeds; Sabertooth reports nothing).
SPEED_KINDS = ("roboclaw", "line")
CURRENT_KINDS = ("roboclaw",)


@dataclass(frozen=True, slots=True)
class Verdict:
    """What one update found.

    Attributes:
        trips: (kind, reason) of each failsafe whose condition has just held for its time;
            the reason is one sentence with the figures.
        cleared: kinds whose tripped condition has ended at this update.
        speed_cap_mps: the speed limit in force (battery low), m/s, or None.
        speed_cap_reason: why, with figures; "" without a cap.
    """

    trips: tuple[tuple[str, str], ...] = ()
    cleared: tuple[str, ...] = ()
    speed_cap_mps: float | None = None
    speed_cap_reason: str = ""


class _Hold:
    """A condition that must hold continuously for ``for_s`` (onset at the first true update)."""

    def __init__(self, for_s: float) -> None:
        self.for_s = for_s
        self.since: float | None = None

    def update(self, now: float, true: bool) -> bool:
        """Feed the condition at ``now``; True once it has held for ``for_s``."""
        if not true:
            self.since = None
            return False
        if self.since is None:
            self.since = now
        return now - self.since >= self.for_s

    def held(self, now: float) -> float:
        """How long it has held at ``now``, s (0 when not holding)."""
        return 0.0 if self.since is None else now - self.since


@dataclass
class BatterySettings:
    """Pack thresholds, V (per-cell config times cells), and timing; see BatteryFailsafeConfig."""

    low_v: float
    critical_v: float
    hysteresis_v: float
    low_for_s: float
    critical_for_s: float
    average_s: float
    sag_ohm: float
    low_speed_mps: float


class BatteryDetector:
    """Low (speed cap) and critical (trip) pack voltage; see the module docstring."""

    def __init__(self, s: BatterySettings) -> None:
        self.s = s
        self._samples: deque[tuple[float, float]] = deque()     # (now at arrival, compensated V)
        self._mean: float | None = None                         # of the samples
        self._last_t: float | None = None
        self._low_hold, self._crit_hold = _Hold(s.low_for_s), _Hold(s.critical_for_s)
        self.low = False
        self.critical = False
        self.volts: float | None = None       # the averaged, compensated voltage, V
        self._cap_reason = ""
        self._calm: float | None = None       # a voltage the last update found above both thresholds, nothing held

    def _average(self, now: float, power: PowerSample | None) -> float | None:
        samples, changed = self._samples, False
        v = None if power is None else power.voltage_v
        if v is not None and power.t_mono_s != self._last_t and math.isfinite(v):
            self._last_t = power.t_mono_s
            i = power.current_a if math.isfinite(power.current_a) else 0.0
            samples.append((now, v + i * self.s.sag_ohm))
            changed = True
        while len(samples) > 1 and now - samples[0][0] > self.s.average_s:
            samples.popleft()
            changed = True
        if changed:     # the same samples give the same mean: summed only when they change
            self._mean = sum(x for _, x in samples) / len(samples)
        return self._mean if samples else None

    def update(self, now: float, power: PowerSample | None) -> tuple[str | None, bool]:
        """(trip reason or None, critical condition cleared now); updates :attr:`low`."""
        s = self.s
        v = self.volts = self._average(now, power)
        if v is None:
            return None, False
        if v == self._calm:     # the same voltage, and nothing was low, critical or being timed: nothing is now
            return None, False
        trip, cleared = None, False
        low_timed = self._low_hold.update(now, v < s.low_v)
        if not self.low and low_timed:
            self.low = True
            self._cap_reason = (f"battery {v:.2f} V below low {s.low_v:.2f} V for {self._low_hold.held(now):.1f} s:"
                                f" speed limited to {s.low_speed_mps:.2f} m/s")
        elif self.low and v > s.low_v + s.hysteresis_v:
            self.low = False
            log.info("battery recovered to %.2f V (above low %.2f V + %.2f V): speed limit lifted",
                     v, s.low_v, s.hysteresis_v)
        if self._crit_hold.update(now, v < s.critical_v) and not self.critical:
            self.critical = True
            trip = (f"battery {v:.2f} V below critical {s.critical_v:.2f} V for "
                    f"{self._crit_hold.held(now):.1f} s")
        elif self.critical and v > s.critical_v + s.hysteresis_v:
            self.critical, cleared = False, True
        calm = not (self.low or self.critical) and self._low_hold.since is None and self._crit_hold.since is None
        self._calm = v if calm else None
        return trip, cleared

    def cap_reason(self) -> str:
        """Why the speed is capped, with the figures of the moment it was ("" while not low)."""
        return self._cap_reason if self.low else ""


def tilt_deg(accel_mps2: tuple[float, float, float]) -> tuple[float, float]:
    """(pitch, roll), degrees, from the specific force in the body frame (x forward, y left, z up).

    At rest the accelerometer reads the reaction to gravity, (0, 0, +g) when level. Angles as
    ROS REP 103: roll about x (left side up positive) = atan2(ay, az), pitch about y (nose down
    positive) = atan2(-ax, hypot(ay, az)); both within -180..180. Linear acceleration (braking,
    bumps) tilts this vector too, which is what the debounce is for.
    """
    ax, ay, az = accel_mps2
    return (math.degrees(math.atan2(-ax, math.hypot(ay, az))), math.degrees(math.atan2(ay, az)))


class TiltDetector:
    """Pitch or roll over the limit for the debounce time; see the module docstring."""

    def __init__(self, max_deg: float, for_s: float, clear_margin_deg: float) -> None:
        self.max_deg, self.clear_deg = max_deg, max_deg - clear_margin_deg
        self._hold = _Hold(for_s)
        self.tripped = False

    def update(self, now: float, imu: ImuSample | None) -> tuple[str | None, bool]:
        """(trip reason or None, condition cleared now). No sample: nothing changes but the debounce restarts."""
        a = None if imu is None else imu.accel_mps2
        isfinite = math.isfinite
        if a is None or not (isfinite(a[0]) and isfinite(a[1]) and isfinite(a[2])) or not (a[0] or a[1] or a[2]):
            self._hold.update(now, False)
            return None, False
        pitch, roll = tilt_deg(a)
        worst = max(abs(pitch), abs(roll))
        if self._hold.update(now, worst > self.max_deg):
            if not self.tripped:
                self.tripped = True
                axis, angle = ("pitch", pitch) if abs(pitch) >= abs(roll) else ("roll", roll)
                return (f"{axis} {angle:.1f} deg over {self.max_deg:.1f} deg for "
                        f"{self._hold.held(now):.2f} s"), False
            return None, False
        if self.tripped and worst < self.clear_deg:
            self.tripped = False
            return None, True
        return None, False


@dataclass
class StallSettings:
    """See StallFailsafeConfig; ``counts_per_m`` 0 or ``speed`` False: no speed check."""

    duty: float
    speed_mps: float
    for_s: float
    max_current_a: float | None
    current_for_s: float
    counts_per_m: float
    speed: bool = True


class StallDetector:
    """A pushing track that does not turn, or a motor over its current; see the module docstring.

    Besides its time, a condition must be seen in :data:`MIN_READINGS` distinct feedback readings
    (the motor thread publishes a new object per read): a tick repeating the last reading tells
    nothing new, so a loop ticking faster than the feedback (20 Hz) never trips on one stale value.
    """

    SIDES = ("left", "right")
    MIN_READINGS = 3

    def __init__(self, s: StallSettings) -> None:
        self.s = s
        self._speed = (_Hold(s.for_s), _Hold(s.for_s))
        self._amps = (_Hold(s.current_for_s), _Hold(s.current_for_s))
        self._seen = [0, 0, 0, 0]           # distinct readings while each hold (speed L/R, amps L/R) runs
        self._last: MotorFeedback | None = None
        self.tripped = False
        self._clear = False         # the last update was quiet: every hold and count is reset already

    def _held(self, j: int, hold: _Hold, now: float, true: bool, fresh: bool) -> bool:
        if not true:
            self._seen[j] = 0
        elif fresh:
            self._seen[j] += 1
        return hold.update(now, true) and self._seen[j] >= self.MIN_READINGS

    def update(self, now: float, duty: tuple[float, float], fb: MotorFeedback | None) -> tuple[str | None, bool]:
        """(trip reason or None, condition cleared now) from the duty commanded now and the feedback."""
        s = self.s
        fresh, self._last = fb is not None and fb is not self._last, fb
        quiet = abs(duty[0]) <= s.duty and abs(duty[1]) <= s.duty      # not pushing: duty under the threshold
        if quiet and s.max_current_a is not None and fb is not None:
            for a in (fb.left_a, fb.right_a):
                if a is not None and math.isfinite(a) and abs(a) > s.max_current_a:
                    quiet = False
        if quiet:
            return self._quiet()    # and no motor over the current
        self._clear = False
        reason = None
        active = False
        cps = (None, None) if fb is None else (fb.left_cps, fb.right_cps)
        amps = (None, None) if fb is None else (fb.left_a, fb.right_a)
        for i, side in enumerate(self.SIDES):
            c = cps[i]
            mps = abs(c) / s.counts_per_m if s.speed and s.counts_per_m > 0 and c is not None and math.isfinite(c) \
                else None
            pushing = mps is not None and abs(duty[i]) > s.duty and mps < s.speed_mps
            if self._held(i, self._speed[i], now, pushing, fresh) and reason is None:
                reason = (f"{side} track at duty {duty[i]:+.2f} moved {mps:.2f} m/s (under "
                          f"{s.speed_mps:.2f} m/s) for {self._speed[i].held(now):.1f} s")
            active |= pushing
            a = amps[i]
            over = s.max_current_a is not None and a is not None and math.isfinite(a) and abs(a) > s.max_current_a
            if self._held(2 + i, self._amps[i], now, over, fresh) and reason is None:
                reason = (f"{side} motor {abs(a):.1f} A over {s.max_current_a:.1f} A for "
                          f"{self._amps[i].held(now):.2f} s")
            active |= over
        if reason is not None and not self.tripped:
            self.tripped = True
            return reason, False
        if self.tripped and not active:
            self.tripped = False
            return None, True
        return None, False

    def _quiet(self) -> tuple[str | None, bool]:
        """No condition holds: what the full update finds then (every hold restarts), in fewer steps."""
        if self._clear:             # reset by the last update, and not tripped since (a trip is a full update)
            return None, False
        self._clear = True
        self._seen[:] = (0, 0, 0, 0)
        for hold in (*self._speed, *self._amps):
            hold.since = None
        if self.tripped:
            self.tripped = False
            return None, True
        return None, False


@dataclass
class Failsafes:
    """The configured detectors (None: off) and their update; build with :func:`resolve`."""

    battery: BatteryDetector | None = None
    tilt: TiltDetector | None = None
    stall: StallDetector | None = None
    warnings: tuple[str, ...] = field(default=())

    def update(self, now: float, *, duty: tuple[float, float], feedback: MotorFeedback | None,
               imu: ImuSample | None, power: PowerSample | None) -> Verdict:
        """One tick's readings at ``now``, s (the duty is the one commanded at this tick) -> :class:`Verdict`."""
        trips: list[tuple[str, str]] = []
        cleared: list[str] = []
        for kind, found in ((BATTERY, None if self.battery is None else self.battery.update(now, power)),
                            (TILT, None if self.tilt is None else self.tilt.update(now, imu)),
                            (STALL, None if self.stall is None else self.stall.update(now, duty, feedback))):
            if found is not None:       # (trip reason or None, cleared now)
                if found[0] is not None:
                    trips.append((kind, found[0]))
                if found[1]:
                    cleared.append(kind)
        if self.battery is not None and self.battery.low:
            return Verdict(tuple(trips), tuple(cleared), self.battery.s.low_speed_mps, self.battery.cap_reason())
        return Verdict(tuple(trips), tuple(cleared)) if trips or cleared else _QUIET

    def pending(self) -> bool:
        """True while a condition is being timed and has not tripped yet (battery low or critical, tilt,
        stall): the control loop does not rest then (agent.control.rest), so its time is checked every tick."""
        b, t, s = self.battery, self.tilt, self.stall
        return ((b is not None and ((b._low_hold.since is not None and not b.low)
                                    or (b._crit_hold.since is not None and not b.critical)))
                or (t is not None and t._hold.since is not None and not t.tripped)
                or (s is not None and not s.tripped and any(h.since is not None for h in (*s._speed, *s._amps))))


#: The verdict of an update that found nothing (no trip, nothing cleared, no cap): one object.
_QUIET = Verdict()


def resolve(cfg: AgentConfig) -> Failsafes:
    """The detectors ``cfg`` asks for, each off (with a line in ``warnings``) when its device is missing.

    The warnings are for the caller to log once (the control loop at start, ``check-config``).
    """
    f, d = cfg.failsafe, cfg.drivers
    warnings: list[str] = []
    battery = tilt = stall = None
    if f.battery.enabled:
        pack = getattr(d.power, "battery", None)
        if d.power is None or pack is None:
            warnings.append("failsafe.battery is off: no power monitor configured (drivers.power)")
        else:
            low, crit, hyst = f.battery.cell_volts(pack.chemistry)
            n = pack.cells
            cap = f.battery.low_speed_mps if f.battery.low_speed_mps is not None else cfg.base.max_speed_mps / 2
            battery = BatteryDetector(BatterySettings(
                low_v=low * n, critical_v=crit * n, hysteresis_v=hyst * n, low_for_s=f.battery.low_for_s,
                critical_for_s=f.battery.critical_for_s, average_s=f.battery.average_s,
                sag_ohm=f.battery.sag_ohm, low_speed_mps=cap))
    if f.tilt.enabled:
        if d.imu is None:
            warnings.append("failsafe.tilt is off: no IMU configured (drivers.imu)")
        else:
            tilt = TiltDetector(f.tilt.max_deg, f.tilt.for_s, f.tilt.clear_margin_deg)
    if f.stall.enabled:
        kind = getattr(d.motor, "kind", None)
        speed = kind in SPEED_KINDS and cfg.base.counts_per_m > 0
        current = kind in CURRENT_KINDS and f.stall.max_current_a is not None
        if d.motor is None:
            warnings.append("failsafe.stall is off: no motor controller configured (drivers.motor)")
        elif not speed and not current:
            why = ("base.counts_per_m is 0 (no encoders)" if kind in SPEED_KINDS
                   else f"the {kind} controller reports neither encoder speed nor current")
            warnings.append(f"failsafe.stall is off: {why}")
        else:
            if f.stall.max_current_a is not None and kind not in CURRENT_KINDS:
                warnings.append(f"failsafe.stall.max_current_a is unused: the {kind} controller reports no current")
            if not speed:
                warnings.append("failsafe.stall checks current only: base.counts_per_m is 0 (no encoders)")
            stall = StallDetector(StallSettings(
                duty=f.stall.duty, speed_mps=f.stall.speed_mps, for_s=f.stall.for_s,
                max_current_a=f.stall.max_current_a if current else None,
                current_for_s=f.stall.current_for_s, counts_per_m=cfg.base.counts_per_m, speed=speed))
    return Failsafes(battery, tilt, stall, tuple(warnings))
