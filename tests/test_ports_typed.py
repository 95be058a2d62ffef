"""mypy checks the ports (agent/ports.py) against every implementer: ControlLoop as RobotPort,
VideoHub as VideoPort, the adapters and the console as Adapter, the adapter classes as
AdapterFactory (tests/ports_conformance.py), and those files' own types ([tool.mypy] in
pyproject.toml). A planted module that assigns the video hub to a RobotPort is checked in the
same run and must be the only failure, so the check is seen to fail on a violation."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib

import pytest

from tests.conftest import ROOT

PLANTED = '''from __future__ import annotations
from typing import TYPE_CHECKING
if TYPE_CHECKING:
    from agent.ports import RobotPort
    from agent.video.hub import VideoHub

    def planted(hub: VideoHub) -> None:
        robot: RobotPort = hub
        del robot
'''


@pytest.mark.slow                # mypy over the ports' implementers, ~5 s of CPU
def test_mypy_finds_the_implementers_conform_to_the_ports_and_fails_on_a_planted_violation(tmp_path):
    files = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]["files"]
    planted = tmp_path / "planted_conformance.py"
    planted.write_text(PLANTED)
    run = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "cache"),
                          "--no-error-summary", *files, str(planted)],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    errors = [line for line in run.stdout.splitlines() if re.search(r":\d+: error:", line)]
    planted_errors = [e for e in errors if e.startswith(str(planted))]
    assert [e for e in errors if e not in planted_errors] == [], run.stdout + run.stderr
    assert len(planted_errors) == 1 and 'type "VideoHub", variable has type "RobotPort"' in planted_errors[0], \
        run.stdout + run.stderr
