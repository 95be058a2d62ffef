"""Snapshot -> the console page's ``state`` message (pure, no I/O).

One JSON object per send, SI units, keys named for what they hold; the page
draws the battery and speed plots from the stream of these.
"""

from __future__ import annotations

import math
from typing import Any

from agent.model import Snapshot


def _num(value: float | None, digits: int = 4) -> float | None:
    """Rounded finite float, or None (JSON has no NaN)."""
    if value is None or not math.isfinite(value):
        return None
    return round(float(value), digits)


def state_message(snap: Snapshot, counters: dict[str, int], warnings: list[str] | tuple[str, ...] = ()) -> dict[str, Any]:
    """The ``state`` message for one snapshot.

    Keys: ``seq``, ``t`` (Unix s), ``battery`` ({``voltage_v``, ``current_a``, ``percent``} or None),
    ``speed`` ({``vx_mps``, ``omega_radps``}), ``odom`` ({``x_m``, ``y_m``, ``yaw_rad``,
    ``distance_m``}), ``tracks`` ({``left_mps``, ``right_mps``: measured track speeds, m/s; ``duty_left``,
    ``duty_right``: the duty sent to the motor controller, -1..1}), ``source`` (active source or ""),
    ``watchdog``, ``stopped``, ``faults`` [str], ``devices`` [{``name``, ``state``, ``errors``,
    ``last_error``}], ``console`` (this console's counters), ``safety`` (the halts and the speed cap,
    docs/safety.md: {``estop`` bool, ``halted`` bool, ``halt`` one line or "", ``halts`` [{``kind``,
    ``reason``, ``by``, ``since_unix_s``, ``since``, ``cleared``}], ``speed_cap_mps``, ``speed_cap_reason``}),
    ``warnings`` [str]: the links' trouble in one sentence each (a second simulator in the Sim2Bot room).
    """
    odom, power = snap.odom, snap.power
    battery = None if power is None else {"voltage_v": _num(power.voltage_v, 3),
                                          "current_a": _num(power.current_a, 3),
                                          "percent": _num(power.percent, 1)}
    return {
        "type": "state",
        "seq": snap.seq,
        "t": _num(snap.t_unix_s, 3),
        "battery": battery,
        "speed": {"vx_mps": _num(odom.vx_mps), "omega_radps": _num(odom.omega_radps)},
        "odom": {"x_m": _num(odom.x_m), "y_m": _num(odom.y_m), "yaw_rad": _num(odom.yaw_rad),
                 "distance_m": _num(odom.distance_m)},
        "tracks": {"left_mps": _num(snap.tracks.left_mps), "right_mps": _num(snap.tracks.right_mps),
                   "duty_left": _num(snap.tracks.duty_left), "duty_right": _num(snap.tracks.duty_right)},
        "source": snap.active_source,
        "watchdog": snap.watchdog,
        "stopped": snap.stopped,
        "faults": list(snap.faults),
        "devices": [{"name": d.name, "state": d.state, "errors": d.errors, "last_error": d.last_error[:200]}
                    for d in snap.devices],
        "console": dict(counters),
        "safety": snap.safety.as_dict(),
        "warnings": [w[:400] for w in warnings],
    }
