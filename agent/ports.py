"""The adapter contract: what a protocol adapter may call, and what it must offer.

Three protocol adapters (agent.adapters.artex, .sim2bot, .robotmsg) translate a
wire protocol onto the robot and hold no robot logic. They see the robot only
through :class:`RobotPort` (implemented by agent.control.ControlLoop) and the
cameras only through :class:`VideoPort` (agent.video.VideoHub); the agent
(agent.app) runs each one as an :class:`Adapter`: ``await run()`` until
cancelled, ``status()`` for health reports, one :class:`LinkStatus` shape for all.

Commands an adapter submits may raise :class:`agent.errors.CommandRejected` (bad
input: nothing changed) or :class:`agent.errors.CommandDeclined` (valid, but the
robot will not do it now: stop-latched, unknown camera...); both are
:class:`agent.errors.CommandError`.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from agent.config import AgentConfig
    from agent.commands import Command
    from agent.model import RobotDescription, Snapshot
    from agent.video import EncodedFrame, Frame, FrameFormat

__all__ = ["Adapter", "AdapterFactory", "LinkState", "LinkStatus", "RobotPort", "VideoPort"]


class RobotPort(Protocol):
    """The robot as adapters see it (agent.control.ControlLoop). Thread-safe; never blocks on I/O.

    Attributes:
        description: static description (joints, limits, gripper, geometry, cameras).
    """

    description: RobotDescription

    def submit(self, source: str, command: Command) -> None:
        """Hand a command to the control loop as ``source``.

        Raises:
            agent.errors.CommandRejected: bad input (shape, range, unknown source).
            agent.errors.CommandDeclined: valid, refused now (stop-latched, loop closed).
        """

    def release(self, source: str, reason: str) -> None:
        """``source`` is gone (link dropped): whatever it drove stops now; ``reason`` is logged."""

    def snapshot(self) -> Snapshot:
        """The newest robot state (odometry, tracks, joints, IMU, power, faults)."""

    def samples_since(self, seq: int, limit: int = 256) -> list[Snapshot]:
        """Snapshots newer than ``seq``, oldest first, at most ``limit`` (the newest kept)."""

    def set_limits(self, max_speed_mps: float | None = None, max_accel_mps2: float | None = None) -> None:
        """Lower the speed / acceleration caps at run time (m/s, m/s^2; None: unchanged).

        Raises:
            agent.errors.CommandRejected: not a positive finite number, or above the config.
        """

    def estop(self, by: str, reason: str = "") -> bool:
        """Set the emergency stop (docs/safety.md): tracks to zero at once, every motion command from
        every source refused until released. ``by``: ``console``, ``cli`` or ``input``. True when newly
        set, False when it already held.

        Raises:
            agent.errors.CommandRejected: ``by`` may not set it, or ``reason`` is not a string.
        """

    def release_estop(self, by: str) -> None:
        """Release the emergency stop; moves nothing (motion needs a fresh command).

        Raises:
            agent.errors.CommandRejected: ``by`` may not release it.
            agent.errors.CommandDeclined: no emergency stop is set.
        """


class VideoPort(Protocol):
    """The cameras as adapters see them (agent.video.VideoHub). Awaitables run on the event loop."""

    @property
    def camera_ids(self) -> tuple[str, ...]:
        """Configured camera ids, in config order."""

    async def next_frame(self, camera_id: str, after_seq: int, timeout_s: float) -> Frame | None:
        """The first frame newer than ``after_seq``, or None after ``timeout_s`` s.

        Raises:
            agent.errors.CommandDeclined: unknown camera id.
        """

    async def next_encoded(self, camera_id: str, fmt: FrameFormat, after_seq: int,
                           timeout_s: float) -> EncodedFrame | None:
        """Like :meth:`next_frame`, encoded as ``fmt`` (one encode per frame and format)."""

    async def encoded_within(self, frame: Frame, fmt: FrameFormat, max_bytes: int,
                             level: int = 0) -> tuple[EncodedFrame | None, int]:
        """``frame`` encoded at most ``max_bytes`` long: ``fmt``, else at a lower quality, else smaller
        (:func:`agent.video.budget.fit_ladder`, from step ``level``). Returns ``(encoded, step)``, or
        ``(None, steps)`` when even the smallest does not fit."""


class LinkState(str, enum.Enum):
    """Where a link is: ``up`` (connected), ``connecting`` (first attempt), ``down`` (failing, retrying)."""

    UP = "up"
    CONNECTING = "connecting"
    DOWN = "down"


@dataclass(frozen=True, slots=True)
class LinkStatus(Mapping[str, Any]):
    """One adapter's health, the same shape for every adapter.

    Also a read-only mapping over :meth:`as_dict` (fields, then counters, then detail, flat), so a
    health report can show it as one JSON object.

    Attributes:
        name: the adapter (= command source): ``artex``, ``sim2bot``, ``robot_msg``.
        state: :class:`LinkState`.
        connected: the link is up now.
        since: monotonic time of the last change of ``state``, s.
        last_error: ``"Type: message"`` of the newest link failure, "" before any.
        counters: message counts (received, accepted, rejected, sent...), monotonic non-decreasing.
        detail: protocol specifics (url, sid, room, endpoints, per-reason counts...).
    """

    name: str
    state: LinkState
    connected: bool
    since: float
    last_error: str = ""
    counters: Mapping[str, int] = field(default_factory=dict)
    detail: Mapping[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """Flat dict: ``name``, ``state`` (its value), ``connected``, ``since``, ``last_error``,
        every counter and every detail key."""
        return {"name": self.name, "state": self.state.value, "connected": self.connected, "since": self.since,
                "last_error": self.last_error, **self.counters, **self.detail}

    def __getitem__(self, key: str) -> Any:
        return self.as_dict()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.as_dict())

    def __len__(self) -> int:
        return len(self.as_dict())


@runtime_checkable
class Adapter(Protocol):
    """A protocol adapter as the agent runs it."""

    async def run(self) -> None:
        """Connect, serve, reconnect forever; ends only by cancellation (then releases its source)."""

    def status(self) -> LinkStatus:
        """Health view (thread-safe reads)."""

    def warnings(self) -> list[str]:
        """Trouble an operator should read, one sentence each (the console shows every adapter's); [] when none."""


class AdapterFactory(Protocol):
    """An adapter class: ``Factory(cfg, robot, video, config_path=...)`` (ARTEX also takes ``logs``)."""

    def __call__(self, cfg: AgentConfig, robot: RobotPort, video: VideoPort | None, *,
                 config_path: str | None = None) -> Adapter: ...
