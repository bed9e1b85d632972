"""Complete, atomic checkpoints: a killed run loses at most the step in flight.

    OUT/checkpoints/step-000012/   optimizer state (weights + value head, optimizer, scheduler),
                                   rng.json (python / numpy generators), rng.pt (torch's),
                                   trainer.json (step, data cursor, config)
    OUT/checkpoints/latest         the name of the newest complete checkpoint

A checkpoint is written under ``step-N.partial`` and renamed when complete; ``latest`` is
replaced atomically afterwards. An interrupted save leaves the previous checkpoint as latest.

Loading never unpickles code: tensors are read with ``weights_only=True`` and everything else is
JSON, so a ``--resume`` directory from elsewhere cannot run anything.
"""

from __future__ import annotations

import json
import os
import pickle
import random
import shutil
from pathlib import Path

import numpy as np
import torch


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
    folder = root / f"step-{step:06d}"
    partial = root / f"step-{step:06d}.partial"
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    optimizer.save(partial)
    save_rng_state(partial)
    (partial / "trainer.json").write_text(json.dumps({"step": step, **trainer_state}, indent=2))
    shutil.rmtree(folder, ignore_errors=True)
    os.replace(partial, folder)
    pointer = root / "latest.tmp"
    pointer.write_text(folder.name)
    os.replace(pointer, root / "latest")
    for old in sorted(root.glob("step-*[0-9]"))[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return folder


def latest_checkpoint(root: Path) -> Path | None:
    pointer = root / "latest"
    if not pointer.exists():
        return None
    folder = root / pointer.read_text().strip()
    return folder if (folder / "trainer.json").exists() else None


def load_checkpoint(folder: Path, optimizer) -> dict:
    """Restore the optimizer (model weights included) and RNG state; return the trainer state (step, cursor, ...)."""
    try:
        optimizer.load(folder)
        load_rng_state(folder)
    except pickle.UnpicklingError as error:  # a file that is not plain tensors: never run it
        raise ValueError(f"{folder}: refusing a checkpoint that does not load weights-only "
                         f"({str(error).splitlines()[0]})") from None
    return json.loads((folder / "trainer.json").read_text())


def export_hf(model, tokenizer, folder: Path) -> Path:
    """The trained LM in Hugging Face format (LoRA merged), loadable by ``--policy hf:DIR``;
    the value head goes beside it in ``value_head.pt``."""
    from trainers.learner.model import merged_lm

    partial = folder.with_name(folder.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    merged_lm(model.lm).save_pretrained(partial, safe_serialization=True)
    tokenizer.save_pretrained(partial)
    torch.save(model.value_head.state_dict(), partial / "value_head.pt")
    shutil.rmtree(folder, ignore_errors=True)
    os.replace(partial, folder)
    return folder
