"""One writer per output folder: two commands writing into one folder at once interleave their
appends and renames (two evaluations into one ``--out`` left 439 records for 400 questions, and
the folder was refused from then on), so the second one is refused before it writes anything.

The lock is ``fcntl.flock`` on a ``.lock`` file in the folder: the kernel releases it when its
holder exits, however it exits (a killed run leaves no stale lock to clear by hand). The file
holds the holder's pid, for the message only.
"""

from __future__ import annotations

import errno
import fcntl
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

LOCK_FILE = ".lock"


class FolderBusyError(ValueError):
    """Another process (or another writer in this one) holds the folder; nothing was written."""


@contextmanager
def exclusive(folder: str | Path, what: str) -> Iterator[Path]:
    """Hold ``folder``'s lock for the block (``what``: the writer, for the message, e.g.
    ``"evaluation"``); a ``FolderBusyError`` naming the folder and the holder's pid when another
    writer holds it. The lock file is opened without following a link, so a planted
    ``.lock`` symlink is refused, never written through."""
    folder = Path(folder)
    path = folder / LOCK_FILE
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise ValueError(f"{path} is a symlink; ragteam will not lock through it") from None
        raise
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            raise FolderBusyError(f"{folder}: another {what} is writing here (pid {holder}); wait for it to "
                                  "end or choose another folder") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield folder
    finally:
        os.close(fd)  # closing the descriptor releases the lock
