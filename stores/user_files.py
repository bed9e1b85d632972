"""Reading a file a user named, without hanging or exhausting memory.

A path can name a FIFO (opening it waits for a writer: a Studio context naming one hung the whole
server), a device (``/dev/zero`` never ends) or a file far larger than anything of its kind. Here
the path is opened without blocking, checked to be a regular file through the open descriptor
(no window for a swap between the check and the read), and read only up to a cap.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import BinaryIO

GIB = 1 << 30


def open_regular(path: str | Path, what: str = "file", follow: bool = True) -> BinaryIO:
    """``path`` opened for binary reading, after checking through the open descriptor that it is a
    regular file: a ``ValueError`` naming the path when it is a directory, a FIFO, a device or a
    socket (or, with ``follow=False``, a symlink). A missing file is ``FileNotFoundError``."""
    path = Path(path)
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)  # non-blocking: a FIFO opens without waiting for a writer
    except OSError as error:
        if error.errno == errno.ELOOP and not follow:
            raise ValueError(f"{path} is a symlink; ragteam reads a {what} only from a file of its own") from None
        raise
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        kind = "a directory" if stat.S_ISDIR(mode) else "not a regular file (a FIFO, device or socket)"
        raise ValueError(f"{path} is {kind}; give a {what} on disk")
    return os.fdopen(fd, "rb")


def read_regular_bytes(path: str | Path, limit: int, what: str = "file", follow: bool = True) -> bytes:
    """The bytes of ``path`` (``open_regular``), at most ``limit`` of them: a ``ValueError``
    naming the path when the file is larger (``what`` names its kind in the message)."""
    with open_regular(path, what, follow) as handle:
        size = os.fstat(handle.fileno()).st_size
        if size > limit:
            raise ValueError(f"{path}: {size:,} bytes, more than a {what} may hold ({limit:,}); "
                             "is it the right file?")
        data = handle.read(limit + 1)
    if len(data) > limit:  # it grew while being read
        raise ValueError(f"{path}: more than a {what} may hold ({limit:,} bytes)")
    return data
