"""Tests wait for a condition or run on an injected clock (docs/testing.md, "Rules for a new test"): a
literal ``time.sleep`` / ``asyncio.sleep`` of :data:`LEAST_S` or more in tests/ says, in a comment on
its line or the line above, why it holds real time ("real time held on purpose: ...", for a claim that
something does not happen within a time) or why it takes none ("no wall time: ..."). A sleep on an
injected clock (``clock.sleep``) is not one of them."""

from __future__ import annotations

import ast
import io
import tokenize
from pathlib import Path

TESTS = Path(__file__).resolve().parent
#: s; shorter sleeps are polling periods and pacing.
LEAST_S = 0.3
MARKS = ("real time held on purpose", "no wall time")


def unexplained_sleeps(source: str) -> list[tuple[int, float]]:
    """(line, seconds) of each literal ``time.sleep``/``asyncio.sleep`` of :data:`LEAST_S` s or more in
    ``source`` without one of :data:`MARKS` in a comment on its lines or the line above."""
    comments: dict[int, str] = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            comments[tok.start[0]] = tok.string
    found = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "sleep"
                and isinstance(node.func.value, ast.Name) and node.func.value.id in ("time", "asyncio")
                and node.args and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, (int, float)) and node.args[0].value >= LEAST_S):
            continue
        lines = range(node.lineno - 1, (node.end_lineno or node.lineno) + 1)
        if not any(mark in comments.get(n, "") for n in lines for mark in MARKS):
            found.append((node.lineno, float(node.args[0].value)))
    return found


def test_the_checker_finds_a_bare_sleep_and_accepts_an_explained_one():
    source = ("import asyncio, time\n"
              "time.sleep(0.5)\n"
              "time.sleep(0.29)\n"
              "clock.sleep(5.0)\n"
              "time.sleep(1)  # real time held on purpose: the watchdog must run out\n"
              "# no wall time: cancelled at once\n"
              "asyncio.sleep(60)\n"
              "asyncio.sleep(\n    2.0)\n")
    assert unexplained_sleeps(source) == [(2, 0.5), (8, 2.0)]


def test_every_long_literal_sleep_in_the_tests_says_why():
    found = {str(path.relative_to(TESTS.parent)): bad for path in sorted(TESTS.rglob("*.py"))
             if (bad := unexplained_sleeps(path.read_text(encoding="utf-8")))}
    assert found == {}, f"wait for a condition or an injected clock instead (docs/testing.md): {found}"
