"""``watchdog``, ``control`` and ``base`` sections: the control loop and the safety path."""

from __future__ import annotations

from pydantic import Field, field_validator, model_validator

from agent.config.base import Section

#: Command sources the agent knows, one per protocol adapter plus the operator console.
SOURCES = ("artex", "sim2bot", "robot_msg", "console")
#: The console's priority when ``control.sources`` does not name it: a human at the
#: console overrides every protocol source (autonomous robot_msg included).
CONSOLE_PRIORITY = 40


class WatchdogConfig(Section):
    """Velocity watchdog (docs/safety.md; README.md, "Safety model").

    Attributes:
        velocity_timeout_s: a velocity command older than this stops the tracks and holds the joints, s.
            Never disabled: 0.02..5.0.
    """

    velocity_timeout_s: float = Field(0.5, gt=0.02, le=5.0)


class SourceConfig(Section):
    """Arbitration entry for one command source (twist_mux style).

    Attributes:
        priority: higher wins while its command is fresh.
        timeout_s: per-source velocity timeout, s; defaults to ``watchdog.velocity_timeout_s``.
    """

    priority: int = Field(0, ge=0, le=1000)
    timeout_s: float | None = Field(None, gt=0.02, le=5.0)


class ControlConfig(Section):
    """Control loop.

    Attributes:
        rate_hz: fixed loop rate, Hz (20..500).
        sources: per-source priority and timeout.
    """

    rate_hz: float = Field(50.0, ge=20.0, le=500.0)
    sources: dict[str, SourceConfig] = Field(default_factory=lambda: {
        "artex": SourceConfig(priority=10),
        "sim2bot": SourceConfig(priority=20),
        "robot_msg": SourceConfig(priority=30),
        "console": SourceConfig(priority=CONSOLE_PRIORITY),
    })

    @field_validator("sources", mode="before")
    @classmethod
    def _console_default(cls, value: object) -> object:
        """A ``sources`` table written before the console existed still gets the console's default."""
        if isinstance(value, dict) and "console" not in value:
            return {**value, "console": {"priority": CONSOLE_PRIORITY}}
        return value

    @model_validator(mode="after")
    def _known_sources(self) -> "ControlConfig":
        for name in self.sources:
            if name not in SOURCES:
                raise ValueError(f"unknown command source {name!r}; known: {', '.join(SOURCES)}")
        return self


class BaseConfig(Section):
    """Tracked base geometry and limits.

    Attributes:
        track_width_m: distance between track centrelines, m.
        max_speed_mps: track speed at full duty, m/s; commands are clamped to it.
        max_accel_mps2: track acceleration limit, m/s^2.
        counts_per_m: encoder counts per metre of track travel (0 = no encoders: odometry from commands).
    """

    track_width_m: float = Field(0.30, gt=0.01, le=5.0)
    max_speed_mps: float = Field(1.0, ge=0.01, le=20.0)
    max_accel_mps2: float = Field(2.0, ge=0.01, le=100.0)
    counts_per_m: float = Field(4000.0, ge=0.0, le=1e7)


def priority_warnings(control: ControlConfig) -> list[str]:
    """One sentence per protocol source whose priority is at or above the console's (check-config warns:
    it may be deliberate, but then a protocol overrides the operator at the console, docs/safety.md)."""
    console = control.sources["console"].priority
    return [f"control.sources.{name}.priority {cfg.priority} is at or above the console's ({console}): "
            f"{name} {'overrides' if cfg.priority > console else 'ties with'} the operator at the console; "
            "the console normally has the highest priority"
            for name, cfg in control.sources.items() if name != "console" and cfg.priority >= console]

