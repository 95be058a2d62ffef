"""Replace a file atomically: write a temporary file beside it, then rename it over the target.

Readers never see half a file, and a process killed mid-write leaves the old file whole (and at
most the temporary file, which the caller's prefix and suffix make recognisable). Blocking: call
it off the event loop.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_text_atomically(path: Path, text: str, *, prefix: str, suffix: str = "", mode: int | None = None,
                          durable: bool = False) -> None:
    """Replace ``path`` with ``text`` (UTF-8) via a temporary file ``prefix...suffix`` in its directory.

    Args:
        mode: permission bits of the new file; None keeps the temporary file's 0600.
        durable: fsync the file before the rename and the directory after it (survives a power cut).

    Raises:
        OSError: the directory is missing or not writable; the temporary file is removed then.
    """
    fd, tmp = tempfile.mkstemp(prefix=prefix, suffix=suffix, dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    if durable:
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
