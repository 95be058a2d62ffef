"""/metrics on the console's server, scraped with prometheus_client's own parser while the simulated
tank drives (ARTEX test hub), stops (the hub's stop) and loses its ARTEX link (the hub goes away)."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from agent.testing.artex_hub import ArtexHub, artex_params, driving
from agent.testing.ports import free_port
from agent.testing.running_agent import running_agent, wait_for

pytestmark = pytest.mark.timeout(120)


async def scrape(http: aiohttp.ClientSession, url: str) -> dict[tuple[str, tuple], float]:
    """(sample name, sorted labels) -> value, parsed by prometheus_client."""
    async with http.get(url) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = await resp.text()
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(m: dict, name: str, **labels: str) -> float:
    return m.get((name, tuple(sorted(labels.items()))), 0.0)


async def test_metrics_move_while_the_tank_drives_stops_and_loses_a_link(tmp_path):
    hub = ArtexHub(ready_delay_s=0.05)
    await hub.start()
    port = free_port()
    cfg = artex_params(hub, console={"enabled": True, "port": port},
                       recorder={"enabled": True, "dir": str(tmp_path / "rec")})
    cfg["drivers"]["cameras"] = []
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        async with running_agent(cfg) as agent, aiohttp.ClientSession() as http:
            assert await wait_for(lambda: hub.connected and hub.heartbeats, 10)
            await agent.adapters["console"].ready.wait()
            # the power monitor's first reading in a tick (start does not wait for sensor readings)
            assert await wait_for(lambda: (p := agent.control.snapshot().power) is not None
                                  and p.voltage_v is not None, 10)
            m0 = await scrape(http, url)
            assert value(m0, "robot_agent_link_up", link="artex") == 1.0
            assert value(m0, "robot_agent_control_rate_target_hertz") == 50.0
            assert value(m0, "process_resident_memory_bytes") > 1e6
            assert value(m0, "robot_agent_battery_volts") > 5.0
            assert value(m0, "robot_agent_device_state", device="motor", state="ok") == 1.0

            async with driving(hub, {"drive": {"vx": 0.4, "omega": 0.0}}):
                assert await wait_for(lambda: agent.physics.vx_mps > 0.2, 10)
                for _ in range(100):                 # the gauge follows the telemetry it is fed from
                    m1 = await scrape(http, url)
                    if value(m1, "robot_agent_speed_meters_per_second") > 0.1:
                        break
                    await asyncio.sleep(0.05)
                assert value(m1, "robot_agent_speed_meters_per_second") > 0.1
                await hub.command({"com": "stop"})
                assert await wait_for(lambda: agent.recorder.counts.stops["artex"] >= 1, 5)
            m2 = await scrape(http, url)
            assert value(m2, "robot_agent_commands_total", source="artex", verdict="applied") > \
                value(m0, "robot_agent_commands_total", source="artex", verdict="applied")
            assert value(m2, "robot_agent_stops_total", source="artex") >= 1
            assert value(m2, "robot_agent_incidents_total", kind="stop") >= 1
            assert value(m2, "robot_agent_control_ticks_total") > value(m0, "robot_agent_control_ticks_total")
            assert value(m2, "robot_agent_control_tick_lateness_seconds_count") > \
                value(m0, "robot_agent_control_tick_lateness_seconds_count")

            await hub.stop()
            assert await wait_for(lambda: agent.recorder.counts.link_drops["artex"] >= 1, 15)
            m3 = await scrape(http, url)
            assert value(m3, "robot_agent_link_up", link="artex") == 0.0
            assert value(m3, "robot_agent_link_drops_total", link="artex") >= 1
            assert value(m3, "robot_agent_incidents_total", kind="link_lost") >= 1
            assert value(m3, "robot_agent_recorder_written_bytes_total") >= 0
            await hub.start()
            assert await wait_for(lambda: hub.connected, 15)
            assert await wait_for(lambda: agent.recorder.counts.link_connects["artex"] >= 2, 10)
            m4 = await scrape(http, url)
            assert value(m4, "robot_agent_link_reconnects_total", link="artex") >= 1
    finally:
        await hub.stop()


async def test_metrics_and_incidents_sit_behind_the_console_token(tmp_path):
    port = free_port()
    token = "Zq7-metrics-token-k3P9xw2L"
    from agent.testing.running_agent import sim_config
    cfg = sim_config(console={"enabled": True, "port": port, "token": token},
                     recorder={"enabled": True, "dir": str(tmp_path / "rec")})
    cfg["drivers"]["cameras"] = []
    jar = aiohttp.CookieJar(unsafe=True)     # the gate's cookie is for 127.0.0.1 (an IP address)
    async with running_agent(cfg) as agent, aiohttp.ClientSession(cookie_jar=jar) as http:
        await agent.adapters["console"].ready.wait()
        for path in ("/metrics", "/api/incidents", "/incidents"):
            async with http.get(f"http://127.0.0.1:{port}{path}") as resp:
                assert resp.status == 401, path
        async with http.get(f"http://127.0.0.1:{port}/metrics?token={token}") as resp:
            assert resp.status == 200
            assert "robot_agent_control_ticks_total" in await resp.text()
        # a scraper keeps no cookie: /metrics (only) takes the token as a bearer token, as Prometheus sends it
        async with aiohttp.ClientSession() as scraper:
            url = f"http://127.0.0.1:{port}/metrics"
            async with scraper.get(url, headers={"Authorization": f"Bearer {token}"}) as resp:
                assert resp.status == 200 and "robot_agent_control_ticks_total" in await resp.text()
            async with scraper.get(url, headers={"Authorization": "Bearer not-the-token-at-all"}) as resp:
                assert resp.status == 401
            async with scraper.get(f"http://127.0.0.1:{port}/api/incidents",
                                   headers={"Authorization": f"Bearer {token}"}) as resp:
                assert resp.status == 401                 # the page's routes keep the cookie rule
