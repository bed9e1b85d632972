"""Output folders ragteam owns: it writes, replaces and deletes only inside folders it created.

A folder ragteam creates for its output (an eval, a training run, an exported model, an index)
carries a marker file, ``.ragteam``, naming what it is. Anything else under an output path —
a user's folder with files in it, a folder of another kind, a symlink ragteam did not make — is
refused with one line naming the path, before any work starts. An empty folder may be claimed.

Folders written by ragteam versions before the marker are recognised by their contents (every
entry a name that kind writes, plus its signature file; an eval folder's records must be eval's own)
and adopted, so old runs still resume.

A single output file (``run --report``, ``--trace-out``, ``compare --out``) is only ever created:
one that exists already is refused (``new_file``). Names that become folders under an output
(graph and method names) are labels, never paths (``check_label``).
"""

from __future__ import annotations

import fnmatch
import json
import re
from dataclasses import dataclass
from pathlib import Path

from ragteam.stores.atomic import replace_file
from ragteam.stores.user_files import read_regular_bytes

MARKER = ".ragteam"
MAX_MARKER_BYTES = 64 * 1024


class ForeignPathError(ValueError):
    """An output path holds something that is not ragteam's; nothing was written or deleted."""


@dataclass(frozen=True)
class Kind:
    """A kind of output folder: its name, the entries it may hold, and the one that proves it."""

    name: str
    entries: tuple[str, ...]     # names (fnmatch patterns) this kind writes at its top level
    signature: tuple[str, ...]   # at least one of these must exist for an unmarked folder to be ours


# An eval folder is never adopted unmarked: one an older ragteam wrote looks exactly like a user's
# folder made to look like one (records with eval's keys, a traces/ folder, their own summary.md,
# which a rerun would replace); the refusal says how to mark an old one by hand.
EVAL = Kind("eval", (), ())
TRAINING = Kind("training run", ("metrics.jsonl", "metrics.jsonl.tmp", "checkpoints", "tensorboard", "hf",
                                 "hf.partial", "learning_curve.png", "run_config.json"),
                ("metrics.jsonl", "checkpoints/latest"))
DRAWINGS = Kind("drawings", ("*.mmd", "*.svg"), ())
RECIPE = Kind("learning recipe", ("index", "eval_*", "round*", "ppo", "ppo_options.yaml", "report.md",
                                  "report.json", "compare_*.md", "*.png"), ("eval_before",))
STUDIO_TRACES = Kind("studio traces", (), ())
GPU_WHEELS = Kind("gpu wheels", (), ())
MODEL = Kind("exported model", ("*.json", "*.safetensors", "*.txt", "*.jinja", "value_head.pt"),
             ("value_head.pt",))


def owner(path: Path) -> str | None:
    """The kind named by ``path``'s marker, or None when it has none (or an unreadable one)."""
    try:  # a marker is a few bytes of ragteam's own: never a link, a FIFO or nested past parsing
        marker = read_regular_bytes(path / MARKER, MAX_MARKER_BYTES, "ragteam marker", follow=False)
        return json.loads(marker.decode("utf-8")).get("kind")
    except (OSError, ValueError, AttributeError, RecursionError):
        return None


def _legacy(path: Path, kind: Kind) -> bool:
    """An unmarked folder that an older ragteam wrote: its kind's own test, else only its kind's
    names and its signature."""
    names = [p.name for p in path.iterdir()]
    return (bool(kind.signature)
            and all(any(fnmatch.fnmatch(n, pattern) for pattern in kind.entries) for n in names)
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
    hint = (f" (an eval folder of an older ragteam: mark it with echo '{{\"kind\": \"eval\"}}' > {path / MARKER})"
            if found is None and kind is EVAL else "")
    raise ForeignPathError(f"{path} is {what}, not a ragteam {kind.name} folder; refusing to write "
                           f"into it: choose another {flag} or remove it yourself{hint}")


def claim(path: str | Path, kind: Kind, flag: str = "--out") -> Path:
    """``check_owned``, then create the folder if needed and mark it as ragteam's ``kind``."""
    path = check_owned(path, kind, flag)
    path.mkdir(parents=True, exist_ok=True)
    mark(path, kind)
    return path


def mark(path: Path, kind: Kind) -> None:
    """Mark a folder ragteam just created (e.g. a staging folder) as its ``kind``."""
    if owner(path) != kind.name:
        write_text(path / MARKER, json.dumps({"kind": kind.name}) + "\n")


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
    """Replace a file of ragteam's atomically (``stores.atomic.replace_file``)."""
    replace_file(path, text)


def own_subdir(path: str | Path) -> Path:
    """A folder inside one of ragteam's own, created if absent; never a symlink or a file."""
    path = Path(path)
    if path.is_symlink() or (path.exists() and not path.is_dir()):
        raise ForeignPathError(f"{path} is not a folder ragteam made; refusing to write into it "
                               "(remove it)")
    path.mkdir(parents=True, exist_ok=True)
    return path


_LABEL = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]{0,127}")


def is_label(name: object) -> bool:
    """Whether ``name`` may name a folder under an output (see ``check_label``)."""
    return isinstance(name, str) and bool(_LABEL.fullmatch(name))


def check_label(name: object, what: str = "graph name") -> str:
    """``name`` if it may name a folder under an output (letters, digits, ``_ . + -``, not
    starting with a dot, at most 128 characters): a label, never a path (``..``, ``/x``)."""
    if not is_label(name):
        raise ValueError(f"{what} {name!r} is not a plain name: use letters, digits, '_', '.', '+' "
                         "and '-', not starting with '.' (it names a folder of ragteam's output)")
    return name


def within(root: str | Path, path: str | Path) -> Path:
    """``path`` if it stays inside ``root`` once resolved (symlinks and ``..`` followed)."""
    root, path = Path(root).resolve(), Path(path)
    resolved = (root / path).resolve()
    if resolved != root and root not in resolved.parents:
        raise ForeignPathError(f"{path} leaves {root}; ragteam writes only inside it")
    return resolved


def new_file(path: str | Path | None, flag: str) -> Path | None:
    """A single output file (``--report``, ``--trace-out``…), checked before any work: a new
    path whose folders are created if missing. An existing file, a symlink or a folder there is
    refused, so nothing of a user's is ever replaced."""
    if path is None:
        return None
    if not str(path).strip():
        raise ForeignPathError(f"{flag}: empty path; give a file path")
    path = Path(path)
    if path.is_symlink() or path.exists():
        what = "a symlink" if path.is_symlink() else "a folder" if path.is_dir() else "an existing file"
        raise ForeignPathError(f"{flag} {path} is {what}; ragteam writes only new files "
                               "(choose another path or remove it yourself)")
    for parent in path.parents:
        if parent.is_symlink() and not parent.exists():
            raise ForeignPathError(f"{flag} {path}: {parent} is a broken symlink")
        if parent.exists():
            if not parent.is_dir():
                raise ForeignPathError(f"{flag} {path}: {parent} is a file, not a folder")
            break
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def create_text(path: Path, text: str) -> None:
    """Write a file ``new_file`` approved, refusing one that appeared since (never replaced)."""
    try:
        with path.open("x", encoding="utf-8") as handle:
            handle.write(text)
    except FileExistsError:
        raise ForeignPathError(f"{path} appeared while ragteam worked; not replaced") from None
