"""Every refusal raises the subclass that means it (agent/errors.py): ``CommandRejected`` for bad
input, ``CommandDeclined`` for a valid command the robot will not carry out. The base class
``CommandError`` is for catching; nothing outside agent/errors.py constructs it (checked over the
AST of agent/ and drivers/, so a message text or a comment cannot hide or fake one).
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import ROOT

HOME = Path("agent/errors.py")


def bare_command_errors(root: Path) -> list[str]:
    """``file:line: code`` of every ``CommandError(...)`` call outside agent/errors.py."""
    found = []
    for package in ("agent", "drivers"):
        for path in sorted((root / package).rglob("*.py")):
            rel = path.relative_to(root)
            if rel == HOME:
                continue
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Call):
                    name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
                    if name == "CommandError":
                        found.append((str(rel), node.lineno, ast.unparse(node)[:100]))
    return [f"{rel}:{line}: {code}" for rel, line, code in sorted(found)]


def test_no_bare_command_error_outside_its_module():
    found = bare_command_errors(ROOT)
    assert not found, ("raise CommandRejected (bad input) or CommandDeclined (valid, but not done) instead of "
                       f"the base class: {found}")


def test_a_planted_bare_command_error_is_found(tmp_path):
    (tmp_path / "agent").mkdir()
    (tmp_path / "drivers").mkdir()
    (tmp_path / "agent" / "errors.py").write_text("class CommandError(ValueError): ...\nCommandError('fine here')\n")
    (tmp_path / "agent" / "planted.py").write_text(
        "from agent import errors\nfrom agent.errors import CommandError\n"
        "# raise CommandError('a comment')\n"
        "def f(x):\n    if x:\n        raise CommandError(f'bad {x}')\n    raise errors.CommandError('also')\n")
    assert bare_command_errors(tmp_path) == ["agent/planted.py:6: CommandError(f'bad {x}')",
                                             "agent/planted.py:7: errors.CommandError('also')"]
