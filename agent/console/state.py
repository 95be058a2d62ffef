"""Snapshot -> the console page's ``state`` message (pure, no I/O).

One JSON object per send, SI units, keys named for what they hold; the page
draws the battery and speed plots from the stream of these.
"""

from __future__ import annotations

import math
from typing import Any

from agent.control.safety import describe_halt
from agent.model import SafetyState, Snapshot


def _num(value: float | None, digits: int = 4) -> float | None:
    """Rounded finite float, or None (JSON has no NaN)."""
    if value is None or not math.isfinite(value):
        return None
    return round(float(value), digits)


def safety_message(safety: SafetyState) -> dict[str, Any]:
    """``Snapshot.safety`` for the page: ``halts`` [{``kind``, ``by``, ``reason``, ``since_unix_s``,
    ``cleared``, ``text`` (one line: what, who, since when, why)}], ``speed_cap_mps`` (m/s or None),
    ``speed_cap_reason``."""
    return {"halts": [{"kind": h.kind, "by": h.by, "reason": h.reason[:300], "since_unix_s": _num(h.since_unix_s, 3),
                       "cleared": h.cleared, "text": describe_halt(h)[:400]} for h in safety.halts],
            "speed_cap_mps": _num(safety.speed_cap_mps, 3), "speed_cap_reason": safety.speed_cap_reason[:300]}


def state_message(snap: Snapshot, counters: dict[str, int]) -> dict[str, Any]:
    """The ``state`` message for one snapshot.

    Keys: ``seq``, ``t`` (Unix s), ``battery`` ({``voltage_v``, ``current_a``, ``percent``} or None),
    ``speed`` ({``vx_mps``, ``omega_radps``}), ``odom`` ({``x_m``, ``y_m``, ``yaw_rad``,
    ``distance_m``}), ``tracks`` ({``left_mps``, ``right_mps``}), ``source`` (active source or ""),
    ``watchdog``, ``stopped``, ``faults`` [str], ``devices`` [{``name``, ``state``, ``errors``,
    ``last_error``}], ``safety`` (:func:`safety_message`), ``console`` (this console's counters).
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
        "tracks": {"left_mps": _num(snap.tracks.left_mps), "right_mps": _num(snap.tracks.right_mps)},
        "source": snap.active_source,
        "watchdog": snap.watchdog,
        "stopped": snap.stopped,
        "faults": list(snap.faults),
        "devices": [{"name": d.name, "state": d.state, "errors": d.errors, "last_error": d.last_error[:200]}
                    for d in snap.devices],
        "safety": safety_message(snap.safety),
        "console": dict(counters),
    }
