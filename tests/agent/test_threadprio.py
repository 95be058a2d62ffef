"""Best-effort threads (camera capture, video encoding) run at a higher nice value than the control
path, so under a CPU quota the scheduler picks the control, motor and event loop threads first."""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

import pytest

from agent.support.threadprio import BACKGROUND_NICE_STEP, NICE_STEP_ENV, background_thread
from agent.video import FrameFormat
from tests.agent.test_video import Recorder, hubs, running  # noqa: F401 - the fixture

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="per-thread nice values are Linux's")


@pytest.fixture(autouse=True)
def production_nice(monkeypatch):
    """The suite runs background threads at step 0 (tests/conftest.py); these tests check the agent's own."""
    monkeypatch.delenv(NICE_STEP_ENV, raising=False)


def nice_of(tid: int) -> int:
    """The nice value of thread ``tid`` of this process (/proc/self/task/<tid>/stat field 19)."""
    fields = Path(f"/proc/self/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[16])


def threads_named(prefix: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(prefix)]


def test_background_thread_raises_only_the_calling_threads_nice_value():
    base = os.getpriority(os.PRIO_PROCESS, 0)
    seen: list[tuple[int, int]] = []

    def body() -> None:
        background_thread()
        seen.append((threading.get_native_id(), nice_of(threading.get_native_id())))

    worker = threading.Thread(target=body)
    worker.start()
    worker.join()
    assert seen[0][1] == min(19, base + BACKGROUND_NICE_STEP)
    assert nice_of(threading.get_native_id()) == base          # the caller's own thread is untouched


async def test_camera_capture_and_encode_threads_are_background(hubs):  # noqa: F811
    base = nice_of(threading.get_native_id())
    hub = await running(hubs, Recorder())
    await hub.next_encoded("front", FrameFormat("jpeg"), 0, 5.0)   # an encode thread exists now
    background = threads_named("camera-") + threads_named("video-encode")
    assert {t.name.split("_")[0] for t in background} == {"camera-front", "video-encode"}
    for thread in background:
        assert nice_of(thread.native_id) == min(19, base + BACKGROUND_NICE_STEP), thread.name
    assert nice_of(threading.get_native_id()) == base


def test_the_step_can_be_set_and_a_bad_value_keeps_the_default(monkeypatch, caplog):
    from agent.support.threadprio import nice_step
    monkeypatch.setenv(NICE_STEP_ENV, "0")
    base = os.getpriority(os.PRIO_PROCESS, 0)
    seen: list[int] = []
    worker = threading.Thread(target=lambda: (background_thread(), seen.append(nice_of(threading.get_native_id()))))
    worker.start()
    worker.join()
    assert seen == [base]
    monkeypatch.setenv(NICE_STEP_ENV, "25")
    assert nice_step() == BACKGROUND_NICE_STEP and "not an integer 0..19" in caplog.text


def may_lower_nice() -> bool:
    """CAP_SYS_NICE (root here) or an RLIMIT_NICE that allows nice values below the process's."""
    import resource
    soft, _ = resource.getrlimit(resource.RLIMIT_NICE)
    return os.geteuid() == 0 or 20 - soft < os.getpriority(os.PRIO_PROCESS, 0)


def test_the_control_thread_goes_ahead_where_permitted_and_only_it():
    from agent.support.threadprio import CONTROL_NICE_STEP, control_thread
    base = os.getpriority(os.PRIO_PROCESS, 0)
    seen: list[tuple[bool, int]] = []
    worker = threading.Thread(target=lambda: seen.append((control_thread(), nice_of(threading.get_native_id()))))
    worker.start()
    worker.join()
    done, nice = seen[0]
    assert done == may_lower_nice()
    assert nice == (max(-20, base - CONTROL_NICE_STEP) if done else base)
    assert nice_of(threading.get_native_id()) == base          # the caller's own thread is untouched


async def test_the_running_control_loop_thread_is_ahead():
    from agent.support.threadprio import CONTROL_NICE_STEP
    from agent.testing.running_agent import running_agent, sim_config
    if not may_lower_nice():
        pytest.skip("this process may not lower a nice value (no CAP_SYS_NICE, RLIMIT_NICE)")
    base = os.getpriority(os.PRIO_PROCESS, 0)
    async with running_agent(sim_config()):
        (control,) = threads_named("control")
        assert nice_of(control.native_id) == max(-20, base - CONTROL_NICE_STEP)
        assert nice_of(threading.get_native_id()) == base


def test_the_suites_step_0_keeps_the_control_thread_at_the_process_priority(monkeypatch):
    from agent.support.threadprio import control_thread
    monkeypatch.setenv(NICE_STEP_ENV, "0")
    base = os.getpriority(os.PRIO_PROCESS, 0)
    seen: list[tuple[bool, int]] = []
    worker = threading.Thread(target=lambda: seen.append((control_thread(), nice_of(threading.get_native_id()))))
    worker.start()
    worker.join()
    assert seen == [(False, base)]
