"""A local model folder's files, checked before a loader opens them.

The loaders (``transformers``, ``tokenizers``, ``safetensors``, vLLM) meet a broken or hostile
file with a traceback from deep inside, often without the file's name: a safetensors header that
claims more bytes than the file has, JSON nested past the parser's recursion limit, a
``pytorch_model.bin`` whose pickle would run code. Here each file the loaders read is checked
cheaply (JSON parsed, a safetensors file's 8-byte length and header only, a pickle unpickled
with ``weights_only`` and no tensor data read), and each problem is one ``ValueError`` line
naming the file.
"""

from __future__ import annotations

import json
import math
import pickle
import struct
import warnings
from pathlib import Path

from ragteam.stores.user_files import read_regular_bytes

# The JSON files a Hugging Face loader reads from a model folder; each holds one object.
JSON_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
              "special_tokens_map.json", "added_tokens.json", "vocab.json", "chat_template.json",
              "preprocessor_config.json", "model.safetensors.index.json",
              "pytorch_model.bin.index.json")
SAFETENSORS_INDEX = "model.safetensors.index.json"
BIN_INDEX = "pytorch_model.bin.index.json"
# bytes per element of the safetensors dtypes; a dtype not listed here (a newer or sub-byte
# one) has its bounds checked but not its size
DTYPE_BYTES = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "F8_E8M0": 1, "I16": 2,
               "U16": 2, "F16": 2, "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8,
               "F64": 8, "C64": 8}
MAX_HEADER = 100 * 1024 * 1024  # the safetensors library refuses larger headers too
MAX_JSON_BYTES = 1 << 30        # a model's JSON (tokenizer.json the largest, tens of MB) is read whole


_CHECKED: set[tuple] = set()  # folders found sound, as their files were then (see _state)


def _state(folder: Path) -> tuple:
    """The folder and each file's name, size and modification time: a change to any file makes
    the folder new again."""
    return (str(folder.resolve()), tuple(sorted((p.name, s.st_size, s.st_mtime_ns) for p in folder.iterdir()
                                                if p.is_file() and (s := p.stat()))))


MODEL_SPECS = "offline, offline:NAME or hf:PATH"


def checked_model_path(spec: str) -> str | None:
    """The local directory a model spec names (None for ``offline`` and ``offline:NAME``), checked
    without loading anything: a clear error when it holds no Hugging Face model, or files a loader
    would fail on or must not open (``check_model_folder``)."""
    if spec == "offline" or spec.startswith("offline:"):
        from ragteam.nodes.policies.offline_model import offline_model

        offline_model(spec)  # an unknown name is refused here
        return None
    path = spec.split(":", 1)[1] if spec.startswith(("hf:", "vllm:")) else spec
    if not (Path(path) / "config.json").is_file():
        raise ValueError(f"model {spec!r}: no Hugging Face model directory at {path!r} "
                         f"(use {MODEL_SPECS})")
    check_model_folder(path)
    return path


def check_model_folder(folder: str | Path) -> None:
    """Refuse (``ValueError`` naming the file) a model folder whose JSON files, safetensors
    headers or pickled weights a loader would fail on or must not open. A folder is checked once
    per process while its files stay as they were (the command line checks it before any work,
    then the loader and the training config name it again)."""
    folder = Path(folder)
    state = _state(folder)
    if state in _CHECKED:
        return
    _check(folder)
    _CHECKED.add(state)


def _check(folder: Path) -> None:
    parsed = {name: read_json_object(folder / name) for name in JSON_FILES if (folder / name).exists()}
    safetensors = _weight_files(folder, "model.safetensors", parsed.get(SAFETENSORS_INDEX), SAFETENSORS_INDEX)
    for path in safetensors:
        check_safetensors(path)
    if not safetensors:  # transformers reads pickled weights only when there are no safetensors
        for path in _weight_files(folder, "pytorch_model.bin", parsed.get(BIN_INDEX), BIN_INDEX):
            check_pickled_weights(path)


MAX_LORA_RANK = 1024  # far above any adapter ragteam trains; a larger r is a broken or hostile file


def check_adapter_folder(folder: str | Path) -> None:
    """Refuse (``ValueError`` naming the file) a peft LoRA folder a loader would fail on or must
    not open: its ``adapter_config.json`` (an object, ``peft_type`` LORA, ranks positive integers
    up to ``MAX_LORA_RANK``: peft allocates r × width before reading any weight) and its weights
    (``adapter_model.safetensors`` header, or a pickled ``adapter_model.bin`` opened weights-only)."""
    folder = Path(folder)
    config_path = folder / "adapter_config.json"
    config = read_json_object(config_path)
    if config.get("peft_type", "LORA") != "LORA":
        raise ValueError(f"{config_path}: peft_type {config.get('peft_type')!r}; ragteam loads LoRA adapters")
    ranks = [config.get("r"), *(config.get("rank_pattern") or {}).values()]
    for rank in ranks:
        if isinstance(rank, bool) or not isinstance(rank, int) or not 1 <= rank <= MAX_LORA_RANK:
            raise ValueError(f"{config_path}: LoRA rank {rank!r} is not an integer from 1 to {MAX_LORA_RANK}"[:300])
    if (folder / "adapter_model.safetensors").exists():
        check_safetensors(folder / "adapter_model.safetensors")
    elif (folder / "adapter_model.bin").exists():
        check_pickled_weights(folder / "adapter_model.bin")
    else:
        raise ValueError(f"{folder}: no adapter_model.safetensors (or .bin): not a peft adapter folder")


def read_json_object(path: Path) -> dict:
    """The JSON object in ``path``; anything else (bad bytes, bad or too deeply nested JSON, a
    list, a FIFO or device) is a ``ValueError`` naming the file."""
    try:
        data = read_regular_bytes(path, MAX_JSON_BYTES, "JSON file")
    except OSError as bad:
        raise ValueError(f"{path}: cannot read it ({bad.strerror or bad})") from None
    try:
        value = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as bad:
        raise ValueError(f"{path}: not valid JSON (not UTF-8 text at byte {bad.start})") from None
    except json.JSONDecodeError as bad:
        raise ValueError(f"{path}: not valid JSON ({bad.msg} at line {bad.lineno} "
                         f"column {bad.colno})") from None
    except RecursionError:
        raise ValueError(f"{path}: not valid JSON (nested too deeply)") from None
    except ValueError as bad:  # e.g. an integer longer than Python converts
        raise ValueError(f"{path}: not valid JSON ({str(bad)[:120]})") from None
    if not isinstance(value, dict):
        raise ValueError(f"{path}: not valid JSON for a model file (expected an object, got "
                         f"{type(value).__name__})")
    return value


def _weight_files(folder: Path, single: str, index: dict | None, index_name: str) -> list[Path]:
    """The weight files a loader would open: ``single``, or the shards the index names."""
    if (folder / single).exists():
        return [folder / single]
    if index is None:
        return []
    weight_map = index.get("weight_map")
    if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
        raise ValueError(f"{folder / index_name}: no 'weight_map' of tensor names to file names")
    shards = []
    for name in sorted(set(weight_map.values())):
        shard = folder / name
        if Path(name).name != name or not shard.is_file():  # a shard outside the folder is refused too
            raise ValueError(f"{folder / index_name}: names the weight file {name!r}, which is not "
                             f"in {folder}")
        shards.append(shard)
    return shards


def check_safetensors(path: Path) -> None:
    """Check a safetensors file's header against its size, reading only the header: the 8-byte
    header length, the header as a JSON object, and each tensor's dtype, shape and byte range."""
    size = path.stat().st_size
    if size == 0:
        raise ValueError(f"{path}: empty file, not safetensors weights")
    if size < 8:
        raise ValueError(f"{path}: {size} bytes, too short for a safetensors header")
    with open(path, "rb") as handle:
        (length,) = struct.unpack("<Q", handle.read(8))
        if length > size - 8:
            raise ValueError(f"{path}: not safetensors weights (its header claims {length:,} bytes; "
                             f"the file has {size:,})")
        if length > MAX_HEADER:
            raise ValueError(f"{path}: not safetensors weights (a header of {length:,} bytes; "
                             f"safetensors allows {MAX_HEADER:,})")
        raw = handle.read(length)
    try:
        header = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError) as bad:  # bad bytes and bad JSON are both ValueErrors
        raise ValueError(f"{path}: not safetensors weights (its header is not JSON: "
                         f"{str(bad)[:120]})") from None
    if not isinstance(header, dict):
        raise ValueError(f"{path}: not safetensors weights (its header is not a JSON object)")
    data = size - 8 - length
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        problem = _tensor_problem(entry, data)
        if problem:
            raise ValueError(f"{path}: not safetensors weights (tensor {str(name)[:100]!r} {problem})")


def _tensor_problem(entry, data: int) -> str | None:
    """Why a header entry does not describe a tensor inside ``data`` bytes (None: it does)."""
    if not isinstance(entry, dict):
        return "is not described by an object"
    dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
    if not isinstance(shape, list) or not all(type(n) is int and n >= 0 for n in shape):
        return f"has a bad shape {str(shape)[:60]}"
    if (not isinstance(offsets, list) or len(offsets) != 2
            or not all(type(n) is int for n in offsets) or not 0 <= offsets[0] <= offsets[1]):
        return f"has bad data_offsets {str(offsets)[:60]}"
    if offsets[1] > data:
        return f"ends at byte {offsets[1]:,}, past the file's {data:,} bytes of data"
    if not isinstance(dtype, str):
        return f"has a bad dtype {str(dtype)[:40]}"
    width = DTYPE_BYTES.get(dtype)
    if width is not None and math.prod(shape) * width != offsets[1] - offsets[0]:
        return (f"of dtype {dtype} and shape {shape} needs {math.prod(shape) * width:,} bytes; "
                f"its data_offsets span {offsets[1] - offsets[0]:,}")
    return None


def check_pickled_weights(path: Path) -> None:
    """Unpickle a ``.bin`` checkpoint as the loader does (``weights_only``: tensors and plain
    containers, nothing that runs code) onto the meta device, so no tensor data is read."""
    import torch

    try:
        with warnings.catch_warnings():  # e.g. "pickle protocol 4": the refusal below says enough
            warnings.simplefilter("ignore")
            torch.load(path, map_location="meta", weights_only=True)
    except Exception as bad:  # noqa: BLE001 — whatever the unpickler refuses, the file is named
        reason = ("its pickle holds more than tensors; loading it could run code"
                  if isinstance(bad, pickle.UnpicklingError) and "Weights only load failed" in str(bad)
                  else one_line(bad))
        raise ValueError(f"{path}: refused: not a plain PyTorch weights file ({reason})") from None


def one_line(error: BaseException) -> str:
    """An exception as one short line: its type and the first line of its message."""
    text = str(error).strip()
    return f"{type(error).__name__}: {text.splitlines()[0][:200]}" if text else type(error).__name__
