"""Find the robot's devices and suggest a ``drivers`` config section (``robot-agent probe``).

What it looks at, read-only (it never writes to a chip and never sends a byte
to a serial device: a motor controller might move):

- Serial ports: ``serial.tools.list_ports`` (pyserial) plus the usual names
  under ``serial_dir`` (ttyUSB*, ttyACM*, ttyAMA*, ttyS*, serial0/1...), with
  their stable ``serial/by-id`` and ``serial/by-path`` names (hardware-reference §7.3).
- I2C buses: identity registers of the supported chips (hardware-reference §3-§6):

  ========  ============  ===========================================================
  chip      addresses     evidence
  ========  ============  ===========================================================
  MPU-6050  0x68, 0x69    WHO_AM_I (0x75) = 0x68 (0x70/0x71: MPU-6500/9250, reported)
  BNO055    0x28, 0x29    CHIP_ID (0x00) = 0xA0 (only while the chip is on page 0)
  INA226    0x40-0x4F     0xFE = 0x5449 and 0xFF = 0x2260 (TI and die IDs)
  INA219    0x40-0x4F     heuristic: Configuration = 0x399F, its power-on value; an
                          INA219 someone has configured is not recognised
  PCA9685   0x40-0x7F     heuristic: MODE2 bits 7:5 = 0, PRE_SCALE >= 3, ALL_LED
                          registers 0xFA-0xFD read 0. Other chips can pass it (e.g. a
                          DS3231 RTC at 0x68 in some minutes); 0x70 answering next to
                          another PCA9685 is its All-Call alias and is dropped
  ========  ============  ===========================================================

- Cameras: ``/dev/video*`` with ``/dev/v4l/by-id`` names; on a real ``/dev``
  the sysfs ``index`` tells capture nodes (0) from metadata nodes.

The suggested section uses by-id names where they exist, guesses the motor
controller only from USB names (RoboClaw, Sabertooth, Arduino -> ``line``
firmware) and always needs review.
"""

from __future__ import annotations

import errno as errno_mod
import glob
import json
import logging
import os
import re
from typing import Any, Callable

from serial.tools import list_ports, list_ports_linux

from agent.errors import DriverError, RobotError
from drivers.i2c import open_bus, swap16

log = logging.getLogger(__name__)

SERIAL_PATTERNS = ("ttyUSB*", "ttyACM*", "ttyAMA*", "ttyXRUSB*", "ttyS*", "rfcomm*", "ttyAP*",
                   "serial0", "serial1")
ARDUINO_VIDS = (0x2341, 0x2A03)
#: Addresses scanned: BNO055, then INA2xx / PCA9685 / MPU-6050 (0x40-0x7F).
SCAN_ADDRESSES = (0x28, 0x29, *range(0x40, 0x80))
MPU_FAMILY = {0x70: "MPU-6500", 0x71: "MPU-9250", 0x73: "MPU-9255", 0x98: "ICM-20689"}


# --------------------------------------------------------------------------- serial

def _links(directory: str) -> dict[str, list[str]]:
    """realpath -> symlinks in ``directory`` pointing at it."""
    out: dict[str, list[str]] = {}
    for link in sorted(glob.glob(os.path.join(directory, "*"))):
        out.setdefault(os.path.realpath(link), []).append(link)
    return out


def _motor_guess(text: str, vid: int | None) -> str | None:
    if "roboclaw" in text or "basicmicro" in text:
        return "roboclaw"
    if "sabertooth" in text or "dimension engineering" in text:
        return "sabertooth"
    if "arduino" in text or vid in ARDUINO_VIDS:
        return "line"
    return None


def list_serial(serial_dir: str = "/dev") -> list[dict[str, Any]]:
    """Serial ports under ``serial_dir`` with by-id / by-path names, USB info and access rights."""
    infos: dict[str, Any] = {}
    paths: dict[str, list[str]] = {}
    if os.path.realpath(serial_dir) == "/dev":
        for info in list_ports.comports():
            infos.setdefault(os.path.realpath(info.device), info)
            paths.setdefault(os.path.realpath(info.device), []).append(info.device)
    for pattern in SERIAL_PATTERNS:
        for path in sorted(glob.glob(os.path.join(serial_dir, pattern))):
            real = os.path.realpath(path)
            if real not in infos:
                info = list_ports_linux.SysFS(path)
                if info.subsystem == "platform":       # a ttyS without hardware behind it
                    continue
                infos[real] = info
            if path not in paths.setdefault(real, []):
                paths[real].append(path)
    by_id = _links(os.path.join(serial_dir, "serial", "by-id"))
    by_path = _links(os.path.join(serial_dir, "serial", "by-path"))
    ports = []
    for real, info in infos.items():
        names = paths[real]
        entry = {
            "device": names[0], "aliases": names[1:], "by_id": by_id.get(real, []), "by_path": by_path.get(real, []),
            "description": info.description, "hwid": info.hwid, "vid": info.vid, "pid": info.pid,
            "manufacturer": info.manufacturer, "product": info.product, "serial_number": info.serial_number,
            "access": os.access(real, os.R_OK | os.W_OK),
        }
        text = " ".join(str(v) for v in (info.description, info.product, info.manufacturer, *entry["by_id"])
                        if v).lower()
        entry["motor_guess"] = _motor_guess(text, info.vid)
        ports.append(entry)
    return sorted(ports, key=lambda p: p["device"])


# --------------------------------------------------------------------------- I2C

class _Scan:
    """Identity reads on one bus; NACK (121) = nobody there, other errors are recorded."""

    def __init__(self, bus: Any) -> None:
        self.bus = bus
        self.errors: list[dict[str, Any]] = []

    def read(self, fn: Callable[..., int], address: int, reg: int) -> int | None:
        try:
            return fn(address, reg)
        except OSError as err:
            if err.errno != errno_mod.EREMOTEIO:
                self.errors.append({"address": address, "errno": err.errno,
                                    "message": f"0x{address:02x} reg 0x{reg:02x}: {err.strerror or err}"})
            return None

    def byte(self, address: int, reg: int) -> int | None:
        return self.read(self.bus.read_byte_data, address, reg)

    def word_be(self, address: int, reg: int) -> int | None:
        value = self.read(self.bus.read_word_data, address, reg)
        return None if value is None else swap16(value)

    def identify(self, address: int) -> tuple[str, str] | None:
        """(kind, evidence) of the chip at ``address``, or None."""
        if address in (0x68, 0x69):
            who = self.byte(address, 0x75)
            if who == 0x68:
                return "mpu6050", "WHO_AM_I=0x68"
            if who in MPU_FAMILY:
                return "unsupported", f"WHO_AM_I=0x{who:02x} ({MPU_FAMILY[who]}, not supported)"
        if address in (0x28, 0x29) and self.byte(address, 0x00) == 0xA0:
            return "bno055", "CHIP_ID=0xA0"
        if 0x40 <= address <= 0x4F:
            ids = self.word_be(address, 0xFE), self.word_be(address, 0xFF)
            if ids == (0x5449, 0x2260):
                return "ina226", "manufacturer 0x5449, die 0x2260"
            if self.word_be(address, 0x00) == 0x399F:
                return "ina219", "Configuration=0x399F (power-on value; heuristic)"
        if address >= 0x40:
            mode2, prescale = self.byte(address, 0x01), self.byte(address, 0xFE)
            if mode2 is not None and prescale is not None and not mode2 & 0xE0 and prescale >= 3:
                if all(self.byte(address, reg) == 0 for reg in range(0xFA, 0xFE)):
                    return "pca9685", f"MODE2=0x{mode2:02x}, PRE_SCALE={prescale} (heuristic)"
        return None


def scan_bus(bus: Any) -> dict[str, Any]:
    """Identify supported chips on one bus.

    Args:
        bus: a config bus value (``1``, ``"/dev/i2c-1"``; opened and closed here) or an
            smbus2-like object whose ``label`` attribute is its config value (``FakeSMBus``).

    Returns:
        ``{"bus": value, "devices": [{"address", "kind", "evidence"}], "errors": [...],
        "error": str | None, "errno": int | None}`` (``error``: the bus could not be opened).
    """
    owned = not hasattr(bus, "read_byte_data")
    label = bus if owned else getattr(bus, "label", None)
    result: dict[str, Any] = {"bus": label, "devices": [], "errors": [], "error": None, "errno": None}
    try:
        handle = open_bus(bus) if owned else bus
    except (RobotError, DriverError) as err:
        result["error"], result["errno"] = str(err), getattr(err, "errno", None)
        return result
    try:
        scan = _Scan(handle)
        for address in SCAN_ADDRESSES:
            found = scan.identify(address)
            if found:
                result["devices"].append({"address": address, "kind": found[0], "evidence": found[1]})
        result["errors"] = scan.errors
    finally:
        if owned:
            handle.close()
    pcas = [d for d in result["devices"] if d["kind"] == "pca9685"]
    if len(pcas) > 1:
        for d in pcas:
            if d["address"] == 0x70:
                d["kind"], d["evidence"] = "pca9685-allcall", "All-Call alias of the PCA9685(s) on this bus"
    return result


# --------------------------------------------------------------------------- cameras

def _read_line(*parts: str) -> str | None:
    try:
        with open(os.path.join(*parts), encoding="utf-8") as f:
            return f.readline().strip()
    except OSError:
        return None


def _numeric_key(path: str) -> tuple[str, int]:
    m = re.search(r"(\d+)$", path)
    return (path[: m.start()] if m else path, int(m.group(1)) if m else -1)


def list_cameras(video_dir: str = "/dev") -> list[dict[str, Any]]:
    """``video*`` nodes with ``v4l/by-id`` / ``v4l/by-path`` names; sysfs name and index on a real /dev."""
    by_id = _links(os.path.join(video_dir, "v4l", "by-id"))
    by_path = _links(os.path.join(video_dir, "v4l", "by-path"))
    real_dev = os.path.realpath(video_dir) == "/dev"
    cameras = []
    for node in sorted(glob.glob(os.path.join(video_dir, "video*")), key=_numeric_key):
        real = os.path.realpath(node)
        name = index = None
        if real_dev:
            sysfs = os.path.join("/sys/class/video4linux", os.path.basename(real))
            name, raw_index = _read_line(sysfs, "name"), _read_line(sysfs, "index")
            index = int(raw_index) if raw_index and raw_index.isdigit() else None
        cameras.append({"device": node, "by_id": by_id.get(real, []), "by_path": by_path.get(real, []),
                        "name": name, "index": index, "capture": index in (None, 0),
                        "access": os.access(real, os.R_OK | os.W_OK)})
    return cameras


# --------------------------------------------------------------------------- suggestion

def _suggest(serial: list[dict], buses: list[dict], cameras: list[dict]) -> dict[str, Any]:
    drivers: dict[str, Any] = {}
    for kind in ("roboclaw", "sabertooth", "line"):
        port = next((p for p in serial if p["motor_guess"] == kind), None)
        if port:
            drivers["motor"] = {"kind": kind, "port": (port["by_id"] or [port["device"]])[0]}
            break
    found = [(b["bus"], d) for b in buses if b["bus"] is not None for d in b["devices"]]
    for section, kinds in (("imu", ("bno055", "mpu6050")), ("power", ("ina226", "ina219")), ("servo", ("pca9685",))):
        for kind in kinds:
            hit = next(((bus, d) for bus, d in found if d["kind"] == kind), None)
            if hit:
                drivers[section] = {"kind": kind, "bus": hit[0], "address": hit[1]["address"]}
                break
    capture = [c for c in cameras if c["capture"]]
    if capture:
        drivers["cameras"] = [{"id": f"cam{i}", "source": (c["by_id"] or [c["device"]])[0]}
                              for i, c in enumerate(capture)]
    return drivers


def _notes(serial: list[dict], buses: list[dict], cameras: list[dict]) -> list[str]:
    notes = []
    if any(not p["access"] for p in serial):
        notes.append("some serial ports are not read/writable: add the user to group 'dialout'")
    for b in buses:
        if b["errno"] == errno_mod.ENOENT:
            notes.append(f"I2C bus {b['bus']} does not exist: enable it (Pi: dtparam=i2c_arm=on) or pick another")
        elif b["errno"] == errno_mod.EACCES:
            notes.append(f"I2C bus {b['bus']}: permission denied: add the user to group 'i2c'")
        elif b["error"]:
            notes.append(f"I2C bus {b['bus']}: {b['error']}")
        if b["errors"]:
            notes.append(f"I2C bus {b['bus']}: {len(b['errors'])} transfer errors other than NACK (wiring? speed?)")
    if any(not c["access"] for c in cameras):
        notes.append("some cameras are not read/writable: add the user to group 'video'")
    notes.append("INA219 and PCA9685 detection is heuristic; the motor kind is a guess from USB names "
                 "(probe never talks to serial devices): review before use")
    return notes


def probe(i2c_buses: list, serial_dir: str = "/dev", *, video_dir: str | None = None) -> dict[str, Any]:
    """Look for serial ports, supported I2C chips and cameras; suggest a ``drivers`` section.

    Args:
        i2c_buses: bus values (``1``, ``"/dev/i2c-1"``) or smbus2-like objects with a ``label``.
        serial_dir: where the tty nodes and ``serial/by-id`` live (``/dev``).
        video_dir: where ``video*`` and ``v4l/by-id`` live; defaults to ``serial_dir``.

    Returns:
        ``{"serial": [...], "i2c": [...], "cameras": [...], "drivers": {...}, "notes": [...]}``;
        ``drivers`` validates as :class:`agent.config.drivers.DriversConfig`.
    """
    serial = list_serial(serial_dir)
    buses = [scan_bus(b) for b in i2c_buses]
    cameras = list_cameras(video_dir or serial_dir)
    log.info("probe: %d serial ports, %d I2C chips, %d camera nodes", len(serial),
             sum(len(b["devices"]) for b in buses), len(cameras))
    return {"serial": serial, "i2c": buses, "cameras": cameras, "drivers": _suggest(serial, buses, cameras),
            "notes": _notes(serial, buses, cameras)}


def format_probe(result: dict[str, Any]) -> str:
    """Human-readable report of :func:`probe`'s result, ending with the suggested section as JSON."""
    lines = ["Serial ports:"]
    for p in result["serial"] or [None]:
        if p is None:
            lines.append("  (none)")
            continue
        usb = f" [{p['vid']:04x}:{p['pid']:04x}]" if p["vid"] is not None else ""
        lines.append(f"  {p['device']}  {p['description']}{usb}{'' if p['access'] else '  (no access)'}")
        lines += [f"    {name}" for name in p["by_id"] + p["aliases"]]
        if p["motor_guess"]:
            lines.append(f"    looks like: {p['motor_guess']}")
    for b in result["i2c"]:
        lines.append(f"I2C bus {b['bus']}:")
        if b["error"]:
            lines.append(f"  cannot scan: {b['error']}")
        for d in b["devices"]:
            lines.append(f"  0x{d['address']:02x}  {d['kind']:<16} {d['evidence']}")
        if not b["devices"] and not b["error"]:
            lines.append("  (no supported chip)")
        lines += [f"  error: {e['message']} (errno {e['errno']})" for e in b["errors"]]
    lines.append("Cameras:")
    for c in result["cameras"] or [None]:
        if c is None:
            lines.append("  (none)")
            continue
        kind = "" if c["capture"] else "  (metadata node)"
        lines.append(f"  {c['device']}  {c['name'] or ''}{kind}")
        lines += [f"    {name}" for name in c["by_id"]]
    lines.append('Suggested "drivers" section (review before use):')
    lines.append(json.dumps(result["drivers"], indent=2))
    lines += [f"note: {n}" for n in result["notes"]]
    return "\n".join(lines)
