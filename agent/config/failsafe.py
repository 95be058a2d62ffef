"""``failsafe`` section: the robot's own failsafes (battery, tilt, stall) and their thresholds.

Each failsafe ends in zero duty and a latch (agent/control/safety.py) that clears only when its
condition has cleared and a fresh motion command arrives; the battery's low level limits the
speed instead. Detectors: agent/control/failsafes.py. Model and defaults: docs/safety.md,
"Failsafes". A failsafe whose device is not configured is off, with one warning
(:func:`agent.control.failsafes.resolve`).

The reference is ArduPilot Rover: its battery failsafe (``BATT_LOW_VOLT``, ``BATT_CRT_VOLT``,
``BATT_LOW_TIMER``, default 10 s: the voltage must stay low that long, against load sag) and its
crash check (``CRASH_ANGLE``; blocked: throttle over 5 % with speed under 0.08 m/s for 2 s), see
https://ardupilot.org/rover/docs/parameters.html and Rover/crash_check.cpp.
"""

from __future__ import annotations

from pydantic import Field, model_validator

from agent.config.base import Section
from drivers.battery import CURVES

#: Per-cell voltage thresholds by chemistry, V: (low, critical, recovery hysteresis). Terminal
#: voltage, averaged and optionally sag-compensated (docs/safety.md gives the sources):
#:
#: - ``lipo``: 3.0 V is the damage floor (Battery University BU-501), 3.27 V empty at rest
#:   (drivers/battery.py's chart); low 3.50, critical 3.30 leave margin under load.
#: - ``liion``: cut-off 3.0 V (BU-501); low 3.40 (~5 % at rest), critical 3.10.
#: - ``lifepo4``: cut-off 2.5 V (manufacturers' data); low 2.90 (~8 %), critical 2.60.
#: - ``lead_acid``: 10.5 V = 1.75 V/cell is empty (Trojan's state-of-charge table); 11.6 V
#:   (1.93 V/cell) is ~20 %; hysteresis 0.05 V/cell (the flatter recovery of a lead cell).
CHEMISTRY_CELL_V: dict[str, tuple[float, float, float]] = {
    "lipo": (3.50, 3.30, 0.10),
    "liion": (3.40, 3.10, 0.10),
    "lifepo4": (2.90, 2.60, 0.10),
    "lead_acid": (1.93, 1.75, 0.05),
}

#: A full cell at rest by chemistry, V (the top of drivers/battery.py's charge curves: lipo and
#: liion 4.20, lifepo4 3.40, lead_acid 2.12). Under the robot's load a full cell reads less, so a
#: threshold at or above it holds on a full battery: low caps the speed for good, critical halts.
FULL_CELL_V: dict[str, float] = {name: curve[-1][0] for name, curve in CURVES.items()}


class BatteryFailsafeConfig(Section):
    """Battery failsafe: low limits the speed, critical stops. Needs ``drivers.power``.

    Attributes:
        enabled: ``false`` turns it off (a JSON boolean: ``"false"`` or ``0`` is refused).
        low_v_per_cell, critical_v_per_cell: thresholds per cell, V; null: the chemistry's
            (:data:`CHEMISTRY_CELL_V`). Critical must be below low.
        low_for_s, critical_for_s: the averaged voltage stays below the threshold this long, s
            (ArduPilot ``BATT_LOW_TIMER``, 10 s).
        average_s: voltage averaged over this window, s, at least 0.5 (one reading of a 2 Hz power
            monitor: a single sagging sample never counts alone).
        sag_ohm: pack resistance for sag compensation, ohm: ``V + I * sag_ohm`` is compared
            (0: off; the INA2xx reports the current).
        hysteresis_v_per_cell: recovery needs threshold + this, V per cell; null: the chemistry's.
        low_speed_mps: speed limit while low, m/s; null: half of ``base.max_speed_mps``.
    """

    enabled: bool = True
    low_v_per_cell: float | None = Field(None, gt=0.5, le=5.0)
    critical_v_per_cell: float | None = Field(None, gt=0.5, le=5.0)
    low_for_s: float = Field(10.0, ge=0.0, le=600.0)
    critical_for_s: float = Field(10.0, ge=0.0, le=600.0)
    average_s: float = Field(2.0, ge=0.5, le=60.0)
    sag_ohm: float = Field(0.0, ge=0.0, le=10.0)
    hysteresis_v_per_cell: float | None = Field(None, ge=0.0, le=1.0)
    low_speed_mps: float | None = Field(None, ge=0.01, le=20.0)

    def cell_volts(self, chemistry: str) -> tuple[float, float, float]:
        """(low, critical, hysteresis) per cell, V: the configured values, else the chemistry's."""
        low, crit, hyst = CHEMISTRY_CELL_V[chemistry]
        return (low if self.low_v_per_cell is None else self.low_v_per_cell,
                crit if self.critical_v_per_cell is None else self.critical_v_per_cell,
                hyst if self.hysteresis_v_per_cell is None else self.hysteresis_v_per_cell)


class TiltFailsafeConfig(Section):
    """Tilt failsafe: pitch or roll (from the IMU's gravity vector) over ``max_deg`` for ``for_s``
    stops. Needs ``drivers.imu``.

    Attributes:
        enabled: ``false`` turns it off (a JSON boolean: ``"false"`` or ``0`` is refused).
        max_deg: pitch or roll limit, degrees (ArduPilot ``CRASH_ANGLE``), 5..85.
        for_s: debounce: over the limit this long, s, at least 0.1 (bumps and braking tilt the
            accelerometer briefly).
        clear_margin_deg: the condition clears below ``max_deg`` minus this, degrees.
    """

    enabled: bool = True
    max_deg: float = Field(40.0, ge=5.0, le=85.0)
    for_s: float = Field(0.3, ge=0.1, le=10.0)
    clear_margin_deg: float = Field(5.0, ge=0.0, le=30.0)

    @model_validator(mode="after")
    def _margin_below_limit(self) -> "TiltFailsafeConfig":
        if self.clear_margin_deg >= self.max_deg:
            raise ValueError(f"clear_margin_deg ({self.clear_margin_deg}) must be below max_deg ({self.max_deg})")
        return self


class StallFailsafeConfig(Section):
    """Stall failsafe: a track commanded over ``duty`` whose encoder speed stays under ``speed_mps``
    for ``for_s``, or a motor current over ``max_current_a`` for ``current_for_s``, stops.
    The speed check needs encoders (``base.counts_per_m`` > 0 and a controller that reports
    speed: RoboClaw, line firmware); the current check a controller that reports current (RoboClaw).

    Attributes:
        enabled: ``false`` turns it off (a JSON boolean: ``"false"`` or ``0`` is refused).
        duty: |duty| above which a track counts as pushing, 0..1 (ArduPilot: 5 % throttle; 30 %
            here, since a tank's tracks may not turn at all at a few percent duty).
        speed_mps: |encoder speed| under which a pushing track counts as stalled, m/s (ArduPilot 0.08).
        for_s: stalled this long, s (ArduPilot 2 s).
        max_current_a: motor current limit per track, A; null: no current check.
        current_for_s: over the current limit this long, s (a start draws a brief peak).
    """

    enabled: bool = True
    duty: float = Field(0.3, ge=0.01, le=1.0)
    speed_mps: float = Field(0.08, ge=0.0, le=5.0)
    for_s: float = Field(2.0, ge=0.1, le=60.0)
    max_current_a: float | None = Field(None, ge=0.1, le=500.0)
    current_for_s: float = Field(0.5, ge=0.0, le=10.0)


class FailsafeConfig(Section):
    """The ``failsafe`` section: ``battery``, ``tilt``, ``stall`` (each on by default)."""

    battery: BatteryFailsafeConfig = Field(default_factory=BatteryFailsafeConfig)
    tilt: TiltFailsafeConfig = Field(default_factory=TiltFailsafeConfig)
    stall: StallFailsafeConfig = Field(default_factory=StallFailsafeConfig)

    @model_validator(mode="after")
    def _critical_below_low(self) -> "FailsafeConfig":
        b = self.battery
        if b.low_v_per_cell is not None and b.critical_v_per_cell is not None \
                and b.critical_v_per_cell >= b.low_v_per_cell:
            raise ValueError(f"battery.critical_v_per_cell ({b.critical_v_per_cell} V) must be below "
                             f"battery.low_v_per_cell ({b.low_v_per_cell} V)")
        return self
