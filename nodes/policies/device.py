"""Where a local model runs: ``auto`` (CUDA when visible, else CPU), ``cpu`` or ``cuda[:N]``,
and in which precision (float32 by default; bfloat16 on request, GPU only)."""

from __future__ import annotations

import torch

DEVICES = "auto, cpu or cuda[:N]"


def resolve_device(name: str = "auto") -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cpu":
        return torch.device("cpu")
    if name.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ValueError(f"device {name!r}: no CUDA device is visible to torch")
        return torch.device(name)
    raise ValueError(f"unknown device {name!r}: use {DEVICES}")


def resolve_dtype(device: torch.device, bf16: bool = False) -> torch.dtype:
    """float32 unless bfloat16 is asked for on a GPU (CPU bfloat16 matmuls are slow here, and the
    exact-log-prob checks are made in float32)."""
    if bf16 and device.type != "cuda":
        raise ValueError("bf16 needs a CUDA device")
    return torch.bfloat16 if bf16 else torch.float32
