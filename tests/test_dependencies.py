"""Protocol dependencies are bounded to the range the tests cover (issue 20 item 8).

The adapters use private internals of python-socketio, python-engineio, aiohttp and websockets, and
speak robot_msg's wire: a new release outside the range must not install silently. The versions the
tests run against lie inside the declared ranges.
"""

from __future__ import annotations

import importlib.metadata as md
import tomllib

from packaging.requirements import Requirement

from tests.conftest import ROOT

#: what the agent speaks or reaches into; each must carry an upper bound
PROTOCOL = {"python-socketio", "python-engineio", "aiohttp", "websockets", "pyzmq", "robot-msg-irsl",
            "sim2bot", "artex-robot"}


def requirements() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    lines = project["dependencies"] + [r for extra in project["optional-dependencies"].values() for r in extra]
    return [Requirement(line) for line in lines]


def test_every_protocol_dependency_has_an_upper_bound_and_the_tested_version_is_inside():
    seen = set()
    for req in requirements():
        if req.name not in PROTOCOL:
            continue
        seen.add(req.name)
        assert any(s.operator in ("<", "<=", "==", "~=") for s in req.specifier), f"{req} has no upper bound"
        installed = md.version(req.name)
        assert req.specifier.contains(installed, prereleases=True), f"tests run {req.name} {installed}, outside {req}"
    assert seen == PROTOCOL, PROTOCOL - seen
