"""Snapshot -> ARTEX ``telem`` payload, and the "did it change" test with deadbands (pure).

The ARTEX hub gets the whole telemetry dict, only when something changed since
the last send (ARTEX protocol page, "telem"). The SDK keys come first with their
SDK meaning: ``battery`` (V), ``speed`` (forward speed, m/s), ``imu``
(``[ax, ay, az]`` specific force, m/s^2, body frame x forward, y left, z up).
The agent's own keys carry their units in their names; docs/artex.md lists them.

Sensors are noisy (a real MPU-6050 at rest wanders by a few 0.01 m/s^2), so "changed" is not float equality: every numeric value is
rounded (volts, amps and m/s^2 to 2 decimals, percent to 0, the rest to 3) and counts as changed only when it moved by at least
its key's deadband (:data:`DEADBANDS`) from the value last *sent*. Noise below
the deadband never triggers a send, a real change of one deadband always does,
and a slow drift is reported once it has added up to a deadband. So that the
hub ends up with the true resting values (speed 0.0, not the 0.003 last sent
while the tracks were coasting down), a key that differs from what was sent
but has kept exactly the same value for :data:`SETTLE_POLLS` polls is sent too
(:class:`TelemGate`); a noisy value never stays exactly the same that long.
"""

from __future__ import annotations

import math
from typing import Any

from agent.model import Snapshot

#: Polls a changed-but-within-deadband value must stay exactly the same before it is sent anyway.
SETTLE_POLLS = 10

__all__ = ["DEADBANDS", "SETTLE_POLLS", "TelemBuilder", "TelemGate", "changed", "telemetry"]

#: Smallest change per top-level key that makes the dict "changed" (numbers; default: any change).
DEADBANDS: dict[str, float] = {
    "battery": 0.05,        # V; INA219 bus LSB is 4 mV, load ripple is tens of mV
    "battery_a": 0.05,      # A
    "battery_pct": 2.0,     # %; a 1 % step flips with voltage noise at a step boundary
    "speed": 0.005,         # m/s
    "imu": 0.2,             # m/s^2; MPU-6050 400 ug/sqrt(Hz) at 44 Hz DLPF: ~0.035 m/s^2 rms, 0.2 is ~4 sigma
                            # of the difference of two samples (about 1.2 deg of tilt)
    "gyro_radps": 0.02,     # rad/s; ~0.005 rad/s rms
    "odom": 0.005,          # m, rad, m/s, rad/s
    "tracks": 0.005,        # m/s, duty; counts change by whole counts
    "joints": 0.005,        # rad
    "gripper": 0.005,       # 0..1
}


def _r(value: float | None, decimals: int) -> float | None:
    """Rounded, JSON-safe number: None stays None, NaN/inf become None (JSON has neither)."""
    if value is None or not math.isfinite(value):
        return None
    out = round(float(value), decimals)
    return out + 0.0  # -0.0 -> 0.0, so a sign flip of zero is no change


def _rs(values: Any, decimals: int) -> list[float | None]:
    return [_r(v, decimals) for v in values]


def telemetry(snap: Snapshot) -> dict[str, Any]:
    """The ARTEX telemetry dict for one control-tick snapshot.

    Args:
        snap: the newest :class:`agent.model.Snapshot`.

    Returns:
        ``battery`` V, ``battery_a`` A, ``battery_pct`` %, ``speed`` m/s, ``imu`` [m/s^2 x3],
        ``gyro_radps`` [rad/s x3], ``odom`` {x_m, y_m, yaw_rad, vx_mps, omega_radps, distance_m},
        ``tracks`` {left_mps, right_mps, cmd_left_mps, cmd_right_mps, duty_left, duty_right,
        left_counts, right_counts}, ``joints`` {name: rad}, ``gripper`` 0..1, ``source`` (active
        command source or ""), ``watchdog`` (idle/ok/expired), ``stopped``, ``overridden``
        {source: count}, ``faults`` [str], ``devices`` {name: ok/degraded/lost}; the halts
        (docs/safety.md): ``estop`` (bool), ``halted`` (bool), ``halt`` (str, "" when none),
        ``halts`` [{kind, reason, by, since_unix_s, since, cleared}], ``speed_cap_mps`` (m/s or
        None), ``speed_cap_reason`` (str). Unknown values
        (no IMU, no power monitor, non-finite) are None. No timestamps: the dict only changes
        when the robot does.
    """
    power, imu, o, t = snap.power, snap.imu, snap.odom, snap.tracks
    d3 = 3
    return {
        "battery": _r(power.voltage_v, 2) if power else None,
        "speed": _r(o.vx_mps, d3),
        "imu": _rs(imu.accel_mps2, 2) if imu else None,
        "battery_a": _r(power.current_a, 2) if power else None,
        "battery_pct": _r(power.percent, 0) if power else None,
        "gyro_radps": _rs(imu.gyro_radps, d3) if imu else None,
        "odom": {
            "x_m": _r(o.x_m, d3), "y_m": _r(o.y_m, d3), "yaw_rad": _r(o.yaw_rad, d3),
            "vx_mps": _r(o.vx_mps, d3), "omega_radps": _r(o.omega_radps, d3),
            "distance_m": _r(o.distance_m, d3),
        },
        "tracks": {
            "left_mps": _r(t.left_mps, d3), "right_mps": _r(t.right_mps, d3),
            "cmd_left_mps": _r(t.cmd_left_mps, d3), "cmd_right_mps": _r(t.cmd_right_mps, d3),
            "duty_left": _r(t.duty_left, d3), "duty_right": _r(t.duty_right, d3),
            "left_counts": int(t.left_counts), "right_counts": int(t.right_counts),
        },
        "joints": dict(zip(snap.joints.names, _rs(snap.joints.q, d3))),
        "gripper": _r(snap.gripper, d3),
        "source": snap.active_source,
        "watchdog": snap.watchdog,
        "stopped": snap.stopped,
        "overridden": {src: int(n) for src, n in snap.overridden},
        "faults": list(snap.faults),
        "devices": {dev.name: dev.state for dev in snap.devices},
        **snap.safety.as_dict(),
    }


def _rounded(values: tuple, decimals: int) -> list[float | None]:
    """``[_r(v, decimals) for v in values]`` (the same values), one conversion pass when all are finite."""
    try:
        numbers = tuple(map(float, values))
    except TypeError:                   # a None among them
        return _rs(values, decimals)
    if math.isfinite(sum(numbers)):
        return [round(v, decimals) + 0.0 for v in numbers]
    return _rs(values, decimals)


class TelemBuilder:
    """:func:`telemetry` for a stream of snapshots, equal dicts for less CPU: the parts read from an object
    the control loop hands on unchanged from tick to tick (the power and IMU readings, the joints, the
    safety state: agent/control/tick.py, ``observe``) are rounded once and reused while the object is the
    same one (identity, never equality: the values it holds are what the parts were made from); the
    devices, overrides and faults while equal (strings and whole numbers); the odometry and tracks in one
    conversion pass. The dicts and lists reused are never changed (nobody writes to a telemetry dict)."""

    def __init__(self) -> None:
        self._power: Any = self
        self._power_part: tuple = ()
        self._imu: Any = self
        self._imu_part: tuple = ()
        self._joints: Any = self
        self._joints_part: dict[str, float | None] = {}
        self._safety: Any = self
        self._safety_part: dict[str, Any] = {}
        self._rest: tuple = ()
        self._rest_part: tuple = ()

    def telemetry(self, snap: Snapshot) -> dict[str, Any]:
        """``telemetry(snap)``: an equal dict (the same keys in the same order, the same values and types)."""
        power, imu, o, t = snap.power, snap.imu, snap.odom, snap.tracks
        if power is not self._power:
            self._power = power
            self._power_part = ((_r(power.voltage_v, 2), _r(power.current_a, 2), _r(power.percent, 0))
                                if power else (None, None, None))
        if imu is not self._imu:
            self._imu = imu
            self._imu_part = (_rounded(imu.accel_mps2, 2), _rounded(imu.gyro_radps, 3)) if imu else (None, None)
        if snap.joints is not self._joints:
            self._joints = j = snap.joints
            self._joints_part = dict(zip(j.names, _rounded(j.q, 3)))
        if snap.safety is not self._safety:
            self._safety = snap.safety
            self._safety_part = snap.safety.as_dict()
        rest = (snap.overridden, snap.faults, snap.devices)
        if rest != self._rest:
            self._rest = rest
            self._rest_part = ({src: int(n) for src, n in snap.overridden}, list(snap.faults),
                               {dev.name: dev.state for dev in snap.devices})
        x, y, yaw, vx, omega, dist, left, right, cl, cr, dl, dr = _rounded(
            (o.x_m, o.y_m, o.yaw_rad, o.vx_mps, o.omega_radps, o.distance_m, t.left_mps, t.right_mps,
             t.cmd_left_mps, t.cmd_right_mps, t.duty_left, t.duty_right), 3)
        battery, battery_a, battery_pct = self._power_part
        overridden, faults, devices = self._rest_part
        return {
            "battery": battery, "speed": vx, "imu": self._imu_part[0], "battery_a": battery_a,
            "battery_pct": battery_pct, "gyro_radps": self._imu_part[1],
            "odom": {"x_m": x, "y_m": y, "yaw_rad": yaw, "vx_mps": vx, "omega_radps": omega, "distance_m": dist},
            "tracks": {"left_mps": left, "right_mps": right, "cmd_left_mps": cl, "cmd_right_mps": cr,
                       "duty_left": dl, "duty_right": dr,
                       "left_counts": int(t.left_counts), "right_counts": int(t.right_counts)},
            "joints": self._joints_part, "gripper": _r(snap.gripper, 3), "source": snap.active_source,
            "watchdog": snap.watchdog, "stopped": snap.stopped, "overridden": overridden, "faults": faults,
            "devices": devices, **self._safety_part,
        }


def _differs(new: Any, old: Any, deadband: float) -> bool:
    if isinstance(new, dict):
        return (not isinstance(old, dict) or new.keys() != old.keys()
                or any(_differs(v, old[k], deadband) for k, v in new.items()))
    if isinstance(new, list):
        return (not isinstance(old, list) or len(new) != len(old)
                or any(_differs(a, b, deadband) for a, b in zip(new, old)))
    numbers = (int, float)
    if (isinstance(new, numbers) and isinstance(old, numbers)
            and not isinstance(new, bool) and not isinstance(old, bool)):
        return abs(new - old) + 1e-9 >= deadband if deadband > 0 else new != old  # 1e-9: rounded floats
    return new != old or type(new) is not type(old)


def changed(new: dict[str, Any], sent: dict[str, Any] | None) -> bool:
    """True when ``new`` differs from the last sent dict by more than the deadbands.

    Args:
        new: a :func:`telemetry` dict. sent: the dict last sent, or None (nothing sent yet).

    Returns:
        True if anything non-numeric changed, a key appeared or vanished, or a number moved
        by at least its top-level key's :data:`DEADBANDS` entry (any change for other keys).
    """
    if sent is None or new.keys() != sent.keys():
        return True
    for k, v in new.items():
        old = sent[k]
        # equal values: no change (one C-level comparison; telemetry() gives each key, nested ones too,
        # one type of value, so an equal value never hides a bool turned number)
        if v != old or type(v) is not type(old):
            if _differs(v, old, DEADBANDS.get(k, 0.0)):
                return True
    return False


class TelemGate:
    """When to send: :func:`changed` against the last sent dict, plus settled values.

    Args:
        settle_polls: consecutive identical polls after which a top-level value that
            differs from the sent one is sent even within its deadband.
    """

    def __init__(self, settle_polls: int = SETTLE_POLLS) -> None:
        self.settle_polls = settle_polls
        self.sent: dict[str, Any] | None = None
        self._last: dict[str, Any] | None = None
        self._steady: dict[str, int] = {}
        self._pending = False       # the last poll was due and nothing was marked sent since

    def due(self, new: dict[str, Any]) -> bool:
        """Feed one poll's dict; True when it should be sent (then call :meth:`mark_sent`)."""
        last, steady = self._last, self._steady
        if last is not None and new == last:        # at rest: every value as at the last poll
            self._steady = {k: steady.get(k, 0) + 1 for k in new}
        else:
            last = last or {}
            self._steady = {k: steady.get(k, 0) + 1 if k in last and last[k] == v else 0 for k, v in new.items()}
        self._last = new
        self._pending = due = self._due(new)
        return due

    def _due(self, new: dict[str, Any]) -> bool:
        sent = self.sent
        if sent is not None and new == sent and all(type(v) is type(sent[k]) for k, v in new.items()):
            return False        # what was sent: neither changed nor a settled value to send
        if changed(new, sent):
            return True
        assert sent is not None
        return any(self._steady[k] >= self.settle_polls and v != sent[k] for k, v in new.items())

    def quiet_polls(self) -> int | None:
        """How many more polls of the last dict would all answer False (None: any number): 0 when the last
        poll was due and not sent, else until a value that differs from the sent one settles."""
        last, sent = self._last, self.sent
        if self._pending or last is None or sent is None:
            return 0
        left = [self.settle_polls - self._steady[k] - 1 for k, v in last.items() if v != sent[k]]
        return max(0, min(left)) if left else None

    def skip(self, polls: int) -> None:
        """``polls`` polls of the last dict were skipped (each would have answered False: at most
        :meth:`quiet_polls`): counted as polls, so a value settles after as many polls as if they were made."""
        if polls > 0:
            self._steady = {k: n + polls for k, n in self._steady.items()}

    def mark_sent(self, data: dict[str, Any]) -> None:
        """``data`` went out: the reference for the next comparisons."""
        self.sent = data
        self._pending = False
