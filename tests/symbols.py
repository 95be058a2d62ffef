"""Dotted names of the repository's code resolved from its source, nothing imported.

``resolve("agent.control.ControlLoop.submit")`` is None when the name exists, else why not: the
longest prefix that is a module of the repository, then each name defined at its top level
(imports followed, a PEP 562 lazy name listed in the module), in a class body or its bases, or
assigned to ``self.`` in a method. Used by tests/test_doc_references.py.
"""

from __future__ import annotations

import ast
import functools
import json
from collections.abc import Iterator
from pathlib import Path

from tests.conftest import ROOT

#: names that look like code and are not: the CURVE certificate files of docs/robot_msg.md
NOT_CODE = {"agent.key", "agent.key_secret"}


def module_file(module: str) -> Path | None:
    base = ROOT.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


@functools.cache
def module_tree(module: str) -> ast.Module:
    path = module_file(module)
    assert path is not None
    return ast.parse(path.read_text())


def top_level(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """Statements run at import: into ``if``/``try``/``with`` blocks, not into functions and classes."""
    for stmt in body:
        yield stmt
        if isinstance(stmt, ast.If):
            yield from top_level(stmt.body + stmt.orelse)
        elif isinstance(stmt, ast.Try):
            yield from top_level(stmt.body + stmt.orelse + stmt.finalbody
                                 + [s for h in stmt.handlers for s in h.body])
        elif isinstance(stmt, ast.With):
            yield from top_level(stmt.body)


def assigned(targets: list[ast.expr]) -> Iterator[str]:
    for target in targets:
        if isinstance(target, ast.Name):
            yield target.id
        elif isinstance(target, (ast.Tuple, ast.List)):
            yield from assigned(list(target.elts))


@functools.cache
def definitions(module: str) -> dict[str, ast.AST | tuple[str, str | None]]:
    """Name -> its class or function node, an assignment, or ("module", attr or None) for an import."""
    found: dict[str, ast.AST | tuple[str, str | None]] = {}
    for stmt in top_level(module_tree(module).body):
        if isinstance(stmt, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            found[stmt.name] = stmt
        elif isinstance(stmt, ast.Assign):
            found.update((name, stmt) for name in assigned(stmt.targets))
        elif isinstance(stmt, (ast.AnnAssign, ast.AugAssign)) and isinstance(stmt.target, ast.Name):
            found[stmt.target.id] = stmt
        elif isinstance(stmt, ast.ImportFrom):
            source = stmt.module or ""
            if stmt.level:   # relative: from the module's package
                package = module.split(".")
                package = package[:len(package) - stmt.level + (module_file(module).name == "__init__.py")]
                source = ".".join(package + ([stmt.module] if stmt.module else []))
            for alias in stmt.names:
                found[alias.asname or alias.name] = (source, alias.name)
        elif isinstance(stmt, ast.Import):
            for alias in stmt.names:
                if alias.asname:
                    found[alias.asname] = (alias.name, None)
    return found


def members(cls: ast.ClassDef) -> dict[str, ast.AST]:
    found: dict[str, ast.AST] = {}
    for stmt in cls.body:
        if isinstance(stmt, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            found[stmt.name] = stmt
        elif isinstance(stmt, ast.Assign):
            found.update((name, stmt) for name in assigned(stmt.targets))
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            found[stmt.target.id] = stmt
    for node in ast.walk(cls):   # self.x = ... (or self.x, self.y = ...) in a method
        targets = (node.targets if isinstance(node, ast.Assign)
                   else [node.target] if isinstance(node, (ast.AnnAssign, ast.AugAssign)) else [])
        for t in [e for t in targets for e in (t.elts if isinstance(t, (ast.Tuple, ast.List)) else [t])]:
            if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id in ("self", "cls"):
                found.setdefault(t.attr, node)   # also self.a, self.b = ...
    return found


def in_repo(module: str) -> bool:
    return module.split(".")[0] in ("agent", "drivers", "tests", "scripts") and module_file(module) is not None


def resolve_in_module(module: str, names: list[str], depth: int = 0) -> str | None:
    """None when ``module.names`` exists, else why not."""
    if not names or depth > 20:
        return None
    name, rest = names[0], names[1:]
    defs = definitions(module)
    if name not in defs:
        if module_file(f"{module}.{name}"):
            return resolve_in_module(f"{module}.{name}", rest, depth + 1)
        if "__getattr__" in defs and f'"{name}"' in module_file(module).read_text():
            return None   # a lazily loaded name (PEP 562) listed in the module
        return f"{module} defines no {name}"
    found = defs[name]
    if isinstance(found, tuple):
        source, attr = found
        if attr is None:
            return resolve_in_module(source, rest, depth + 1) if in_repo(source) else None
        if in_repo(f"{source}.{attr}"):
            return resolve_in_module(f"{source}.{attr}", rest, depth + 1)
        return resolve_in_module(source, [attr, *rest], depth + 1) if in_repo(source) else None
    if isinstance(found, ast.ClassDef):
        return resolve_in_class(module, found, rest, depth + 1)
    if rest and isinstance(found, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return f"{module}.{name} is a function, it has no {rest[0]}"
    return None   # an assigned value: what it holds is not known without running it


def resolve_in_class(module: str, cls: ast.ClassDef, names: list[str], depth: int) -> str | None:
    if not names:
        return None
    name, rest = names[0], names[1:]
    found = members(cls).get(name)
    if isinstance(found, ast.ClassDef):
        return resolve_in_class(module, found, rest, depth + 1)
    if found is not None:
        return None
    for base in cls.bases:
        if not isinstance(base, ast.Name):
            return None   # a base spelt module.Class or a generic: not followed, not refuted
        owner = definitions(module).get(base.id)
        if isinstance(owner, ast.ClassDef):
            if resolve_in_class(module, owner, names, depth + 1) is None:
                return None
        elif isinstance(owner, tuple) and in_repo(owner[0]) and owner[1]:
            if resolve_in_module(owner[0], [owner[1], *names], depth + 1) is None:
                return None
        else:
            return None   # a base from a library (Enum, NamedTuple, socketio.AsyncClient...)
    return f"{module}.{cls.name} has no {name}"


@functools.cache
def config_drivers_keys() -> frozenset[str]:
    """The ``drivers`` section's keys in the shipped configs: ``drivers.motor.baud`` is a config path."""
    files = [ROOT / "config" / "params.json", *sorted((ROOT / "config" / "examples").glob("*.json"))]
    return frozenset(key for f in files for key in json.loads(f.read_text()).get("drivers", {}))


def resolve(dotted: str) -> str | None:
    parts = dotted.split(".")
    if dotted in NOT_CODE or (parts[0] == "drivers" and parts[1] in config_drivers_keys()
                              and not module_file(f"drivers.{parts[1]}")):
        return None
    for i in range(len(parts), 0, -1):
        module = ".".join(parts[:i])
        if module_file(module):
            return resolve_in_module(module, parts[i:])
    return f"no module {parts[0]}"
