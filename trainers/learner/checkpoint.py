"""Complete, atomic checkpoints: a killed run loses at most the step in flight.

    OUT/checkpoints/step-000012/   optimizer state (weights + value head, optimizer, scheduler),
                                   rng.json (python / numpy generators), rng.pt (torch's),
                                   trainer.json (step, data cursor, config)
    OUT/checkpoints/latest         the name of the newest complete checkpoint

A checkpoint is written under ``step-N.partial`` and renamed when complete; ``latest`` is
replaced atomically afterwards. An interrupted save leaves the previous checkpoint as latest.

A DeepSpeed checkpoint holds the weights with the optimizer's whole state, several times the
model's size (2.1 GB for the 135M model), so each save prints its size and keeps only the newest
``keep`` step folders (``TrainConfig.keep_checkpoints``). Only ``step-NNNNNN`` folders are ever removed, never
the one ``latest`` names, and nothing else in the folder is touched.

Loading never unpickles code: tensors are read with ``weights_only=True`` and everything else is
JSON, so a ``--resume`` directory from elsewhere cannot run anything.
"""

from __future__ import annotations

import json
import os
import pickle
import random
import re
import shutil
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import numpy as np
import torch

from ragteam.stores.atomic import replace_file


def write_json(path: Path, value) -> None:
    """``value`` as a JSON file, atomically (``stores.atomic.replace_file``)."""
    replace_file(path, json.dumps(value, indent=2) + "\n")


def read_json(path: Path):
    """A JSON file ragteam wrote; a corrupt one is a ``ValueError`` naming it."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, RecursionError) as error:
        raise ValueError(f"{path}: corrupt ({error})") from None


def save_rng_state(folder: Path) -> None:
    version, internal, gauss = random.getstate()
    name, keys, position, has_gauss, cached = np.random.get_state()
    (folder / "rng.json").write_text(json.dumps({
        "python": [version, list(internal), gauss],
        "numpy": [name, keys.tolist(), position, has_gauss, cached]}))
    torch.save(torch.get_rng_state(), folder / "rng.pt")


def load_rng_state(folder: Path) -> None:
    state = json.loads((folder / "rng.json").read_text())
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    name, keys, position, has_gauss, cached = state["numpy"]
    np.random.set_state((name, np.array(keys, dtype=np.uint32), position, has_gauss, cached))
    torch.set_rng_state(torch.load(folder / "rng.pt", weights_only=True))


def save_checkpoint(root: Path, step: int, optimizer, trainer_state: dict, keep: int = 2) -> Path:
    """Write step ``step``'s checkpoint. With several learner ranks (``optimizer.ranks``) every
    rank calls this: each writes its own ZeRO shards into the partial folder, and the first rank
    alone prepares, completes and renames it."""
    ranks = optimizer.ranks
    if root.is_symlink():  # its prune would delete, and latest point into, a folder elsewhere
        raise ValueError(f"{root} is a symbolic link; ragteam writes checkpoints only into a folder of "
                         "the run's own (remove the link)")
    folder = root / f"step-{step:06d}"
    partial = root / f"step-{step:06d}.partial"
    if ranks.is_first:
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
    ranks.barrier()
    optimizer.save(partial)
    ranks.barrier()  # every shard written
    if ranks.is_first:
        save_rng_state(partial)
        state = {"step": step, **trainer_state, "learner_ranks": ranks.size}
        (partial / "trainer.json").write_text(json.dumps(state, indent=2))
        shutil.rmtree(folder, ignore_errors=True)
        os.replace(partial, folder)
        replace_file(root / "latest", folder.name)
        prune_checkpoints(root, keep)
        print(f"checkpoint step {step}: {human_size(folder_size(folder))} (keeping the last {keep})",
              file=sys.stderr, flush=True)
    ranks.barrier()  # nobody reads ``latest`` before it names this step
    return folder


STEP_FOLDER = re.compile(r"step-(\d{6,})")  # ``save_checkpoint``'s names: step-000012


def prune_checkpoints(root: Path, keep: int) -> list[Path]:
    """Remove all but the newest ``keep`` (≥ 1) checkpoint folders under ``root``; return what
    was removed. Only checkpoints ``save_checkpoint`` wrote count (by step number, not by name):
    real folders of its names whose ``trainer.json`` gives that step; a user's folder of such a
    name is never touched, and neither is the one ``latest`` names, whatever its step."""
    keep = max(1, keep)
    pointer = root / "latest"
    named = pointer.read_text(encoding="utf-8").strip() if pointer.is_file() and not pointer.is_symlink() else None
    steps = sorted((int(match.group(1)), path) for path in root.iterdir()
                   if (match := STEP_FOLDER.fullmatch(path.name)) and _written_step(path) == int(match.group(1)))
    removed = []
    for _, path in steps[:-keep]:
        if path.name != named:
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def _written_step(folder: Path) -> int | None:
    """The step a checkpoint folder's ``trainer.json`` gives (None: not a checkpoint ragteam wrote)."""
    state = folder / "trainer.json"
    if folder.is_symlink() or not folder.is_dir() or state.is_symlink() or not state.is_file():
        return None
    try:
        step = json.loads(state.read_text(encoding="utf-8")).get("step")
    except (OSError, ValueError, AttributeError, RecursionError):
        return None
    return step if isinstance(step, int) and not isinstance(step, bool) else None


def folder_size(folder: Path) -> int:
    """Bytes in the files under ``folder`` (links not followed)."""
    total = 0
    for parent, _, files in os.walk(folder):
        for name in files:
            path = Path(parent) / name
            if not path.is_symlink():
                total += path.stat().st_size
    return total


def human_size(size: int) -> str:
    """``size`` bytes in decimal units, as a disk's free space is shown: 2.1 GB, 310 MB."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}" if size < 10 * scale else f"{size / scale:.0f} {unit}"
    return f"{size} B"


def latest_checkpoint(root: Path) -> Path | None:
    """The checkpoint ``root/latest`` names (None when there is none yet). ``latest`` must be the
    plain file ``save_checkpoint`` writes, naming a folder directly in ``root``: a link, an
    absolute path, ``..`` or a linked step folder would resume a run from state outside its own
    folder, so each is a ``ValueError`` naming the pointer."""
    pointer = root / "latest"
    if pointer.is_symlink():
        raise ValueError(f"{pointer}: a symbolic link; ragteam writes latest as a file naming a "
                         f"checkpoint folder in {root}, and resumes from nothing else")
    if not pointer.exists():
        return None
    try:
        name = pointer.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as error:
        raise ValueError(f"{pointer}: unreadable ({error})") from None
    folder = root / name
    if not name or folder.resolve().parent != root.resolve():
        raise ValueError(f"{pointer}: names {name!r}, which is not a checkpoint folder in {root}; "
                         "refusing to resume from outside the run")
    if not (folder / "trainer.json").is_file():
        # never "no checkpoint yet": that starts the run over and empties its metrics
        complete = sorted((p for p in root.glob("step-*") if not p.is_symlink() and (p / "trainer.json").is_file()),
                          key=lambda p: int(p.name[5:]) if p.name[5:].isdigit() else -1)
        use = (f"the newest complete one is {complete[-1].name}: write that name into {pointer} to resume "
               "from it" if complete else "no complete checkpoint is left; start a new run with another --out")
        raise ValueError(f"{pointer}: names {name!r}, which is not a complete checkpoint (no trainer.json); {use}")
    return folder


def load_checkpoint(folder: Path, optimizer) -> dict:
    """Restore the optimizer (model weights included) and RNG state; return the trainer state
    (step, cursor, ...). ZeRO's shards resume only on the world size that wrote them."""
    state = read_json(folder / "trainer.json")
    saved, ranks = state.get("learner_ranks", 1), optimizer.ranks.size
    if saved != ranks:
        raise ValueError(f"{folder}: written by {saved} learner rank(s), resumed with {ranks}; "
                         f"resume with ray.learner_ranks: {saved}")
    try:
        optimizer.load(folder)
        load_rng_state(folder)
    except pickle.UnpicklingError as error:  # a file that is not plain tensors: never run it
        raise ValueError(f"{folder}: refusing a checkpoint that does not load weights-only "
                         f"({str(error).splitlines()[0]})") from None
    return state


def export_hf(model, tokenizer, folder: Path, lm_state: dict | None = None, head_state: dict | None = None) -> Path:
    """The trained LM in Hugging Face format (LoRA merged), loadable by ``--policy hf:DIR``;
    the value head goes beside it in ``value_head.pt``. ``lm_state``/``head_state``: the whole
    weights where the model holds only a shard (ZeRO-3). An existing ``folder`` is replaced
    only when it is an export of ragteam's (a user's folder there is refused, untouched)."""
    from ragteam.trainers.learner.model import merged_lm

    with written_whole(folder) as partial:
        merged_lm(model.lm).save_pretrained(partial, safe_serialization=True, state_dict=lm_state)
        tokenizer.save_pretrained(partial)
        torch.save(head_state or model.value_head.state_dict(), partial / "value_head.pt")
    return folder


@contextmanager
def written_whole(folder: Path) -> Iterator[Path]:
    """A folder to fill (``folder.partial``) that replaces ``folder`` only once the block ends
    without error: an interrupted export leaves the previous one intact. An existing ``folder``
    is replaced only when it is an export of ragteam's (a user's folder is refused, untouched)."""
    from ragteam.stores.owned import MODEL, check_owned, mark

    check_owned(folder, MODEL)
    partial = folder.with_name(folder.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    yield partial
    mark(partial, MODEL)
    shutil.rmtree(folder, ignore_errors=True)
    os.replace(partial, folder)
