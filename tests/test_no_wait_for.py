"""No agent or driver code calls ``asyncio.wait_for`` (docs/architecture.md, "Links: liveness,
supervision, shutdown"): on Python 3.11 it swallows a cancellation that arrives in the same loop
pass as the awaited result (CPython gh-86296) and the cancelled task runs on. Bounded waits use
``async with asyncio.timeout(t)``. The behaviour itself: tests/agent/test_video.py,
``test_a_wait_cancelled_in_the_pass_its_frame_arrives_ends_cancelled``."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def wait_for_calls(source: str) -> list[int]:
    """Lines of ``source`` that call asyncio's wait_for (``asyncio.wait_for(...)``, or ``wait_for(...)``
    imported from asyncio, under any alias)."""
    tree = ast.parse(source)
    aliases = {a.asname or a.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
               and node.module == "asyncio" for a in node.names if a.name == "wait_for"}
    modules = {a.asname or a.name for node in ast.walk(tree) if isinstance(node, ast.Import)
               for a in node.names if a.name == "asyncio"}
    lines = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        if (isinstance(f, ast.Attribute) and f.attr == "wait_for" and isinstance(f.value, ast.Name)
                and f.value.id in modules) or (isinstance(f, ast.Name) and f.id in aliases):
            lines.append(node.lineno)
    return lines


def test_the_check_finds_each_spelling_and_not_a_condition_wait_for():
    planted = ("import asyncio\nimport asyncio as aio\nfrom asyncio import wait_for as wf\n"
               "async def f(e, cond):\n    await asyncio.wait_for(e.wait(), 1)\n    await aio.wait_for(e.wait(), 1)\n"
               "    await wf(e.wait(), 1)\n    cond.wait_for(lambda: True, 1)\n")
    assert wait_for_calls(planted) == [5, 6, 7]


def test_no_agent_or_driver_module_calls_asyncio_wait_for():
    files = [p for package in ("agent", "drivers") for p in sorted((ROOT / package).rglob("*.py"))
             if "testing" not in p.relative_to(ROOT).parts]
    assert len(files) > 100     # the walk found the packages
    found = {str(p.relative_to(ROOT)): lines for p in files if (lines := wait_for_calls(p.read_text(encoding="utf-8")))}
    assert not found, f"asyncio.wait_for in agent code (use `async with asyncio.timeout(t)`): {found}"
