"""Odometry across a long gap between two motor reads, on the simulated tank (real Hardware, the real
RoboClaw driver, its emulator on a pty): the control loop runs on an injected clock and the test calls
``tick(now)``, so a tick can see counts read far apart in real time while its own clock moved 20 ms,
as a loaded machine makes happen (a tick held up between its clock and its readings). The distance
then still counts the travel; a real jump of the counters (the controller's encoders reset) is still
refused with a warning.
"""

from __future__ import annotations

import logging

import pytest

from agent.commands import BaseVelocity
from tests.agent.test_control_rest import Rig as RestRig
from tests.conftest import wait_until

SETTLE_S = 10.0
CPM = 4000.0        # counts per metre (sim_config's base.counts_per_m)
JUMP_LOG = "encoder jump"


class Rig(RestRig):
    """A loop on the simulated tank, ticked by the test on its own clock (test_control_rest's rig)."""

    def __init__(self) -> None:
        super().__init__()
        assert self.cfg.base.counts_per_m == CPM

    def counts(self) -> tuple[int, int] | None:
        fb = self.hw.read_motor()
        return None if fb is None or fb.left_counts is None else (fb.left_counts, fb.right_counts)

    def moving(self, vx: float = 0.3) -> None:
        """Drive at ``vx`` until the tank runs at half of it (the loop ramps on its clock, the tank on real time)."""
        for _ in range(20):                     # 0.4 s of ramp at base.max_accel_mps2, inside the watchdog
            self.loop.submit("robot_msg", BaseVelocity(vx, 0.0))
            self.tick()
        assert wait_until(lambda: (fb := self.hw.read_motor()) is not None and (fb.left_cps or 0) > vx / 2 * CPM,
                          SETTLE_S), f"the tank never moved: {self.sim.physics.vx_mps}"
        self.loop.submit("robot_msg", BaseVelocity(vx, 0.0))    # fresh for the ticks that follow

@pytest.fixture
def rig():
    r = Rig()
    yield r
    r.close()


def test_a_long_gap_between_reads_counts_the_travel(rig, caplog):
    rig.moving()
    before = rig.tick()
    start = rig.counts()
    # the motor thread reads on while the loop's clock stands still: 0.2 m of real travel between two
    # ticks 20 ms apart on the loop's clock (a loaded machine held the tick up)
    assert wait_until(lambda: (c := rig.counts()) is not None and c[0] - start[0] >= 0.2 * CPM, SETTLE_S)
    got = rig.counts()
    with caplog.at_level(logging.WARNING, logger="agent.control.kinematics"):
        after = rig.tick()
    assert JUMP_LOG not in caplog.text
    travelled = after.odom.distance_m - before.odom.distance_m
    # at least the counts the test saw (the tick may read a later set), at most what the tank covered
    assert travelled >= (got[0] - start[0]) / CPM - 0.01, (travelled, got, start)
    assert travelled <= rig.sim.physics.track_m[0] + 0.01


def test_a_counter_reset_is_still_refused(rig, caplog):
    rig.moving()
    before = rig.tick()
    start = rig.counts()
    rig.sim.motor_emulator.set_encoder_counts(start[0] + int(50 * CPM), start[1] + int(50 * CPM))  # +50 m at once
    assert wait_until(lambda: (c := rig.counts()) is not None and c[0] - start[0] >= 40 * CPM, SETTLE_S)
    with caplog.at_level(logging.WARNING, logger="agent.control.kinematics"):
        after = rig.tick()
    assert JUMP_LOG in caplog.text
    assert after.odom.distance_m - before.odom.distance_m < 1.0      # no 50 m teleport
