"""Export an incident's window from the recordings into one MCAP file, and read it back as a timeline.

:func:`export` reads the recordings (agent.recorder.writer.read_messages: finished files, the file
being written up to its last whole chunk, files cut by a power loss) that overlap
``[t - before_s, t + after_s]`` around the incident and writes every message in that window, every
channel, in time order, into one finished MCAP file with the same schemas. :func:`timeline` reads
such a file back into what the console draws (agent.recorder.web).
"""

from __future__ import annotations

import base64
import io
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any, BinaryIO

from mcap.writer import CompressionType, Writer

from agent.recorder.incidents import Incident
from agent.recorder.writer import LIBRARY, PROFILE, ReadMessage, file_start_unix_s, read_messages, recordings


def window_messages(directory: Path, start_s: float, end_s: float) -> list[ReadMessage]:
    """Messages with a log time in ``[start_s, end_s]`` (Unix s) from every recording that may hold
    them, sorted by log time (stable: file order within one time)."""
    files = recordings(directory)
    starts = [file_start_unix_s(p) or 0.0 for p in files]
    lo, hi = int(start_s * 1e9), int(end_s * 1e9)
    out: list[ReadMessage] = []
    for i, path in enumerate(files):
        nxt = starts[i + 1] if i + 1 < len(files) else float("inf")
        if nxt < start_s - 1.0 or starts[i] > end_s + 1.0:   # a file ends where the next one starts
            continue
        try:
            with open(path, "rb") as fh:
                out.extend(m for m in read_messages(fh) if lo <= m.log_time_ns <= hi)
        except OSError:
            continue
    out.sort(key=lambda m: m.log_time_ns)
    return out


def write_mcap(stream: BinaryIO, messages: Iterable[ReadMessage]) -> int:
    """Write ``messages`` (with their schemas and topics) as one finished MCAP; returns the count."""
    writer = Writer(stream, chunk_size=1 << 20, compression=CompressionType.ZSTD)
    writer.start(PROFILE, LIBRARY)
    schema_ids: dict[tuple[str, str], int] = {}
    channel_ids: dict[str, int] = {}
    n = 0
    for m in messages:
        cid = channel_ids.get(m.topic)
        if cid is None:
            key = (m.schema_name, m.schema)
            sid = schema_ids.get(key)
            if sid is None:
                sid = schema_ids[key] = writer.register_schema(m.schema_name, "jsonschema", m.schema.encode())
            cid = channel_ids[m.topic] = writer.register_channel(m.topic, "json", sid)
        writer.add_message(cid, m.log_time_ns, m.data, m.log_time_ns, n)
        n += 1
    writer.finish()
    return n


def export(directory: Path, incident: Incident, before_s: float, after_s: float) -> bytes:
    """One MCAP file (bytes) of every recorded message within the incident's window."""
    msgs = window_messages(directory, incident.t_unix_s - before_s, incident.t_unix_s + after_s)
    buf = io.BytesIO()
    write_mcap(buf, msgs)
    return buf.getvalue()


def timeline(data: bytes, incident: Incident | None = None) -> dict[str, Any]:
    """What the console's timeline shows, read back from an exported MCAP file (bytes).

    Returns:
        ``t0`` (Unix s: the incident, or the first message), ``drive`` (rows ``[t, cmd_left_mps,
        cmd_right_mps, duty_left, duty_right, left_mps, right_mps]``, t relative to t0, s, at most
        ~600 rows), ``owners`` (``[t, source]`` changes), ``commands`` (``[t, source, command,
        verdict, reason]``), ``safety`` (``[t, stopped, watchdog, halt]``), ``incidents`` (dicts),
        ``links`` and ``devices`` (dicts with ``t``), ``frame`` (``{t, camera, jpeg_base64}``: the last
        camera frame at or before t0, else the first after), ``topics`` (topic -> message count).
    """
    msgs = list(read_messages(io.BytesIO(data)))
    t0 = incident.t_unix_s if incident is not None else (msgs[0].log_time_ns / 1e9 if msgs else 0.0)
    out: dict[str, Any] = {"t0": t0, "drive": [], "owners": [], "commands": [], "safety": [], "incidents": [],
                           "links": [], "devices": [], "frame": None, "topics": {}}
    drive: list[list[float]] = []
    best_before: tuple[float, str, str] | None = None
    first_after: tuple[float, str, str] | None = None
    for m in msgs:
        t = m.log_time_ns / 1e9 - t0
        out["topics"][m.topic] = out["topics"].get(m.topic, 0) + 1
        if m.topic.startswith("/camera/"):
            d = json.loads(m.data)
            if t <= 0.0:
                best_before = (t, d["frame_id"], d["data"])
            elif first_after is None:
                first_after = (t, d["frame_id"], d["data"])
            continue
        d = json.loads(m.data)
        if m.topic == "/drive":
            drive.append([round(t, 3), d["cmd_left_mps"], d["cmd_right_mps"], d["duty_left"], d["duty_right"],
                          d["left_mps"], d["right_mps"]])
        elif m.topic == "/arbitration":
            out["owners"].append([round(t, 3), d["active_source"]])
        elif m.topic == "/commands":
            out["commands"].append([round(t, 3), d["source"], d["command"], d["verdict"], d["reason"]])
        elif m.topic == "/safety":
            out["safety"].append([round(t, 3), d["stopped"], d["watchdog"], d["halt"]])
        elif m.topic in ("/incidents", "/links", "/devices"):
            out[m.topic[1:]].append({"t": round(t, 3), **{k: v for k, v in d.items() if k != "timestamp"}})
    step = max(1, len(drive) // 600)
    out["drive"] = drive[::step]
    frame = best_before or first_after
    if frame is not None:
        out["frame"] = {"t": round(frame[0], 3), "camera": frame[1], "jpeg_base64": frame[2]}
    if len(out["commands"]) > 2000:      # a stream at 50 Hz: keep verdict changes, not every repeat
        out["commands"] = out["commands"][-2000:]
    return out


def decode_frame(frame: dict[str, Any]) -> bytes:
    """The JPEG bytes of a timeline's ``frame``."""
    return base64.b64decode(frame["jpeg_base64"])
