"""Replacing a file whole: a kill leaves the old file or the new one, and no file of a user's
beside it is touched.

The new content goes to a temporary file created exclusively (``O_EXCL``: it cannot be an existing
file, nor a symlink planted to be written through) under a random hidden name in the same folder,
written through its open descriptor, then renamed over the target (a rename replaces a symlink at
the target itself, never what it points to). A fixed ``NAME.tmp`` was a user's file to destroy,
or a planted link to write through.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Iterable

_UMASK = os.umask(0)
os.umask(_UMASK)  # read once: the files get the mode a plain open() would give them


def replace_file(path: str | Path, content: str | bytes | Iterable[str]) -> None:
    """``path`` replaced by ``content`` (text as UTF-8; an iterable of strings is written piece by
    piece, for a large file) as the module docstring says."""
    path = Path(path)
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".partial")
    try:
        os.fchmod(fd, 0o666 & ~_UMASK)
        with os.fdopen(fd, "wb") as handle:
            if isinstance(content, (str, bytes)):
                handle.write(content.encode("utf-8") if isinstance(content, str) else content)
            else:
                for piece in content:
                    handle.write(piece.encode("utf-8"))
        os.replace(temporary, path)
    except BaseException:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise


def save_figure(figure, path: str | Path, **options) -> Path:
    """A matplotlib ``figure`` saved to ``path`` through ``replace_file`` (its format from the
    suffix): ``savefig`` given a path reopens it, so a symlink swapped in after a check would be
    written through. ``options`` go to ``savefig`` (e.g. ``dpi``)."""
    import io

    path = Path(path)
    buffer = io.BytesIO()
    figure.savefig(buffer, format=path.suffix.lstrip(".") or "png", **options)
    replace_file(path, buffer.getvalue())
    return path
