"""The incident detector (agent/recorder/incidents.py) skips what the control loop's snapshots share with the
previous one (the same SafetyState object, equal device reports): a halt or a lost device that comes after
any number of such snapshots is still an incident, once."""

from __future__ import annotations

from agent.model import DeviceHealth, Halt, SafetyState, Snapshot, TrackState
from agent.recorder.incidents import Detector

OK = (DeviceHealth("motor", "ok"), DeviceHealth("imu", "ok"))


def snap(seq: int, safety: SafetyState, devices=OK, watchdog: str = "ok") -> Snapshot:
    return Snapshot(seq=seq, t_unix_s=100.0 + seq, safety=safety, devices=devices, watchdog=watchdog,
                    tracks=TrackState(0.2, 0.2, 0.2, 0.2, 0.2, 0.2), active_source="artex")


def test_a_halt_or_a_lost_device_after_unchanged_snapshots_is_one_incident():
    det, clear = Detector(), SafetyState()
    assert [det.snapshot(snap(k, clear)) for k in range(1, 5)] == [[]] * 4
    estop = SafetyState((Halt("estop", "button", "console", 104.5),))
    got = det.snapshot(snap(5, estop))
    assert [(i.kind, i.source) for i in got] == [("estop", "console")]
    assert det.snapshot(snap(6, estop)) == [] and det.snapshot(snap(7, SafetyState(estop.halts))) == []
    det.snapshot(snap(8, clear))                                  # released, then set again: a new incident
    again = SafetyState((Halt("estop", "button", "console", 108.5),))
    assert [i.kind for i in det.snapshot(snap(9, again))] == ["estop"]
    lost = (DeviceHealth("motor", "lost", "timeout", 3), OK[1])
    assert det.snapshot(snap(10, again, OK)) == []
    assert [(i.kind, i.source) for i in det.snapshot(snap(11, again, lost))] == [("device_lost", "motor")]
    assert det.snapshot(snap(12, again, lost)) == [] and det.snapshot(snap(13, again, tuple(lost))) == []
    det.snapshot(snap(14, again, OK))
    assert [i.kind for i in det.snapshot(snap(15, again, lost))] == ["device_lost"]
    assert [i.kind for i in det.snapshot(snap(16, again, OK, watchdog="expired"))] == ["watchdog"]
