"""The implementers of agent/ports.py, assigned to the Protocols they implement: mypy checks each
assignment (tests/test_ports_typed.py). Never imported at run time: every line is under
``TYPE_CHECKING``, the objects are parameters (nothing is built)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agent.adapters.artex import ArtexAdapter
    from agent.adapters.robotmsg import RobotMsgAdapter
    from agent.adapters.sim2bot import Sim2botAdapter
    from agent.console.server import Console
    from agent.control.loop import ControlLoop
    from agent.ports import Adapter, AdapterFactory, RobotPort, VideoPort
    from agent.video.hub import VideoHub
    from agent.video.late import LateVideo

    def conformance(loop: ControlLoop, hub: VideoHub, artex: ArtexAdapter, sim2bot: Sim2botAdapter,
                    robot_msg: RobotMsgAdapter, console: Console, late: LateVideo) -> None:
        robot: RobotPort = loop
        video: VideoPort = hub
        late_video: VideoPort = late
        adapters: list[Adapter] = [artex, sim2bot, robot_msg, console]
        factories: list[AdapterFactory] = [ArtexAdapter, Sim2botAdapter, RobotMsgAdapter]
        del robot, video, late_video, adapters, factories
