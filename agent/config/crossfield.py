"""Cross-field checks of params.json, run on the parsed JSON so that one run reports them all.

Pydantic runs a model's own cross-field validator only after every field of that model is valid,
and stops at its first raise; a config with a bad angle range, a channel used twice and an I2C
address clash would then need a run per problem. These checks read the raw document instead,
skip any value that is not of its type (the field check reports that), and return every
problem as ``(json_path, message)``:

- a servo joint's ``min_rad`` below its ``max_rad``, ``home_rad`` within them;
- a servo channel (joints and gripper) and a joint name used once;
- a camera id used once; ``console.camera`` names a configured camera;
- two I2C devices on one bus at different addresses (shown in hex);
- ``recorder.dir`` is a directory or can be made one (agent.config.recorder.dir_problem: the one check
  here that reads the file system).

The models keep their own validators (a model built in code stays consistent);
:func:`agent.config.loads` drops their one-at-a-time reports in favour of these.
"""

from __future__ import annotations

import typing
from typing import Any

from agent.config.recorder import dir_problem
from drivers.config import KINDS
from drivers.transport import bus_key

#: Words of the models' own cross-field messages that these checks replace (see loads()).
REPLACED = ("servo channels used twice", "joint names used twice", "camera ids used twice", "both use address",
            "Value error, min_rad ", "Value error, home_rad ")

DEFAULT_JOINT = {"min_rad": -1.5708, "max_rad": 1.5708, "home_rad": 0.0}


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _address(value: Any) -> int | None:
    if isinstance(value, str):
        try:
            return int(value.strip(), 0)
        except ValueError:
            return None
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None


def _joints(servo: dict[str, Any], path: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    joints = servo.get("joints")
    joints = joints if isinstance(joints, list) else []
    channels: dict[int, str] = {}
    names: dict[str, str] = {}
    for i, joint in enumerate(joints):
        if not isinstance(joint, dict):
            continue
        where = f"{path}.joints[{i}]"
        lo, hi, home = (_num(joint.get(k, DEFAULT_JOINT[k])) for k in ("min_rad", "max_rad", "home_rad"))
        if lo is not None and hi is not None and lo >= hi:
            out.append((where, f"min_rad {lo:g} must be below max_rad {hi:g}"))
        elif lo is not None and hi is not None and home is not None and not lo <= home <= hi:
            out.append((where, f"home_rad {home:g} is outside {lo:g}..{hi:g}"))
        channel = joint.get("channel")
        if isinstance(channel, int) and not isinstance(channel, bool):
            if channel in channels:
                out.append((f"{where}.channel", f"servo channel {channel} is already used by {channels[channel]}"))
            else:
                channels[channel] = where
        name = joint.get("name")
        if isinstance(name, str):
            if name in names:
                out.append((f"{where}.name", f"joint name {name!r} is already used by {names[name]}"))
            else:
                names[name] = where
    gripper = servo.get("gripper")
    channel = gripper.get("channel") if isinstance(gripper, dict) else None
    if isinstance(channel, int) and not isinstance(channel, bool) and channel in channels:
        out.append((f"{path}.gripper.channel", f"servo channel {channel} is already used by {channels[channel]}"))
    return out


def _i2c(drivers: dict[str, Any]) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    seen: dict[tuple[str, int], str] = {}
    for kind in ("motor", "imu", "power", "servo"):
        dev = drivers.get(kind)
        if not isinstance(dev, dict):
            continue
        model = next((m for m in KINDS.get(kind, ()) if "kind" in m.model_fields
                      and dev.get("kind") in typing.get_args(m.model_fields["kind"].annotation)), None)
        if model is None or "bus" not in model.model_fields:
            continue
        address = _address(dev.get("address", model.model_fields["address"].default))
        bus = dev.get("bus", model.model_fields["bus"].default)
        if address is None or not isinstance(bus, (int, str)) or isinstance(bus, bool):
            continue
        key = (bus_key(bus), address)
        where = f"$.drivers.{kind}"
        if key in seen:
            out.append((f"{where}.address", f"address 0x{address:02x} on I2C bus {bus!r} is already used by "
                        f"{seen[key]} (each chip on a bus needs its own address: see its address pins)"))
        else:
            seen[key] = where
    return out


def _cameras(data: dict[str, Any], drivers: dict[str, Any]) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    cameras = drivers.get("cameras")
    cameras = cameras if isinstance(cameras, list) else []
    ids: dict[str, str] = {}
    for i, cam in enumerate(cameras):
        cid = cam.get("id") if isinstance(cam, dict) else None
        if not isinstance(cid, str):
            continue
        if cid in ids:
            out.append((f"$.drivers.cameras[{i}].id", f"camera id {cid!r} is already used by {ids[cid]}"))
        else:
            ids[cid] = f"$.drivers.cameras[{i}]"
    console = data.get("console")
    wanted = console.get("camera") if isinstance(console, dict) else None
    if isinstance(wanted, str) and wanted not in ids:
        have = ", ".join(repr(c) for c in ids) or "none"
        out.append(("$.console.camera", f"camera {wanted!r} is not configured (drivers.cameras ids: {have}); "
                    "name one of them or leave camera out for the first"))
    return out


def problems(data: dict[str, Any]) -> list[tuple[str, str]]:
    """Every cross-field problem of a parsed params.json, ``(json_path, message)``; [] when none."""
    drivers = data.get("drivers")
    drivers = drivers if isinstance(drivers, dict) else {}
    out: list[tuple[str, str]] = []
    servo = drivers.get("servo")
    if isinstance(servo, dict):
        out += _joints(servo, "$.drivers.servo")
    out += _i2c(drivers)
    out += _cameras(data, drivers)
    why = dir_problem(data.get("recorder"))
    if why:
        out.append(("$.recorder.dir", why))
    return out
