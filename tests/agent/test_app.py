"""agent.app.Agent: wiring and the lifecycle of its adapters on the simulated tank."""

from __future__ import annotations

import asyncio
import logging

from agent.commands import BaseVelocity
from agent.testing.ports import free_port
from agent.testing.running_agent import running_agent, sim_config, wait_for


async def test_an_adapter_that_dies_is_logged_released_and_restarted_forever(caplog, monkeypatch):
    """No adapter stops for good: a run() that raises or returns is logged, its source released at once
    (what it drove stops) and it is started again after the backoff, every time."""
    import agent.app

    monkeypatch.setattr(agent.app, "RESTART_FIRST_S", 0.05)
    monkeypatch.setattr(agent.app, "RESTART_MAX_S", 0.1)
    cfg = sim_config(server="http://127.0.0.1", port=free_port(),
                     artex={"reconnect_delay_s": 0.05, "reconnect_delay_max_s": 0.1},
                     control={"sources": {"artex": {"priority": 10, "timeout_s": 5.0}}})
    cfg["drivers"]["cameras"] = []
    async with running_agent(cfg) as agent:
        adapter = agent.adapters["artex"]
        real_run, calls = adapter.run, []

        async def failing_run() -> None:                          # fault injection: the adapter's run itself
            calls.append(1)
            if len(calls) == 1:
                raise RuntimeError("injected adapter bug")
            if len(calls) == 2:
                return                                            # ends without an error: a bug too
            await real_run()

        agent.control.submit("artex", BaseVelocity(0.5, 0.0))   # 5 s timeout: only the release stops it sooner
        assert await wait_for(lambda: agent.physics.duty[0] > 0.0, 5)
        adapter.run = failing_run
        with caplog.at_level(logging.ERROR, logger="agent.app"):
            for task in agent._tasks:                             # restart the supervisor on the patched run
                task.cancel()
            agent._tasks = [asyncio.create_task(agent._supervise("artex", adapter), name="adapter-artex")]
            assert await wait_for(lambda: len(calls) >= 3, 5), calls
        assert "adapter artex stopped unexpectedly (RuntimeError: injected adapter bug)" in caplog.text
        assert agent.restarts["artex"] == 2
        assert await wait_for(lambda: agent.physics.duty == [0.0, 0.0], 2), "the dead adapter's command kept driving"
        assert agent.control.snapshot().active_source == ""
        assert not agent._tasks[0].done()                         # the third run retries the dead hub forever


async def test_close_does_not_wait_forever_for_a_stuck_adapter(caplog, monkeypatch):
    """Shutdown stops the motors even when an adapter ignores its cancellation (stuck in a peer library)."""
    import asyncio

    import agent.app

    monkeypatch.setattr(agent.app, "ADAPTER_STOP_S", 0.5)
    cfg = sim_config()
    cfg["drivers"]["cameras"] = []
    released, let_go = asyncio.Event(), asyncio.Event()

    async def stuck() -> None:
        try:
            await asyncio.sleep(60)  # no wall time: cancelled by close()
        except asyncio.CancelledError:
            await let_go.wait()  # ignores the cancellation until the test lets it go, after close()
            released.set()

    loop = asyncio.get_running_loop()
    async with running_agent(cfg) as agent:
        agent._tasks.append(asyncio.create_task(stuck(), name="adapter-stuck"))
        agent.control.submit("sim2bot", BaseVelocity(0.5, 0.0))
        assert await wait_for(lambda: agent.physics.duty[0] > 0.0, 5)
        with caplog.at_level(logging.ERROR, logger="agent.app"):
            started = loop.time()
            await agent.close()
            took = loop.time() - started
    assert took < 1.9, f"close() waited {took:.1f} s for the stuck adapter"
    assert agent.physics.duty == [0.0, 0.0]
    assert "adapter-stuck did not stop" in caplog.text
    let_go.set()
    await asyncio.wait_for(released.wait(), 5)


async def test_every_adapter_meets_the_contract_and_reports_one_status_shape():
    """agent.ports: each adapter is an Adapter and its status() is a LinkStatus (built, not started)."""
    from agent.app import Agent
    from agent.config import AgentConfig
    from agent.ports import Adapter, LinkState, LinkStatus

    port = free_port()
    cfg = sim_config(server="http://127.0.0.1", port=port,
                     sim2bot={"enabled": True, "url": f"ws://127.0.0.1:{port}/ws"},
                     robot_msg={"enabled": True}, console={"enabled": True, "port": port})
    agent = Agent(AgentConfig.model_validate(cfg))
    try:
        agent._build_adapters()
        assert set(agent.adapters) == {"artex", "sim2bot", "robot_msg", "console"}
        for name, adapter in agent.adapters.items():
            assert isinstance(adapter, Adapter), name
            status = adapter.status()
            assert isinstance(status, LinkStatus) and status.name == name
            assert (status.state, status.connected, status.last_error) == (LinkState.CONNECTING, False, "")
            assert all(isinstance(v, int) for v in status.counters.values()), name
            assert status["connected"] is False and dict(status)["name"] == name
    finally:
        await agent.close()


async def test_close_stops_tracks_and_a_running_trajectory_before_any_adapter_closes():
    """SIGTERM path (Agent.close): the zero duty and the halted trajectory come first; an adapter that
    is still closing sees the motors already stopped."""
    from agent.commands import JointTrajectory, TrajectoryPoint

    cfg = sim_config(control={"sources": {"sim2bot": {"priority": 20, "timeout_s": 5.0}}})
    cfg["drivers"]["cameras"] = []
    seen: dict[str, object] = {}
    async with running_agent(cfg) as agent:
        pulses = agent.physics.servo_pulse_us
        agent.control.submit("sim2bot", BaseVelocity(0.4, 0.0))
        agent.control.submit("sim2bot", JointTrajectory((TrajectoryPoint(0.0, (0.0, 0.0)),
                                                         TrajectoryPoint(20.0, (1.2, 0.6)))))
        assert await wait_for(lambda: agent.physics.duty[0] > 0.0, 5)
        assert await wait_for(lambda: pulses.get(0) is not None, 3)
        p0 = pulses[0]
        assert await wait_for(lambda: pulses[0] != p0, 3)           # the trajectory is moving

        async def closing_adapter() -> None:
            try:
                await asyncio.sleep(60)  # no wall time: cancelled by close()
            except asyncio.CancelledError:                         # what the motors do when links close
                seen["duty"], seen["pulse"] = list(agent.physics.duty), pulses[0]
                await asyncio.sleep(0.3)  # real time held on purpose: a running 20 s trajectory moves its pulse ~5 us
                seen["pulse_later"] = pulses[0]
                raise

        agent._tasks.append(asyncio.create_task(closing_adapter(), name="adapter-probe"))
        await asyncio.sleep(0.05)
        await agent.close()
        assert seen["duty"] == [0.0, 0.0]
        assert seen["pulse_later"] == seen["pulse"]                 # the trajectory had stopped
