"""agent/ never probes a driver: capabilities are declared on the base classes in drivers/base.py
(with defaults) and read as attributes, never found by ``hasattr`` / ``getattr`` / ``isinstance``.

Checked over the AST of every module in agent/. A probe is one of:

- ``isinstance(x, C)`` where ``C`` is imported from drivers/ and is a driver class (a ``Device``);
- ``hasattr`` / ``getattr`` on a driver: an expression named ``driver`` / ``drv`` (``dev.driver``,
  ``self.imu.driver``), or the parameter of a function handed to ``Supervised.call``;
- ``hasattr`` / ``getattr`` for a name a driver class defines (``"gyro_calibration"``,
  ``"poll_period_s"``), except the lifecycle names every device has.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import re
from pathlib import Path

import drivers
from drivers.base import Device
from tests.conftest import ROOT

PROBES = {"hasattr", "getattr", "isinstance"}
#: names every device has, or too common to mean a driver (a config's ``name``, a file's ``read``)
COMMON = {"name", "open", "close", "read", "stop", "release", "wait", "cfg"}
DRIVER_EXPR = re.compile(r"(^|\.)_?(driver|drv)$")


def driver_classes() -> list[type]:
    """Every Device subclass defined in drivers/ (emulators and the package's helpers excluded)."""
    out = []
    for info in pkgutil.iter_modules(drivers.__path__):
        module = importlib.import_module(f"drivers.{info.name}")
        out += [c for _, c in inspect.getmembers(module, inspect.isclass)
                if issubclass(c, Device) and c.__module__ == module.__name__]
    return out


def driver_attributes() -> set[str]:
    """Names driver classes define (methods, properties, class attributes), lifecycle names excluded."""
    names = {n for cls in driver_classes() for n in vars(cls) if not n.startswith("__")}
    return names - COMMON - set(dir(object))


def _imported(tree: ast.AST) -> dict[str, str]:
    """Local name -> dotted path of what a module imports from drivers/."""
    out = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("drivers"):
            out |= {a.asname or a.name: f"{node.module}.{a.name}" for a in node.names}
    return out


def _is_driver_class(expr: ast.expr, imported: dict[str, str]) -> bool:
    exprs = expr.elts if isinstance(expr, ast.Tuple) else [expr]
    for e in exprs:
        dotted = imported.get(ast.unparse(e)) or (ast.unparse(e) if ast.unparse(e).startswith("drivers.") else None)
        if dotted is None:
            continue
        module, _, name = dotted.rpartition(".")
        try:
            obj = getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError):
            continue
        if inspect.isclass(obj) and issubclass(obj, Device):
            return True
    return False


def _call_params(tree: ast.AST) -> dict[ast.AST, set[str]]:
    """Functions handed to ``<x>.call(...)`` (Supervised.call): lambda -> its parameter names."""
    out = {}
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "call"
                and node.args and isinstance(node.args[0], ast.Lambda)):
            out[node.args[0]] = {a.arg for a in node.args[0].args.args}
    return out


def probes(path: Path, root: Path, attributes: set[str]) -> list[str]:
    """``file:line: code`` of every probe of a driver in ``path``."""
    tree = ast.parse(path.read_text(), str(path))
    imported = _imported(tree)
    lambda_params = {}
    for lam, params in _call_params(tree).items():
        for node in ast.walk(lam):
            lambda_params[node] = params
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in PROBES
                and len(node.args) >= 2):
            continue
        target, second = node.args[0], node.args[1]
        if node.func.id == "isinstance":
            bad = _is_driver_class(second, imported)
        else:
            bad = (bool(DRIVER_EXPR.search(ast.unparse(target)))
                   or (isinstance(target, ast.Name) and target.id in lambda_params.get(node, ()))
                   or (isinstance(second, ast.Constant) and second.value in attributes))
        if bad:
            found.append(f"{path.relative_to(root)}:{node.lineno}: {ast.unparse(node)}")
    return found


def agent_probes(root: Path) -> list[str]:
    attributes = driver_attributes()
    return [p for path in sorted((root / "agent").rglob("*.py")) for p in probes(path, root, attributes)]


def test_agent_never_probes_a_driver():
    found = agent_probes(ROOT)
    assert not found, ("agent/ probes drivers; declare the capability on the base class in drivers/base.py "
                       f"(docs/architecture.md, 'Adding a device'): {found}")


def test_a_planted_probe_is_found(tmp_path):
    planted = tmp_path / "agent" / "planted.py"
    planted.parent.mkdir()
    planted.write_text(
        "from drivers.serialport import SerialMotorController\n"
        "def f(self, dev, x):\n"
        "    a = getattr(dev.driver, 'poll_period_s', 0.0)\n"
        "    b = hasattr(x, 'gyro_calibration')\n"
        "    c = self.motor.call(lambda d: isinstance(d, SerialMotorController))\n"
        "    e = self.motor.call(lambda d: getattr(d, 'anything', None))\n"
        "    return getattr(x, 'name', None), isinstance(x, dict), getattr(self.cfg, 'port', None)\n")
    assert [line.split(": ", 1)[0] for line in agent_probes(tmp_path)] == [
        "agent/planted.py:3", "agent/planted.py:4", "agent/planted.py:5", "agent/planted.py:6"]
