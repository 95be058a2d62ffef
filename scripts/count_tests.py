#!/usr/bin/env python3
"""Count the suite's tests and assertions, to show that a change dropped none.

Prints one line per figure, for example::

    test functions   1234   (def test_* in tests/, parametrised once)
    assert           5678   (assert statements, by AST)
    pytest.raises     210   (with pytest.raises / pytest.warns blocks)
    collected        1403   (pytest --collect-only; with --collect)

Usage: ``scripts/count_tests.py [--collect] [DIR]`` (DIR defaults to tests/). ``--collect`` also
runs ``pytest --collect-only -q`` with this interpreter and counts the collected items (every
parameter set counts). Exit status 0; figures only, no judgement.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _is_raises(node: ast.AST) -> bool:
    """``pytest.raises(...)`` / ``pytest.warns(...)`` / ``raises(...)`` as a with-item."""
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
    return name in ("raises", "warns")


def count(root: Path) -> dict[str, int]:
    """Static figures over every ``*.py`` under ``root``: test functions, asserts, raises blocks."""
    figures = {"files": 0, "test functions": 0, "assert": 0, "pytest.raises": 0}
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        figures["files"] += 1
        for node in ast.walk(tree):
            if isinstance(node, ast.Assert):
                figures["assert"] += 1
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
                figures["test functions"] += 1
            elif isinstance(node, (ast.With, ast.AsyncWith)):
                figures["pytest.raises"] += sum(_is_raises(item.context_expr) for item in node.items)
    return figures


def collected(root: Path) -> int:
    """How many items ``pytest --collect-only`` finds under ``root`` (in one process)."""
    out = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:xdist", "--collect-only", "-q",
                          str(root)], cwd=ROOT, capture_output=True, text=True, check=False).stdout
    return sum(1 for line in out.splitlines() if "::" in line)


def main(argv: list[str]) -> int:
    args = [a for a in argv if a != "--collect"]
    root = Path(args[0]) if args else ROOT / "tests"
    for name, value in count(root).items():
        print(f"{name:<16}{value:>6}")
    if "--collect" in argv:
        print(f"{'collected':<16}{collected(root):>6}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
