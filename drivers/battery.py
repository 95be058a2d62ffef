"""Battery state of charge from voltage: piecewise-linear open-circuit curves per cell.

Each chemistry's curve maps the resting (open-circuit) voltage of one cell to
a state of charge, 0..100 %; a pack of ``cells`` in series is divided by the
cell count, then interpolated linearly (``numpy.interp``) and clamped to
0..100 outside the curve.

Sources (approximate, rested cells at room temperature):

- ``lipo``: the AMPOW "LiPo voltage chart" (blog.ampow.com/lipo-voltage-chart/):
  4.20 V = 100 % ... 3.27 V = 0 % per cell.
- ``liion`` (NMC/NCA cylindrical cells, e.g. 18650): commonly published
  resting-voltage tables, 4.20 V = 100 %, 3.00 V = 0 %
  (cf. Battery University BU-808 / BU-1003a discharge curves).
- ``lifepo4``: the widely published 12.8 V (4-cell) LiFePO4 resting-voltage
  chart divided by 4: 3.40 V = 100 %, 2.50 V = 0 %; the curve is very flat
  between 20 and 90 %, so voltage alone says little there.
- ``lead_acid``: the 12 V open-circuit table used by battery makers (e.g.
  Trojan Battery's state-of-charge table: 12.73 V = 100 %, 12.10 V = 50 %,
  11.51 V = 10 %) divided by 6 cells, with 10.5 V (1.75 V/cell) = 0 %.

Limits: the power monitor measures the terminal voltage under load, which
sags by ``I * R_internal``; the percentage therefore reads low while the
tracks draw current and recovers at rest.
"""

from __future__ import annotations

import logging
import math

import bisect

from drivers.errors import DriverConfigError

log = logging.getLogger(__name__)

#: chemistry -> ((volts per cell, percent), ...), ascending.
CURVES: dict[str, tuple[tuple[float, float], ...]] = {
    "lipo": ((3.27, 0), (3.61, 5), (3.69, 10), (3.71, 15), (3.73, 20), (3.75, 25), (3.77, 30), (3.79, 35),
             (3.80, 40), (3.82, 45), (3.84, 50), (3.85, 55), (3.87, 60), (3.91, 65), (3.95, 70), (3.98, 75),
             (4.02, 80), (4.08, 85), (4.11, 90), (4.15, 95), (4.20, 100)),
    "liion": ((3.00, 0), (3.45, 5), (3.55, 10), (3.65, 20), (3.70, 30), (3.74, 40), (3.79, 50), (3.85, 60),
              (3.92, 70), (4.00, 80), (4.10, 90), (4.20, 100)),
    "lifepo4": ((2.50, 0), (3.00, 10), (3.20, 17), (3.225, 20), (3.25, 30), (3.275, 40), (3.30, 70),
                (3.325, 90), (3.35, 99), (3.40, 100)),
    "lead_acid": tuple((v / 6, p) for v, p in (
        (10.50, 0), (11.51, 10), (11.66, 20), (11.81, 30), (11.96, 40), (12.10, 50), (12.24, 60),
        (12.37, 70), (12.50, 80), (12.62, 90), (12.73, 100))),
}
_TABLES = {name: (tuple(v for v, _ in c), tuple(float(p) for _, p in c)) for name, c in CURVES.items()}


def _interp(x: float, xs: tuple[float, ...], ys: tuple[float, ...]) -> float:
    """Piecewise-linear ``ys(x)`` through the points, clamped to the end values (as ``numpy.interp``)."""
    if x <= xs[0]:
        return ys[0]
    if x >= xs[-1]:
        return ys[-1]
    i = bisect.bisect_right(xs, x)
    x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
    return y0 + (y1 - y0) * (x - x0) / (x1 - x0)


def percent(voltage_v: float, chemistry: str, cells: int) -> float | None:
    """State of charge, 0..100 %, of a ``cells``-in-series pack at ``voltage_v``.

    Args:
        voltage_v: pack voltage, V.
        chemistry: ``lipo`` | ``liion`` | ``lifepo4`` | ``lead_acid``.
        cells: cells in series, >= 1.

    Returns:
        Percent, clamped to 0..100; None (logged) when ``voltage_v`` is not a finite number.

    Raises:
        DriverConfigError: unknown chemistry or a cell count below 1.
    """
    table = _TABLES.get(chemistry)
    if table is None:
        raise DriverConfigError(f"battery chemistry {chemistry!r} unknown; known: {', '.join(CURVES)}")
    if isinstance(cells, bool) or not isinstance(cells, int) or cells < 1:
        raise DriverConfigError(f"battery cells must be an integer >= 1, got {cells!r}")
    if isinstance(voltage_v, bool) or not isinstance(voltage_v, (int, float)) or not math.isfinite(voltage_v):
        log.error("battery percent: voltage %r is not a finite number", voltage_v)
        return None
    volts, pct = table
    return _interp(voltage_v / cells, volts, pct)
