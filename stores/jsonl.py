"""JSON Lines as ragteam writes and reads them: predictions, failures, traces, metrics.

One writer and one reader for every record file, so that no text a record holds can break it:

- **Writing** escapes the three characters that are line breaks to some readers but not to JSON
  (U+0085, U+2028, U+2029; ``str.splitlines`` splits on all three) and lone surrogates (which
  are not UTF-8). Every other character stays readable UTF-8. Each line ends with ``\\n``.
- **Reading** splits on ``\\n`` only. A last line without its newline that is not JSON was torn
  by a kill mid-write: it is reported as torn, not an error (its record is simply not there).
  A complete last line that merely lacks its newline is a record like any other. Any other bad
  line is a ``ValueError`` naming the file and line.
- **Appending** first repairs the tail — cuts a torn last line, or ends a complete one — so the
  next record never glues onto the previous line.
"""

from __future__ import annotations

import errno
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from ragteam.stores.atomic import replace_file
from ragteam.stores.user_files import GIB, read_regular_bytes

MAX_JSONL_BYTES = 8 * GIB  # read whole: a record file larger than this is not one of ours

# Line breaks JSON leaves raw inside strings, and lone surrogates (never valid UTF-8).
_UNSAFE = re.compile("[\u0085\u2028\u2029\ud800-\udfff]")


def dumps_line(record: Any) -> str:
    """``record`` as one JSON line (no trailing newline): UTF-8 text, with the characters that
    could split or corrupt a line written as ``\\uXXXX`` escapes (they read back unchanged)."""
    text = json.dumps(record, ensure_ascii=False)
    return _UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


@dataclass
class JsonLines:
    """The records of a JSON Lines file with the line each was read from."""

    path: Path
    records: list[tuple[int, Any]] = field(default_factory=list)
    torn_tail: bool = False   # the last line was cut short by a kill (dropped)


def read_lines(path: str | Path) -> JsonLines:
    """Every JSON value of ``path`` with its line number (blank lines skipped). Raises
    ``ValueError`` naming ``file:line`` for a bad line other than a torn last one."""
    path = Path(path)
    try:
        text = read_regular_bytes(path, MAX_JSONL_BYTES, "JSON Lines file").decode("utf-8")
    except UnicodeDecodeError as bad:
        raise ValueError(f"{path}: not UTF-8 text (byte offset {bad.start})") from None
    lines = text.split("\n")
    result = JsonLines(path)
    for line_no, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            result.records.append((line_no, json.loads(line)))
        except (ValueError, RecursionError) as error:  # ValueError: bad JSON, or a 4,300+ digit number
            if line_no == len(lines):  # no newline after it: a write cut short
                result.torn_tail = True
                continue
            raise ValueError(f"{path}:{line_no}: not a JSON line ({str(error)[:200]})") from None
    return result


def read_records(path: str | Path) -> list[Any]:
    """The JSON values of ``path`` in order (see ``read_lines``)."""
    return [record for _, record in read_lines(path).records]


def repair_tail(path: str | Path) -> None:
    """Make ``path`` end on a line boundary before appending: a torn last line (no newline, not
    JSON) is cut; a complete last line without its newline gets one."""
    path = Path(path)
    if not path.exists() or path.stat().st_size == 0:
        return
    with _open_own(path, os.O_RDWR) as handle:
        handle.seek(-1, os.SEEK_END)
        if handle.read(1) == b"\n":
            return
        handle.seek(0)
        data = handle.read()
        start = data.rfind(b"\n") + 1
        try:
            json.loads(data[start:].decode("utf-8"))
        except (ValueError, RecursionError):
            handle.truncate(start)
            return
        handle.seek(0, os.SEEK_END)
        handle.write(b"\n")


def append_records(path: str | Path, records: Iterable[Any]) -> None:
    """Append records, one line each, after repairing the file's tail."""
    repair_tail(path)
    with _open_own(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT) as handle:
        handle.write("".join(dumps_line(r) + "\n" for r in records).encode("utf-8"))


def append_text(path: str | Path, text: str) -> None:
    """``text`` appended to ``path`` as it is (no tail repair), never through a symlink."""
    with _open_own(Path(path), os.O_WRONLY | os.O_APPEND | os.O_CREAT) as handle:
        handle.write(text.encode("utf-8"))


def _open_own(path: Path, flags: int):
    """A record file opened for writing in place, never through a symlink (one swapped in after
    the folder was checked is refused with ``ELOOP``, not written through)."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise ValueError(f"{path} is a symlink; ragteam appends only to files of its own") from None
        raise
    return os.fdopen(fd, "rb+" if flags & os.O_RDWR else "ab")


def write_records(path: str | Path, records: Iterable[Any]) -> None:
    """Replace ``path`` with these records, atomically (a temporary file renamed over it, so a
    kill leaves the old file or the new one, never half of either)."""
    replace_file(path, (dumps_line(r) + "\n" for r in records))


def is_complete(path: str | Path) -> bool:
    """True when every line of ``path`` is JSON and the file ends with a newline (or is empty)."""
    try:
        data = Path(path).read_bytes()
        if data and not data.endswith(b"\n"):
            return False
        read_lines(path)
    except (OSError, ValueError):
        return False
    return True
