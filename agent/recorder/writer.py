"""Rotating, size-bounded, chunked MCAP files (the ``mcap`` library), and a reader that survives a cut.

:class:`RotatingWriter` (used on the recorder thread only) writes ``rec-<start>.mcap`` files under a
directory: each at most ``file_bytes``, all together at most ``max_bytes`` (the oldest file deleted
first), messages gathered into zstd chunks written whole once they hold ``chunk_bytes`` or their
oldest message is ``chunk_max_s`` old. Every chunk goes to the file with plain ``os.write`` calls
through :class:`_File`, which remembers the offset after the last whole record: a write error
(``ENOSPC`` on a full disk, ``EIO`` on a failing SD card) cuts the file back to that offset and ends it
with a valid MCAP tail (DataEnd, Footer, magic), then the writer is *degraded*: it writes nothing more,
logs once, and says why in :attr:`RotatingWriter.degraded`. Nothing of this reaches the caller.

:func:`read_messages` reads any file this writer left, finished or not: a file cut at an arbitrary
byte (a power loss) reads back up to its last whole chunk.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from mcap.data_stream import RecordBuilder
from mcap.exceptions import McapError
from mcap.records import Channel, DataEnd, Footer, Message, Schema
from mcap.stream_reader import StreamReader
from mcap.writer import MCAP0_MAGIC as MAGIC, CompressionType, Writer

from agent.recorder import channels

log = logging.getLogger(__name__)

PROFILE = ""   # no ROS profile: JSON messages with JSON schemas
LIBRARY = "robot-agent recorder"
FILE_RE = re.compile(r"^rec-(\d{8}T\d{6})-(\d{3})Z?(?:-(\d+))?\.mcap$")


class _File:
    """An append-only file written with ``os.write`` (no buffer of its own) that knows its offset and
    the offset after the last record boundary (:meth:`mark`)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        self.pos = 0
        self.good = 0
        self.written = 0

    def write(self, data: bytes | memoryview) -> int:
        view = memoryview(data)
        while view:
            n = os.write(self.fd, view)
            view = view[n:]
            self.pos += n
            self.written += n
        return len(data)

    def tell(self) -> int:
        return self.pos

    def flush(self) -> None:
        pass

    def mark(self) -> None:
        self.good = self.pos

    def cut(self) -> None:
        """Cut the file back to the last boundary and end it with a valid MCAP tail (DataEnd, Footer
        without summary, magic); a failure of the tail leaves the file cut at the boundary."""
        os.ftruncate(self.fd, self.good)
        os.lseek(self.fd, self.good, os.SEEK_SET)
        self.pos = self.good
        tail = RecordBuilder()
        DataEnd(0).write(tail)
        Footer(summary_start=0, summary_offset_start=0, summary_crc=0).write(tail)
        try:
            self.write(tail.end() + MAGIC)
        except OSError:
            os.ftruncate(self.fd, self.good)

    def close(self) -> None:
        os.close(self.fd)


@dataclass
class _Open:
    file: _File
    writer: Writer
    channel_ids: dict[str, int]
    chunk_started: float | None = None


class RotatingWriter:
    """Write JSON messages on topics into rotating MCAP files; see the module docstring.

    Args:
        directory: where the files go (created when missing).
        max_bytes: all ``rec-*.mcap`` files together at most this many bytes (oldest deleted first).
        file_bytes: start a new file once the current one is this long.
        chunk_bytes: write a chunk once it holds this many bytes (uncompressed).
        chunk_max_s: ... or once its first message is this old, s (:meth:`poll`).
        clock: monotonic clock, s. wall: Unix clock, s (file names).

    Attributes:
        degraded: "" while writing; else why it stopped (``"write failed: [Errno 28] ..."``).
        bytes_written: bytes written to files since start. messages: messages accepted.
        files_deleted: files deleted to keep ``max_bytes``.
    """

    def __init__(self, directory: Path, *, max_bytes: int, file_bytes: int, chunk_bytes: int,
                 chunk_max_s: float, clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time) -> None:
        self.directory = Path(directory)
        self.max_bytes = max_bytes
        self.file_bytes = min(file_bytes, max_bytes)
        self.chunk_bytes = chunk_bytes
        self.chunk_max_s = chunk_max_s
        self._clock, self._wall = clock, wall
        self._open: _Open | None = None
        self._closed_bytes = 0
        self.degraded = ""
        self.bytes_written = 0
        self.messages = 0
        self.files_deleted = 0

    @property
    def current(self) -> Path | None:
        """The file being written, or None."""
        return self._open.file.path if self._open is not None else None

    def write(self, topic: str, t_unix_s: float, data: bytes) -> bool:
        """Add one message (JSON bytes) on ``topic`` at Unix time ``t_unix_s``; False when degraded."""
        if self.degraded:
            return False
        return self._guard(self._write, topic, t_unix_s, data)

    def poll(self) -> None:
        """Write the chunk in progress once it is ``chunk_max_s`` old; rotate a full file."""
        if self.degraded or self._open is None:
            return
        self._guard(self._poll)

    def flush(self) -> None:
        """Write the chunk in progress now (an export is about to read the file)."""
        if not self.degraded and self._open is not None:
            self._guard(self._flush_chunk)

    def close(self) -> None:
        """Finish the current file (summary, footer); idempotent."""
        if self._open is None:
            return
        if not self.degraded:
            self._guard(self._finish)
        if self._open is not None:
            self._drop()

    # ------------------------------------------------------------------ internals
    def _guard(self, fn: Callable[..., Any], *args: Any) -> bool:
        try:
            fn(*args)
            if self._open is not None:
                self._open.file.mark()
            return True
        except OSError as err:
            self._fail(err)
            return False

    def _fail(self, err: OSError) -> None:
        self.degraded = f"write failed: {err}"
        kept = f"{self.current} kept up to its last whole chunk" if self.current is not None else "no file was open"
        log.error("recorder: %s; recording stopped (the robot is not affected); %s", self.degraded, kept,
                  extra={"fault": "recorder"})
        if self._open is not None:
            with contextlib.suppress(OSError):
                self._open.file.cut()
            self._drop()

    def _drop(self) -> None:
        assert self._open is not None
        with contextlib.suppress(OSError):
            self._open.file.close()
        self._closed_bytes += self._open.file.pos
        self.bytes_written += self._open.file.written
        self._open = None

    def _start(self) -> _Open:
        self.directory.mkdir(parents=True, exist_ok=True)
        now = self._wall()
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(now)) + f"-{int(now * 1000) % 1000:03d}Z"
        path = self.directory / f"rec-{stamp}.mcap"
        n = 0
        while path.exists():
            n += 1
            path = self.directory / f"rec-{stamp}-{n}.mcap"
        file = _File(path)
        try:
            writer = Writer(file, chunk_size=self.chunk_bytes, compression=CompressionType.ZSTD)
            writer.start(PROFILE, LIBRARY)
        except BaseException:
            file.close()
            with contextlib.suppress(OSError):
                path.unlink()     # not even a header: leave no file a reader would reject
            raise
        self._open = _Open(file, writer, {})
        file.mark()
        self._trim()
        return self._open

    def _channel(self, op: _Open, topic: str) -> int:
        cid = op.channel_ids.get(topic)
        if cid is None:
            name, schema = channels.schema_for(topic)
            sid = op.writer.register_schema(name, "jsonschema", json.dumps(schema).encode())
            cid = op.writer.register_channel(topic, "json", sid)
            op.channel_ids[topic] = cid
        return cid

    def _write(self, topic: str, t_unix_s: float, data: bytes) -> None:
        op = self._open or self._start()
        cid = self._channel(op, topic)
        ns = max(0, int(t_unix_s * 1e9))
        if op.chunk_started is None:
            op.chunk_started = self._clock()
        before = op.file.pos
        op.writer.add_message(cid, ns, data, ns)
        self.messages += 1
        if op.file.pos != before:      # the writer wrote a full chunk
            op.chunk_started = None
            if op.file.pos >= self.file_bytes:
                self._rotate()

    def _poll(self) -> None:
        op = self._open
        if op is not None and op.chunk_started is not None and self._clock() - op.chunk_started >= self.chunk_max_s:
            self._flush_chunk()
            if op.file.pos >= self.file_bytes:
                self._rotate()

    def _flush_chunk(self) -> None:
        op = self._open
        if op is not None:
            op.writer.flush()
            op.chunk_started = None

    def _finish(self) -> None:
        op = self._open
        if op is not None:
            op.writer.finish()
            op.file.mark()

    def _rotate(self) -> None:
        self._finish()
        self._drop()

    def _trim(self) -> None:
        """Delete the oldest recordings until all of them fit ``max_bytes`` (the open one never)."""
        files = recordings(self.directory)
        current = self.current
        total = sum(_size(p) for p in files)
        for path in files:
            if total <= self.max_bytes - self.file_bytes or path == current:
                break
            size = _size(path)
            try:
                path.unlink()
            except OSError as err:
                log.warning("recorder: cannot delete old recording %s: %s", path, err)
                continue
            total -= size
            self.files_deleted += 1


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def recordings(directory: Path) -> list[Path]:
    """The ``rec-*.mcap`` files in ``directory``, oldest first (by the start time in their names)."""
    try:
        names = [p for p in Path(directory).iterdir() if FILE_RE.match(p.name)]
    except OSError:
        return []
    return sorted(names, key=lambda p: p.name)


def file_start_unix_s(path: Path) -> float | None:
    """The Unix time a recording started, from its name; None for another name."""
    m = FILE_RE.match(Path(path).name)
    if m is None:
        return None
    import calendar
    return calendar.timegm(time.strptime(m.group(1), "%Y%m%dT%H%M%S")) + int(m.group(2)) / 1000.0


@dataclass(frozen=True)
class ReadMessage:
    """One message read back: topic, schema name, schema (JSON text), log time (ns), data (bytes)."""

    topic: str
    schema_name: str
    schema: str
    log_time_ns: int
    data: bytes


def read_messages(stream: BinaryIO) -> Iterator[ReadMessage]:
    """Every message of an MCAP stream in file order, up to its last whole record.

    A file cut at any byte (a power loss, a full disk) ends the iteration at its last whole chunk
    (chunk CRCs are checked); a finished file reads whole. Never raises for a cut file.
    """
    reader = StreamReader(stream, skip_magic=False, emit_chunks=False, validate_crcs=True)
    schemas: dict[int, Schema] = {}
    chans: dict[int, Channel] = {}
    records = reader.records
    while True:
        try:
            record = next(records)
        except StopIteration:
            return
        except (McapError, EOFError, ValueError, KeyError, OSError, Exception):  # noqa: BLE001 - a cut file
            return
        if isinstance(record, Schema):
            schemas[record.id] = record
        elif isinstance(record, Channel):
            chans[record.id] = record
        elif isinstance(record, Message):
            ch = chans.get(record.channel_id)
            if ch is None:
                continue
            sc = schemas.get(ch.schema_id)
            yield ReadMessage(ch.topic, sc.name if sc else "", sc.data.decode() if sc else "",
                              record.log_time, record.data)
