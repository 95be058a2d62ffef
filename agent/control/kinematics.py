"""Skid-steer kinematics and odometry of the tracked base: pure functions, SI units.

Frames follow REP-103 (agent.model): body x forward, y left, +omega turns left.
A tracked (skid-steer) base with track width ``W`` moves each track at

    v_l = vx - omega * W / 2        v_r = vx + omega * W / 2

and, conversely, ``vx = (v_l + v_r) / 2`` and ``omega = (v_r - v_l) / W``.
Duty is track speed over the speed at full duty (``base.max_speed_mps``).

Nothing here keeps time or talks to a device: the control loop passes ``dt``
and encoder counts in and writes the result out.

One clamp policy (docs/architecture.md, "One check per command"): :func:`scale_to_limit`
is the one function that brings track values within a limit (one factor for both
tracks, so the curvature is kept); the speed limit and the duty range both use it.
It checks no finiteness: the values come from admitted commands, which the edge
(agent.model) made finite and at most ``OVER_LIMIT_FACTOR`` times the maximum, so
nothing here overflows either. Nothing here turns a NaN into a number (no
``min``/``max`` against a constant, which would keep the constant): were one to
arrive, it would pass through to the motor driver's device guard, which refuses
a non-finite duty with nothing sent.
"""

from __future__ import annotations

import logging
import math
from typing import NamedTuple

from agent.model import Odometry

log = logging.getLogger(__name__)

Pair = tuple[float, float]


def twist_to_tracks(vx_mps: float, omega_radps: float, track_width_m: float) -> Pair:
    """Body twist -> (left, right) track speed, m/s, no limit applied.

    Example: vx 0.5 m/s, omega 1 rad/s, W 0.3 m -> (0.35, 0.65).
    """
    half = omega_radps * track_width_m / 2.0
    return vx_mps - half, vx_mps + half


def tracks_to_twist(left_mps: float, right_mps: float, track_width_m: float) -> Pair:
    """(left, right) track speed, m/s -> body twist (vx m/s, omega rad/s)."""
    return (left_mps + right_mps) / 2.0, (right_mps - left_mps) / track_width_m


def scale_to_limit(left: float, right: float, limit: float) -> Pair:
    """Scale both tracks by one factor so neither exceeds ``limit`` in magnitude: the one clamp
    policy of the control loop (speed limit and duty range).

    One factor keeps the ratio, so the path curvature (vx/omega) is preserved.
    Example: (1.4, 0.6) with limit 1.0 -> (1.0, 0.428571...).
    """
    peak = max(abs(left), abs(right))
    if peak <= limit or peak == 0.0:
        return left, right
    k = limit / peak
    return left * k, right * k


def limited_tracks(vx_mps: float, omega_radps: float, track_width_m: float, limit_mps: float) -> Pair:
    """Body twist -> (left, right) track speed, m/s, scaled to ``limit_mps`` (curvature kept).

    The twist is an admitted command's (agent.model: finite, at most ``OVER_LIMIT_FACTOR``
    times the maximum speed and yaw rate), so the track speeds are finite.
    Example: vx 0.5 m/s, omega 2 rad/s, W 0.3 m, limit 0.5 -> (0.2, 0.8) scaled to (0.125, 0.5).
    """
    return scale_to_limit(*twist_to_tracks(vx_mps, omega_radps, track_width_m), limit_mps)


def ramp(current: Pair, target: Pair, max_step: float) -> Pair:
    """Move ``current`` towards ``target`` with no track changing by more than ``max_step``.

    Both tracks move by the same fraction of their remaining change, so a ramp
    from rest to a turn keeps the turn's curvature all the way. ``max_step`` is
    ``max_accel_mps2 * dt`` (or its duty equivalent).
    Example: (0, 0) -> (1.0, 0.5) with step 0.04 -> (0.04, 0.02).
    """
    dl = target[0] - current[0]
    dr = target[1] - current[1]
    peak = max(abs(dl), abs(dr))
    if peak <= max_step:
        return target
    k = max_step / peak
    return current[0] + dl * k, current[1] + dr * k


def tracks_to_duty(left_mps: float, right_mps: float, full_duty_speed_mps: float) -> Pair:
    """Track speeds, m/s -> duty -1..1: ``v / full_duty_speed``, brought within -1..1 by the one clamp
    policy (:func:`scale_to_limit`; the speed limit is at most the full-duty speed, so this only
    absorbs rounding)."""
    return scale_to_limit(left_mps / full_duty_speed_mps, right_mps / full_duty_speed_mps, 1.0)


def wrap_angle(a: float) -> float:
    """Wrap an angle to -pi..pi, rad."""
    return math.atan2(math.sin(a), math.cos(a))


def integrate(odom: Odometry, d_left_m: float, d_right_m: float, dt_s: float,
              track_width_m: float, twist: Pair | None = None) -> Odometry:
    """Advance the pose by the track travel of one interval (midpoint integration).

    The heading used for the translation is the mean of the interval's start
    and end headings, exact for constant-curvature motion to second order.

    Args:
        odom: pose and twist at the start of the interval.
        d_left_m, d_right_m: distance each track moved in the interval, m.
        dt_s: interval length, s (> 0 for the twist; 0 keeps the previous twist).
        track_width_m: distance between track centrelines, m.
        twist: (vx m/s, omega rad/s) to report instead of the interval's travel / ``dt_s``.

    Returns:
        The pose at the end of the interval, yaw wrapped to -pi..pi; ``distance_m``
        grows by the path length of the body centre.
    """
    ds = (d_left_m + d_right_m) / 2.0
    dyaw = (d_right_m - d_left_m) / track_width_m
    mid = odom.yaw_rad + dyaw / 2.0
    if twist is not None:
        vx, omega = twist
    else:
        vx, omega = (ds / dt_s, dyaw / dt_s) if dt_s > 0 else (odom.vx_mps, odom.omega_radps)
    return Odometry(
        x_m=odom.x_m + ds * math.cos(mid),
        y_m=odom.y_m + ds * math.sin(mid),
        yaw_rad=wrap_angle(odom.yaw_rad + dyaw),
        vx_mps=vx,
        omega_radps=omega,
        distance_m=odom.distance_m + abs(ds),
    )


class TrackReading(NamedTuple):
    """What one tick measured or assumed about the tracks.

    Attributes:
        left_m, right_m: travel since the previous tick, m.
        left_mps, right_mps: track speed, m/s (encoder speed, else travel/dt, else commanded).
        from_encoders: True when the figures come from encoder counts.
    """

    left_m: float
    right_m: float
    left_mps: float
    right_mps: float
    from_encoders: bool


class Odometer:
    """Dead reckoning from encoder counts, or from commanded track speeds without them.

    Encoders are used when ``counts_per_m > 0`` and the tick has counts. The first
    counts after a gap only set the baseline; a jump no track could have made in
    the time between the two readings (a controller reset, a counter wrap) re-seeds
    the baseline with a warning instead of teleporting the pose. That time is the
    longer of the ticks' time since the counts last changed and, when the reads are
    timed, the span from the start of the read that gave the previous counts to the
    end of this one: the motor thread reads on its own schedule, so on a loaded
    machine two ticks 20 ms apart may see counts read 0.5 s apart (a tick held up
    between its clock and its readings, or a set published late), a legitimate
    delta that a bound on the ticks' time alone refused.

    Args:
        track_width_m: distance between track centrelines, m.
        counts_per_m: encoder counts per metre of track travel; 0 = no encoders.
        max_speed_mps: fastest possible track speed, m/s (bounds plausible jumps).
    """

    #: how long an encoder speed estimate is held while the counts do not change, s
    SPEED_HOLD_S = 0.25

    def __init__(self, track_width_m: float, counts_per_m: float, max_speed_mps: float) -> None:
        self.track_width_m = track_width_m
        self.counts_per_m = counts_per_m
        self.max_speed_mps = max_speed_mps
        self.odom = Odometry()
        self._counts: tuple[int, int] | None = None
        self._span: tuple[float, float] | None = None  # (start, end) of the read that gave _counts, s
        self._since_change_s = 0.0  # time since the counts last changed (feedback may be slower than ticks)
        self._speed: Pair = (0.0, 0.0)  # last encoder speed estimate, m/s

    def measure(self, dt_s: float, counts: tuple[int, int] | None, cps: Pair | None,
                applied_mps: Pair, span: tuple[float, float] | None = None) -> TrackReading:
        """Track travel and speed for the interval that just ended.

        The interval that only sets the encoder baseline (first counts, after a gap
        or a jump) falls back to the commanded speeds.

        Args:
            dt_s: interval length, s.
            counts: (left, right) encoder counts now, or None when not read.
            cps: (left, right) encoder speed, counts/s, or None when the device has none.
            applied_mps: (left, right) track speed commanded during the interval, m/s.
            span: (start, end) monotonic time of the read that got ``counts``, s, or None when
                not known (the jump bound then rests on the ticks' time alone).
        """
        if self.counts_per_m > 0 and counts is not None:
            prev, self._counts = self._counts, counts
            prev_span, self._span = self._span, span
            self._since_change_s += max(dt_s, 0.0)
            if prev is not None:
                dl = (counts[0] - prev[0]) / self.counts_per_m
                dr = (counts[1] - prev[1]) / self.counts_per_m
                since = self._since_change_s
                elapsed = since if span is None or prev_span is None else max(since, span[1] - prev_span[0])
                bound = 2.0 * self.max_speed_mps * elapsed + 0.05
                changed = counts != prev
                if changed:
                    self._since_change_s = 0.0
                if abs(dl) <= bound and abs(dr) <= bound:
                    if cps is not None:
                        vl, vr = cps[0] / self.counts_per_m, cps[1] / self.counts_per_m
                    elif changed and since > 0:
                        # speed over the time since the counts last moved: feedback may arrive
                        # every few ticks, and unchanged counts in between are not a standstill;
                        # timed reads: over the time between them (the ticks' time may be far shorter)
                        apart = since if span is None or prev_span is None else \
                            (span[0] + span[1] - prev_span[0] - prev_span[1]) / 2.0
                        apart = apart if apart > 0 else since
                        vl, vr = dl / apart, dr / apart
                        self._speed = (vl, vr)
                    elif since <= self.SPEED_HOLD_S:
                        vl, vr = self._speed
                    else:
                        vl = vr = 0.0
                        self._speed = (0.0, 0.0)
                    return TrackReading(dl, dr, vl, vr, True)
                log.warning("odometry: encoder jump of (%.3f, %.3f) m in %.3f s is impossible; "
                            "taking the new counts as the baseline", dl, dr, elapsed)
        else:
            self._counts = None
            self._span = None
        dt = max(dt_s, 0.0)
        return TrackReading(applied_mps[0] * dt, applied_mps[1] * dt,
                            applied_mps[0], applied_mps[1], False)

    def update(self, dt_s: float, reading: TrackReading) -> Odometry:
        """Integrate one interval's travel into the pose and return it.

        The twist is the reading's track speeds (encoder speed, or commanded), not travel / dt:
        encoder feedback may arrive every few ticks, and travel per tick is then lumpy.
        """
        vl, vr = reading.left_mps, reading.right_mps
        self.odom = integrate(self.odom, reading.left_m, reading.right_m, dt_s, self.track_width_m,
                              ((vl + vr) / 2.0, (vr - vl) / self.track_width_m))
        return self.odom
