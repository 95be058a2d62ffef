"""Tracked-vehicle physics shared by the device emulators of the simulated tank.

The motor-controller emulator writes duty into it and reads encoder counts
and currents back; the IMU emulator reads body accelerations and yaw rate;
the power-monitor emulator reads battery voltage and current; the servo
emulator reports pulse widths to it. One :class:`TankPhysics` ties them
together so the IMU's yaw rate follows ``omega``, acceleration follows speed
changes and the battery sags with current.

Model: each track is a first-order lag from duty to speed
(``v' = (duty * max_speed - v) / tau``); the body twist is the skid-steer
mean/difference; pose integrates the twist. Battery: open-circuit voltage from
the state of charge minus ``R_internal * I``; current is idle draw plus motor
current proportional to |duty| and to acceleration effort.

Emulator controls for the failsafes (what the world does to the tank, not flags in the agent):
:meth:`TankPhysics.set_charge` / :meth:`drain_to` drain the battery (the power monitor reads the
lower voltage, with the same load sag); :meth:`set_tilt` tilts the body (the IMUs' gravity vector
turns with it); :meth:`set_obstacle` puts an obstacle in the way (the tracks stop while the
motors push, and draw their full stall current).
For bring-up (``robot-agent selftest``): :meth:`TankPhysics.set_wiring` wires one side backwards,
its motor leads reversed (the track runs against its duty) or its encoder A/B swapped (the counts
run against the track).

Thread-safe: emulators run on their own threads (pty servers) and the agent's
threads read through them. Time advances with :meth:`step` or, by default,
lazily from a monotonic clock on every access (``auto_step=True``).
:meth:`TankPhysics.now` is the physics time: what the emulated firmware
stamps its readings with, so counts and their timestamps share one clock.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass

GRAVITY_MPS2 = 9.80665


@dataclass
class TankParams:
    """Geometry and electrical model of the simulated tank.

    Attributes:
        track_width_m: distance between track centrelines, m.
        max_speed_mps: track speed at duty 1.0, m/s.
        tau_s: first-order time constant from duty to track speed, s.
        counts_per_m: encoder counts per metre of track travel.
        cells: battery cells in series; cell_full_v / cell_empty_v per cell, V.
        capacity_ah: battery capacity, Ah. r_internal_ohm: pack resistance, ohm.
        idle_a: electronics draw, A. stall_a: motor current per track at full duty, A.
    """

    track_width_m: float = 0.30
    max_speed_mps: float = 1.0
    tau_s: float = 0.15
    counts_per_m: float = 4000.0
    cells: int = 3
    cell_full_v: float = 4.2
    cell_empty_v: float = 3.3
    capacity_ah: float = 5.0
    r_internal_ohm: float = 0.05
    idle_a: float = 0.4
    stall_a: float = 6.0


class TankPhysics:
    """State of one simulated tracked vehicle. See module docstring for the model."""

    def __init__(self, params: TankParams | None = None, *, auto_step: bool = True,
                 clock=time.monotonic) -> None:
        self.params = params or TankParams()
        self._clock = clock
        self._auto = auto_step
        self._lock = threading.RLock()
        self._t = clock()
        self.t_s = 0.0                  # physics time: seconds the model has advanced
        self.duty = [0.0, 0.0]          # left, right, -1..1
        self.track_mps = [0.0, 0.0]     # left, right
        self.track_m = [0.0, 0.0]       # distance travelled per track, m
        self.x_m = 0.0
        self.y_m = 0.0
        self.yaw_rad = 0.0
        self.vx_mps = 0.0
        self.omega_radps = 0.0
        self.ax_mps2 = 0.0              # body-frame linear acceleration, m/s^2
        self.ay_mps2 = 0.0
        self.charge_ah = self.params.capacity_ah
        self.servo_pulse_us: dict[int, float] = {}
        self.roll_rad = 0.0             # body tilt (ROS REP 103: roll about x, pitch about y), rad
        self.pitch_rad = 0.0
        self.blocked = False            # an obstacle holds the tracks still
        self.motor_sign = [1, 1]        # -1: that motor's leads are reversed (wired backwards)
        self.encoder_sign = [1, 1]      # -1: that encoder's A/B channels are swapped

    # ------------------------------------------------------------------ time
    def step(self, dt: float | None = None) -> None:
        """Advance the model by ``dt`` seconds (default: to the clock's now)."""
        with self._lock:
            now = self._clock()
            if dt is None:
                dt = now - self._t
            self._t = now
            if dt <= 0:
                return
            self.t_s += dt
            p = self.params
            # integrate in small sub-steps for stability
            n = max(1, int(math.ceil(dt / 0.005)))
            h = dt / n
            for _ in range(n):
                old_vx = self.vx_mps
                for i in (0, 1):
                    target = 0.0 if self.blocked else self.motor_sign[i] * self.duty[i] * p.max_speed_mps
                    self.track_mps[i] = 0.0 if self.blocked else (
                        self.track_mps[i] + (target - self.track_mps[i]) * min(1.0, h / p.tau_s))
                    self.track_m[i] += self.track_mps[i] * h
                vl, vr = self.track_mps
                self.vx_mps = 0.5 * (vl + vr)
                self.omega_radps = (vr - vl) / p.track_width_m
                self.ax_mps2 = (self.vx_mps - old_vx) / h
                self.ay_mps2 = self.vx_mps * self.omega_radps  # centripetal
                self.yaw_rad += self.omega_radps * h
                self.x_m += self.vx_mps * math.cos(self.yaw_rad) * h
                self.y_m += self.vx_mps * math.sin(self.yaw_rad) * h
                self.charge_ah = max(0.0, self.charge_ah - self.current_a_unlocked() * h / 3600.0)
            self.yaw_rad = math.atan2(math.sin(self.yaw_rad), math.cos(self.yaw_rad))

    def now(self) -> float:
        """Physics time, s since creation: the time the model has advanced (follows the clock when
        ``auto_step``, moves only with :meth:`step` otherwise). The emulators' device clock."""
        with self._lock:
            self._sync()
            return self.t_s

    def _sync(self) -> None:
        if self._auto:
            self.step()

    # ------------------------------------------------------------------ inputs
    def set_duty(self, left: float, right: float) -> None:
        """Motor controller output, each -1..1 (clamped)."""
        with self._lock:
            self._sync()
            self.duty = [max(-1.0, min(1.0, float(left))), max(-1.0, min(1.0, float(right)))]

    def set_servo_pulse(self, channel: int, pulse_us: float) -> None:
        """Servo PWM output on ``channel``, microseconds (0 = off)."""
        with self._lock:
            self.servo_pulse_us[channel] = float(pulse_us)

    # ------------------------------------------------------------------ emulator controls
    def set_charge(self, fraction: float) -> None:
        """Battery state of charge, 0..1 (clamped): the open-circuit voltage follows it linearly."""
        with self._lock:
            self._sync()
            self.charge_ah = self.params.capacity_ah * max(0.0, min(1.0, float(fraction)))

    def drain_to(self, cell_v: float) -> None:
        """Drain (or charge) the battery to an open-circuit voltage of ``cell_v`` per cell, V.

        Raises:
            ValueError: outside the model's cell_empty_v..cell_full_v.
        """
        p = self.params
        if not p.cell_empty_v <= cell_v <= p.cell_full_v:
            raise ValueError(f"cell voltage {cell_v!r} outside the emulated battery's "
                             f"{p.cell_empty_v}..{p.cell_full_v} V")
        self.set_charge((cell_v - p.cell_empty_v) / (p.cell_full_v - p.cell_empty_v))

    def set_tilt(self, roll_rad: float = 0.0, pitch_rad: float = 0.0) -> None:
        """Tilt the body: roll about x (left side up positive), pitch about y (nose down positive), rad."""
        if not all(math.isfinite(a) and abs(a) <= math.pi for a in (roll_rad, pitch_rad)):
            raise ValueError(f"tilt ({roll_rad!r}, {pitch_rad!r}) rad must be finite, within +-pi")
        with self._lock:
            self._sync()
            self.roll_rad, self.pitch_rad = float(roll_rad), float(pitch_rad)

    def tilt(self) -> tuple[float, float]:
        """(roll, pitch), rad."""
        with self._lock:
            return self.roll_rad, self.pitch_rad

    def set_obstacle(self, blocked: bool = True) -> None:
        """An obstacle that holds the tank: the tracks stop at once and stay still while it is there."""
        with self._lock:
            self._sync()
            self.blocked = bool(blocked)

    def set_wiring(self, side: str, *, motor_reversed: bool = False, encoder_swapped: bool = False) -> None:
        """Wire one side (``"left"`` or ``"right"``) backwards, or correctly again (both False).

        ``motor_reversed``: the motor leads are swapped (positive duty runs the track backwards).
        ``encoder_swapped``: the encoder's A/B channels are swapped (the counts run against the track).

        Raises:
            ValueError: ``side`` is neither ``"left"`` nor ``"right"``.
        """
        if side not in ("left", "right"):
            raise ValueError(f"side {side!r} must be 'left' or 'right'")
        i = 0 if side == "left" else 1
        with self._lock:
            self._sync()
            self.motor_sign[i] = -1 if motor_reversed else 1
            self.encoder_sign[i] = -1 if encoder_swapped else 1

    # ------------------------------------------------------------------ outputs
    def encoder_counts(self) -> tuple[int, int]:
        """Left, right encoder counts (signed running totals; + forward unless the A/B are swapped)."""
        with self._lock:
            self._sync()
            c = self.params.counts_per_m
            s = self.encoder_sign
            return int(round(s[0] * self.track_m[0] * c)), int(round(s[1] * self.track_m[1] * c))

    def encoder_cps(self) -> tuple[float, float]:
        """Left, right encoder speed, counts/s (signed as :meth:`encoder_counts`)."""
        with self._lock:
            self._sync()
            c = self.params.counts_per_m
            s = self.encoder_sign
            return s[0] * self.track_mps[0] * c, s[1] * self.track_mps[1] * c

    def accel_body_mps2(self) -> tuple[float, float, float]:
        """Specific force in the body frame, m/s^2, gravity included (flat ground: z = +g; tilted:
        the reaction to gravity turned into the body frame, (-g sin p, g cos p sin r, g cos p cos r))."""
        with self._lock:
            self._sync()
            r, p = self.roll_rad, self.pitch_rad
            g = GRAVITY_MPS2
            return (self.ax_mps2 - g * math.sin(p), self.ay_mps2 + g * math.cos(p) * math.sin(r),
                    g * math.cos(p) * math.cos(r))

    def gyro_body_radps(self) -> tuple[float, float, float]:
        """Body angular rate, rad/s (flat ground: only z)."""
        with self._lock:
            self._sync()
            return 0.0, 0.0, self.omega_radps

    def _motor_a(self) -> tuple[float, float]:
        share = 1.0 if self.blocked else 0.5        # blocked: no back-EMF, the full stall current
        stall = self.params.stall_a
        return abs(self.duty[0]) * stall * share, abs(self.duty[1]) * stall * share

    def current_a_unlocked(self) -> float:
        return self.params.idle_a + sum(self._motor_a())

    def motor_current_a(self) -> tuple[float, float]:
        """Per-track motor current, A (half the stall current at full duty; all of it when blocked)."""
        with self._lock:
            self._sync()
            return self._motor_a()

    def battery_current_a(self) -> float:
        """Total battery current, A (+ discharging)."""
        with self._lock:
            self._sync()
            return self.current_a_unlocked()

    def battery_voltage_v(self) -> float:
        """Terminal voltage, V: open-circuit voltage from charge minus the IR drop."""
        with self._lock:
            self._sync()
            p = self.params
            soc = self.charge_ah / p.capacity_ah
            ocv = p.cells * (p.cell_empty_v + (p.cell_full_v - p.cell_empty_v) * soc)
            return ocv - p.r_internal_ohm * self.current_a_unlocked()

    def pose(self) -> tuple[float, float, float]:
        """Ground-truth x, y (m) and yaw (rad)."""
        with self._lock:
            self._sync()
            return self.x_m, self.y_m, self.yaw_rad
