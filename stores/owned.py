"""Output folders ragteam owns: it writes, replaces and deletes only inside folders it created.

A folder ragteam creates for its output (an eval, a training run, an exported model, an index)
carries a marker file, ``.ragteam``, naming what it is. Anything else under an output path —
a user's folder with files in it, a folder of another kind, a symlink ragteam did not make — is
refused with one line naming the path, before any work starts. An empty folder may be claimed.

Folders written by ragteam versions before the marker are recognised by their contents (every
entry a name that kind writes, plus its signature file) and adopted, so old runs still resume.
"""

from __future__ import annotations

import fnmatch
import json
import os
from dataclasses import dataclass
from pathlib import Path

MARKER = ".ragteam"


class ForeignPathError(ValueError):
    """An output path holds something that is not ragteam's; nothing was written or deleted."""


@dataclass(frozen=True)
class Kind:
    """A kind of output folder: its name, the entries it may hold, and the one that proves it."""

    name: str
    entries: tuple[str, ...]     # names (fnmatch patterns) this kind writes at its top level
    signature: tuple[str, ...]   # at least one of these must exist for an unmarked folder to be ours


EVAL = Kind("eval", ("summary.md", "*.png", "*"), ("*/predictions.jsonl",))
TRAINING = Kind("training run", ("metrics.jsonl", "metrics.jsonl.tmp", "checkpoints", "tensorboard", "hf",
                                 "hf.partial", "learning_curve.png", "run_config.json"),
                ("metrics.jsonl", "checkpoints/latest"))
MODEL = Kind("exported model", ("*.json", "*.safetensors", "*.txt", "*.jinja", "value_head.pt"),
             ("value_head.pt",))


def owner(path: Path) -> str | None:
    """The kind named by ``path``'s marker, or None when it has none (or an unreadable one)."""
    try:
        return json.loads((path / MARKER).read_text(encoding="utf-8")).get("kind")
    except (OSError, ValueError, AttributeError):
        return None


def _legacy(path: Path, kind: Kind) -> bool:
    """An unmarked folder that an older ragteam wrote: only its kind's names, and its signature."""
    names = [p.name for p in path.iterdir()]
    return (all(any(fnmatch.fnmatch(n, pattern) for pattern in kind.entries) for n in names)
            and any(any(path.glob(sig)) for sig in kind.signature))


def check_owned(path: str | Path, kind: Kind, flag: str = "--out") -> Path:
    """Refuse (``ForeignPathError``) unless ``path`` is absent, an empty folder, or a folder of
    ragteam's of this kind. Writes nothing: call it before any work."""
    if not str(path).strip():
        raise ForeignPathError(f"{flag}: empty path; give a folder")
    path = Path(path)
    if path.is_symlink():
        raise ForeignPathError(f"{path} is a symlink; ragteam writes only into folders it created "
                               f"(give {flag} a real folder)")
    if not path.exists():
        for parent in path.parents:
            if parent.exists() and not parent.is_dir():
                raise ForeignPathError(f"{flag} {path}: {parent} is a file, not a folder")
        return path
    if not path.is_dir():
        raise ForeignPathError(f"{flag} {path} is a file; give a folder")
    found = owner(path)
    if found == kind.name or (found is None and (not any(path.iterdir()) or _legacy(path, kind))):
        return path
    what = f"a ragteam {found} folder" if found else "a folder ragteam did not create"
    raise ForeignPathError(f"{path} is {what}, not a ragteam {kind.name} folder; refusing to write "
                           f"into it: choose another {flag} or remove it yourself")


def claim(path: str | Path, kind: Kind, flag: str = "--out") -> Path:
    """``check_owned``, then create the folder if needed and mark it as ragteam's ``kind``."""
    path = check_owned(path, kind, flag)
    path.mkdir(parents=True, exist_ok=True)
    mark(path, kind)
    return path


def mark(path: Path, kind: Kind) -> None:
    """Mark a folder ragteam just created (e.g. a staging folder) as its ``kind``."""
    if owner(path) != kind.name:
        (path / MARKER).write_text(json.dumps({"kind": kind.name}) + "\n", encoding="utf-8")


def own_file(path: str | Path) -> Path:
    """A file ragteam is about to write inside one of its folders: never through a symlink."""
    path = Path(path)
    if path.is_symlink():
        raise ForeignPathError(f"{path} is a symlink ragteam did not make; refusing to write "
                               "through it (remove it)")
    if path.is_dir():
        raise ForeignPathError(f"{path} is a folder where ragteam writes a file; remove it")
    return path


def write_text(path: Path, text: str) -> None:
    """Replace a file of ragteam's atomically: written beside it, then renamed over it (a rename
    replaces a symlink itself, never what it points to)."""
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(text, encoding="utf-8")
    os.replace(temporary, path)


def own_subdir(path: str | Path) -> Path:
    """A folder inside one of ragteam's own, created if absent; never a symlink or a file."""
    path = Path(path)
    if path.is_symlink() or (path.exists() and not path.is_dir()):
        raise ForeignPathError(f"{path} is not a folder ragteam made; refusing to write into it "
                               "(remove it)")
    path.mkdir(parents=True, exist_ok=True)
    return path
