"""web_settings and the files beside params.json, end to end with the real ARTEX test hub: a symlinked
params.json, and ``kill -9`` of an agent process in the middle of settings writes."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import threading
import time

import pytest

from agent.adapters.artex_settings import temp_file_pattern
from agent.config import load
from agent.testing.artex_hub import artex_params
from agent.testing.running_agent import ROOT, running_agent, wait_for
from tests.adapters.test_artex_settings import listing

#: rounds of start, settings writes, SIGKILL (each start takes about a second)
KILL_ROUNDS = 3


async def test_web_settings_through_a_symlinked_params_json_update_the_target(hub, tmp_path):
    etc, store = tmp_path / "etc", tmp_path / "store"
    etc.mkdir(), store.mkdir()
    params = artex_params(hub, max_send_freq=0.05)
    params["drivers"]["cameras"] = []
    target = store / "robot.json"
    target.write_text(json.dumps(params, indent=2))
    (store / "other.json").write_text("{}")
    (etc / "notes.txt").write_text("keep")
    link = etc / "params.json"
    os.symlink("../store/robot.json", link)
    etc_before, store_before = listing(etc), listing(store)
    async with running_agent(params, config_path=str(link)) as agent:
        adapter = agent.adapters["artex"]
        assert await wait_for(lambda: hub.heartbeats, 10)
        await hub.command({"web_settings": {"max_send_freq": 0.25, "jpeg_quality": 55, "telem_can": False}})
        assert await wait_for(lambda: adapter.status().get("accepted", 0) == 1, 5)
    assert link.is_symlink() and listing(etc) == etc_before
    saved = json.loads(target.read_text())
    assert saved["max_send_freq"] == 0.25 and saved["artex"]["jpeg_quality"] == 55
    assert saved["telem_can"] is True      # a stream switch lasts until restart (docs/artex.md)
    assert load(link).max_send_freq == 0.25               # the next start reads the new settings
    store_after = listing(store)
    store_after.pop("robot.json"), store_before.pop("robot.json")
    assert store_after == store_before                    # nothing else in either directory changed


def _temp_files(directory) -> list[str]:
    pattern = temp_file_pattern("params.json")
    return [e.name for e in os.scandir(directory) if pattern.fullmatch(e.name)]


def _kill_on_temp_file(proc: asyncio.subprocess.Process, directory, timeout_s: float) -> bool:
    """SIGKILL ``proc`` as soon as a settings temp file shows in ``directory`` (mid-write), or at the
    timeout; True when one was seen."""
    deadline = time.monotonic() + timeout_s
    seen = False
    while time.monotonic() < deadline and not seen:
        seen = bool(_temp_files(directory))
    os.kill(proc.pid, signal.SIGKILL)
    return seen


async def _start(params_path, hub) -> asyncio.subprocess.Process:
    """``python -m agent run`` on ``params_path``, returned once it is connected to ``hub`` (the stale
    temp files are removed before the adapters start)."""
    known = {sid for _, sid, _ in hub.heartbeats}
    env = {k: v for k, v in os.environ.items() if k not in ("NOTIFY_SOCKET", "WATCHDOG_USEC")}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "agent", "run", "--config", str(params_path), "--status-file",
        str(params_path.parent / "status.json"), cwd=ROOT, env=env,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
    if not await wait_for(lambda: any(sid not in known for _, sid, _ in hub.heartbeats), 30):
        proc.kill()
        await proc.wait()
        pytest.fail("the agent never connected to the hub")
    return proc


@pytest.mark.timeout(120)
async def test_sigkill_during_settings_writes_leaves_no_temp_file_after_the_next_start(hub, tmp_path):
    directory = tmp_path / "config"
    directory.mkdir()
    params = artex_params(hub, max_send_freq=0.05)
    params["drivers"]["cameras"] = []
    path = directory / "params.json"
    path.write_text(json.dumps(params, indent=2))
    decoys = {".params.json.abcdefgh.tmp": "not the agent's pattern", "notes.tmp": "the operator's"}
    for name, text in decoys.items():
        (directory / name).write_text(text)
    caught = 0
    for round_ in range(KILL_ROUNDS):
        proc = await _start(path, hub)
        stop = threading.Event()

        async def spam() -> None:
            i = 0
            while not stop.is_set():
                i += 1
                await hub.command({"web_settings": {"max_send_freq": 0.05 + (i % 100) / 1000}})
                await asyncio.sleep(0)

        spammer = asyncio.create_task(spam())
        try:
            caught += await asyncio.to_thread(_kill_on_temp_file, proc, directory, 5.0)
        finally:
            stop.set()
            await asyncio.gather(spammer, return_exceptions=True)
            await proc.wait()
        assert proc.returncode == -signal.SIGKILL
        assert load(path).max_send_freq >= 0.05            # params.json itself is never torn
    left = _temp_files(directory)
    (directory / ".params.json.robot-agent-deadbeef.tmp").write_text("{")  # one more, for sure
    proc = await _start(path, hub)                         # the next start
    try:
        assert _temp_files(directory) == []
        for name, text in decoys.items():
            assert (directory / name).read_text() == text
    finally:
        proc.send_signal(signal.SIGTERM)
        await asyncio.wait_for(proc.wait(), 15)
    print(f"\n{KILL_ROUNDS} SIGKILLs, {caught} mid-write; {len(left)} temp file(s) left before the next start")


@pytest.mark.timeout(120)
async def test_a_params_json_with_a_utf8_bom_checks_runs_and_keeps_its_bom_through_web_settings(hub, tmp_path):
    """Notepad writes a UTF-8 byte order mark at the start of the file: `check-config` and `run` take
    it (the real commands), and a web_settings write keeps it, with the file's indentation."""
    params = artex_params(hub, max_send_freq=0.05)
    params["drivers"]["cameras"] = []
    path = tmp_path / "params.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(params, indent=4).encode())
    check = await asyncio.create_subprocess_exec(sys.executable, "-m", "agent", "check-config", str(path), cwd=ROOT,
                                                 stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await check.communicate()
    assert check.returncode == 0, (out, err)
    assert b"ok" in out
    proc = await _start(path, hub)
    try:
        await hub.command({"web_settings": {"max_send_freq": 0.2}})
        assert await wait_for(lambda: b'"max_send_freq": 0.2' in path.read_bytes(), 10), path.read_bytes()[:200]
    finally:
        proc.send_signal(signal.SIGTERM)
        async with asyncio.timeout(15):
            await proc.wait()
    assert proc.returncode == 0
    raw = path.read_bytes()
    assert raw.startswith(b"\xef\xbb\xbf{\n    \"") and not raw.startswith(b"\xef\xbb\xbf\xef\xbb\xbf"), raw[:20]
    assert load(path).max_send_freq == 0.2
    assert json.loads(raw.decode("utf-8-sig"))["drivers"] == params["drivers"]     # the rest as it was
