"""The recorder's files: chunks, rotation, the size bound, a cut at any byte, a full disk.

A power loss is simulated by cutting a finished file at arbitrary bytes; a full disk by a real small
tmpfs (root may mount one; skipped where mounting is not allowed) and, everywhere, by an
``OSError(ENOSPC)`` raised part way through a chunk by the writer's own file object.
"""

from __future__ import annotations

import contextlib
import errno
import io
import json
import random
import subprocess
from pathlib import Path

import pytest
from mcap.reader import make_reader

from agent.recorder import channels
from agent.recorder.writer import RotatingWriter, _File, read_messages, recordings

T0 = 1_796_000_000.0


def msg(i: int) -> bytes:
    return channels.encode({"timestamp": channels.stamp(T0 + i * 0.01), "i": i, "pad": f"{i:08d}" * 8})


def writer(d: Path, **kw) -> RotatingWriter:
    args = {"max_bytes": 64 << 20, "file_bytes": 16 << 20, "chunk_bytes": 4096, "chunk_max_s": 60.0}
    return RotatingWriter(d, **{**args, **kw})


def mcap_reads(path: Path) -> list[int]:
    """The ``i`` of every message, through the mcap library's own reader (raises if it rejects the file)."""
    with open(path, "rb") as fh:
        return [json.loads(m.data)["i"] for _, _, m in make_reader(fh).iter_messages(log_time_order=False)]


def test_a_file_cut_at_any_byte_reads_back_up_to_its_last_whole_chunk(tmp_path):
    w = writer(tmp_path)
    for i in range(3000):
        assert w.write("/drive", T0 + i * 0.01, msg(i))
    w.close()
    [path] = recordings(tmp_path)
    data = path.read_bytes()
    with open(path, "rb") as fh:
        chunks = make_reader(fh).get_summary().chunk_indexes
    assert len(chunks) > 20
    assert mcap_reads(path) == list(range(3000))
    rng = random.Random(23)
    cuts = [rng.randrange(len(data)) for _ in range(60)]
    cuts += [c.chunk_start_offset + c.chunk_length + d for c in chunks[:10] for d in (-1, 0, 1)]
    for cut in cuts:
        got = [json.loads(m.data)["i"] for m in read_messages(io.BytesIO(data[:cut]))]
        whole = [c for c in chunks if c.chunk_start_offset + c.chunk_length <= cut]
        want = sum(1 for i in range(3000) if whole and int((T0 + i * 0.01) * 1e9) <= whole[-1].message_end_time)
        assert got == list(range(want)), (cut, len(got), want)


def test_files_rotate_and_the_oldest_go_first_to_keep_the_bound(tmp_path):
    w = writer(tmp_path, max_bytes=400_000, file_bytes=100_000)
    for i in range(40_000):
        w.write("/drive", T0 + i * 0.01, msg(i))
    w.close()
    files = recordings(tmp_path)
    assert len(files) >= 2 and w.files_deleted > 0
    assert sum(p.stat().st_size for p in files) <= 400_000 + 100_000   # the bound, plus the chunk that crossed it
    kept = [i for p in files for i in mcap_reads(p)]                  # every kept file is a finished MCAP
    assert kept == list(range(kept[0], 40_000))                        # the newest data, none lost in between


def test_a_write_error_mid_chunk_degrades_once_and_leaves_a_file_the_reader_accepts(tmp_path, monkeypatch, caplog):
    w = writer(tmp_path)
    for i in range(500):
        w.write("/drive", T0 + i * 0.01, msg(i))
    w.flush()
    real = _File.write

    def full(self, data):       # the disk fills part way through the next chunk; cutting it back frees
        if len(data) <= 64:     # room for the file's 50-byte tail (DataEnd, Footer, magic)
            return real(self, data)
        real(self, bytes(data)[: len(data) // 2])
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(_File, "write", full)
    results = [w.write("/drive", T0 + i * 0.01, msg(i)) for i in range(500, 2000)]
    w.flush()
    w.close()
    monkeypatch.setattr(_File, "write", real)
    assert results[0] is True and results[-1] is False
    assert "No space left" in w.degraded
    assert sum("recording stopped" in r.getMessage() for r in caplog.records) == 1     # logged once
    [path] = recordings(tmp_path)
    assert mcap_reads(path) == list(range(500))                         # the mcap reader accepts it whole
    assert [json.loads(m.data)["i"] for m in read_messages(open(path, "rb"))] == list(range(500))


@contextlib.contextmanager
def small_tmpfs(path: Path, size: str):
    path.mkdir()
    try:
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True)
    except OSError as err:
        pytest.skip(f"cannot mount a tmpfs here: {err}")
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def test_a_real_full_disk_degrades_and_every_file_left_reads(tmp_path):
    with small_tmpfs(tmp_path / "disk", "256k") as disk:
        w = writer(disk, max_bytes=64 << 20, file_bytes=64 << 20)
        i = 0
        while not w.degraded and i < 200_000:
            w.write("/drive", T0 + i * 0.01, msg(i))
            i += 1
        assert "No space left" in w.degraded, i
        w.close()
        for path in recordings(disk):
            got = mcap_reads(path)
            assert got == list(range(len(got))) and len(got) > 100
