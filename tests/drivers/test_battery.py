"""Battery state of charge from voltage per chemistry and cell count."""

from __future__ import annotations

import typing

import pytest
from hypothesis import given, strategies as st

from agent.config.drivers import BatteryConfig
from drivers.errors import DriverConfigError
from drivers.battery import CURVES, percent


@pytest.mark.parametrize("voltage_v, chemistry, cells, expected", [
    (12.60, "lipo", 3, 100.0),          # 4.20 V/cell
    (11.52, "lipo", 3, 50.0),           # 3.84 V/cell
    (9.81, "lipo", 3, 0.0),             # 3.27 V/cell
    (3.83, "lipo", 1, 47.5),            # halfway between 3.82 (45 %) and 3.84 (50 %)
    (7.58, "liion", 2, 50.0),           # 3.79 V/cell
    (13.2, "lifepo4", 4, 70.0),         # 3.30 V/cell
    (12.10, "lead_acid", 6, 50.0),      # the 12 V table's 50 %
    (25.46, "lead_acid", 12, 100.0),    # 24 V pack, 12.73 V per 6 cells
])
def test_worked_points(voltage_v, chemistry, cells, expected):
    assert percent(voltage_v, chemistry, cells) == pytest.approx(expected, abs=1e-6)


def test_clamped_outside_the_curve():
    assert percent(13.5, "lipo", 3) == 100.0
    assert percent(0.0, "lipo", 3) == 0.0


def test_every_configurable_chemistry_has_a_curve():
    chemistries = set(typing.get_args(BatteryConfig.model_fields["chemistry"].annotation))
    assert chemistries == set(CURVES)


@given(st.sampled_from(sorted(CURVES)), st.integers(1, 24), st.floats(0, 5), st.floats(0, 5))
def test_percent_never_falls_as_voltage_rises(chemistry, cells, a, b):
    lo, hi = sorted((a, b))
    assert 0.0 <= percent(lo * cells, chemistry, cells) <= percent(hi * cells, chemistry, cells) <= 100.0


@pytest.mark.parametrize("chemistry, cells", [("nimh", 3), ("lipo", 0), ("lipo", 2.0), ("lipo", True)])
def test_bad_chemistry_or_cells_is_a_config_error(chemistry, cells):
    with pytest.raises(DriverConfigError):
        percent(12.0, chemistry, cells)


@pytest.mark.parametrize("voltage", [float("nan"), float("inf"), None, "12"])
def test_non_finite_voltage_gives_none_and_is_logged(voltage, caplog):
    assert percent(voltage, "lipo", 3) is None
    assert "not a finite number" in caplog.text
