"""Reading a small file the agent trusts nothing about (params.json, the kept e-stop).

:func:`read_regular` reads only a regular file, looked at before it is opened and opened without
blocking: a FIFO, a socket or a device named where a file is expected would otherwise block the
open (a FIFO without a writer, for ever: the agent would neither start nor answer SIGTERM), read
without end (/dev/zero) or reset a board (opening a serial port toggles DTR).
"""

from __future__ import annotations

import errno
import os
import stat


def read_regular(path: str | os.PathLike[str], limit: int) -> bytes:
    """At most ``limit`` bytes of the regular file ``path``.

    Raises:
        FileNotFoundError: no such file. OSError: any other failure to open or read it, or it is not
            a regular file (``strerror`` says which kind it is instead: "a FIFO, not a regular file").
    """
    _require_regular(os.stat(path).st_mode, path)       # a device is never opened (a tty's open resets an Arduino)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        _require_regular(os.fstat(fd).st_mode, path)     # replaced between the two looks
        os.set_blocking(fd, True)
        chunks, left = [], limit
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 16))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _require_regular(mode: int, path: str | os.PathLike[str]) -> None:
    if not stat.S_ISREG(mode):
        raise OSError(errno.EINVAL, f"{_kind(mode)}, not a regular file", os.fspath(path))


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device")):
        if test(mode):
            return name
    return "not a file"
