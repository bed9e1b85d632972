"""LoRA products for vLLM's CPU engine without its per-token weight gather, installed as a
``vllm.general_plugins`` entry point (pyproject.toml), so every process of an engine loads them:
the engine core, its workers, a Ray rollout worker. Only engines ragteam starts: the hook does
nothing unless ``ENGINE_MARK`` is set in the environment, which ragteam sets where it starts an
engine (``nodes.policies.vllm._engine_environment``) and its processes inherit. Any other vLLM
engine in the same environment keeps vLLM's own ops, and with them its meaning of slot -1.

vLLM's CPU LoRA path (``PunicaWrapperCPU`` over ``vllm.lora.ops.torch_ops``) first gathers each
token's whole adapter matrix, ``weights[indices]`` of shape [T, O, R], and then multiplies token by
token: for a RAG prompt that copy dominates (2,048 tokens through one MLP slice of the 0.5B
reader, O = 4,864 at R = 16, is 640 MB, per slice and layer). Here each run of consecutive tokens
under one adapter (what vLLM's V1 runner always hands over, as sgmv metadata) goes into the
layer's output with one in-place matrix product, and the per-token ops (bgmv: the logits) group
the rows by adapter: as many products as runs or adapters, no copy of the weights.
``benchmarks/bench_cpu_lora.py`` measures both against vLLM's own in one run.

Slot -1 (a request on the base weights) adds nothing, as in vLLM's GPU kernels; the gather above
reads it as the last slot (which is why ``VLLMPolicy.for_team`` keeps a spare slot empty: an
engine without this plugin still decodes base-weight requests on the base weights).
"""

from __future__ import annotations

import os

import torch

ENGINE_MARK = "RAGTEAM_VLLM_ENGINE"  # "1" in the environment of an engine ragteam started

# the names PunicaWrapperCPU imported from vllm.lora.ops.torch_ops, each replaced below
_REPLACED = ("bgmv_shrink", "bgmv_expand", "bgmv_expand_slice", "sgmv_shrink", "sgmv_expand", "sgmv_expand_slice")


def _matrices(weights: torch.Tensor, out: torch.Tensor):
    """slot -> that slot's [O, I] matrix from vLLM's stacked weights ([L, O', I] or [L, 1, O', I]),
    cut to ``out``'s O columns and in its dtype."""
    if weights.dim() == 4:
        weights = weights.squeeze(1)
    return lambda slot: weights[slot, : out.shape[1]].to(out.dtype)


def add_lora_products(out: torch.Tensor, inputs: torch.Tensor, weights: torch.Tensor, slots: torch.Tensor,
                      scale: float = 1.0) -> torch.Tensor:
    """Add each row's product with its own adapter slot's matrix to ``out``, in place.

    out [T, O] (a view into the layer's output is fine); inputs [T, I]; weights [L, O', I] or
    [L, 1, O', I] (vLLM's stacked slots, O' >= O: only the first O outputs are used); slots [T]
    (a slot per row, -1: none). Row t of ``out`` gains ``scale * weights[slots[t]][:O] @ inputs[t]``;
    a row of slot -1 is left as it was. The products go straight into ``out`` (``addmm_``,
    ``index_add_``): no [T, O] temporary beyond one adapter's rows."""
    matrix_of = _matrices(weights, out)
    inputs = inputs.to(out.dtype)
    present = torch.unique(slots).tolist()
    for slot in present:
        if slot < 0:
            continue
        matrix = matrix_of(slot)
        if len(present) == 1:  # one adapter for the whole batch: no row selection
            out.addmm_(inputs, matrix.T, alpha=scale)
        else:
            rows = (slots == slot).nonzero().squeeze(1)
            out.index_add_(0, rows, inputs.index_select(0, rows) @ matrix.T, alpha=scale)
    return out


def _window(output: torch.Tensor, start: int, width: int, add: bool) -> torch.Tensor:
    """The columns ``start .. start + width`` of ``output``, zeroed unless the products add to
    what they hold."""
    window = output[:, start: start + width]
    if not add:
        window.zero_()
    return window


def _shared_width(weights: torch.Tensor, output: torch.Tensor) -> int:
    """The adapter and the model may pad their widths differently: the columns both have."""
    return min(weights.shape[-2], output.shape[1])


# bgmv: one slot per row (vLLM's per-token path; the LoRA logits use it)
def bgmv_shrink(inputs, lora_a_weights, output_tensor, lora_indices_tensor, scaling: float = 1.0):
    window = _window(output_tensor, 0, lora_a_weights.shape[-2], add=False)
    add_lora_products(window, inputs, lora_a_weights, lora_indices_tensor, scaling)


def bgmv_expand(inputs, lora_b_weights, output_tensor, lora_indices_tensor, add_inputs: bool = True):
    window = _window(output_tensor, 0, _shared_width(lora_b_weights, output_tensor), add_inputs)
    add_lora_products(window, inputs, lora_b_weights, lora_indices_tensor)


def bgmv_expand_slice(inputs, lora_b_weights, output_tensor, lora_indices_tensor, slice_offset: int,
                      slice_size: int, add_inputs: bool = True):
    """One slice of a packed projection's output (q/k/v, gate/up)."""
    add_lora_products(_window(output_tensor, slice_offset, slice_size, add_inputs), inputs, lora_b_weights,
                      lora_indices_tensor)


def add_lora_runs(out: torch.Tensor, inputs: torch.Tensor, weights: torch.Tensor, starts: torch.Tensor,
                  lengths: torch.Tensor, slots: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
    """``add_lora_products`` for rows that come in runs of one slot, as vLLM's sgmv metadata gives
    them (consecutive tokens of one adapter merged into one run): each run is a slice of the rows,
    so its product goes into ``out`` with one in-place ``addmm_`` and no row selection.

    out [T, O]; inputs [T, I]; weights as in ``add_lora_products``; starts, lengths, slots [B]
    (run b covers rows starts[b] .. starts[b] + lengths[b], under slot slots[b]; -1: none)."""
    matrix_of = _matrices(weights, out)
    inputs = inputs.to(out.dtype)
    for start, length, slot in zip(starts.tolist(), lengths.tolist(), slots.tolist()):
        if slot >= 0:
            rows = slice(start, start + length)
            out[rows].addmm_(inputs[rows], matrix_of(slot).T, alpha=scale)
    return out


# sgmv: runs of rows under one slot (what vLLM's V1 runner always calls, prefill or decode)
def sgmv_shrink(inputs, lora_a_weights, output_tensor, b_seq_start_loc, seq_len_tensor, lora_indices_tensor,
                batches, max_seq_length, token_nums, scaling: float):
    window = _window(output_tensor, 0, lora_a_weights.shape[-2], add=False)
    add_lora_runs(window, inputs, lora_a_weights, b_seq_start_loc, seq_len_tensor, lora_indices_tensor, scaling)


def sgmv_expand(inputs, lora_b_weights, output_tensor, b_seq_start_loc, seq_len_tensor, lora_indices_tensor,
                batches, max_seq_length, token_nums, add_inputs: bool = False):
    window = _window(output_tensor, 0, _shared_width(lora_b_weights, output_tensor), add_inputs)
    add_lora_runs(window, inputs, lora_b_weights, b_seq_start_loc, seq_len_tensor, lora_indices_tensor)


def sgmv_expand_slice(inputs, lora_b_weights, output_tensor, b_seq_start_loc, seq_len_tensor, lora_indices_tensor,
                      batches, max_seq_length, token_nums, slice_offset: int, slice_size: int,
                      add_inputs: bool = False):
    window = _window(output_tensor, slice_offset, slice_size, add_inputs)
    add_lora_runs(window, inputs, lora_b_weights, b_seq_start_loc, seq_len_tensor, lora_indices_tensor)


def install() -> None:
    """vLLM's plugin hook (run once per process): point its CPU LoRA wrapper at the products above.
    Only in an engine ragteam started (``ENGINE_MARK``) and on a CPU platform; a GPU engine keeps
    its own kernels."""
    if os.environ.get(ENGINE_MARK) != "1":
        return
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        return
    import warnings

    from vllm.lora.punica_wrapper import punica_cpu

    missing = [name for name in _REPLACED if not hasattr(punica_cpu, name)]
    if missing:  # another vLLM: its CPU LoRA path is not the one these replace
        warnings.warn(f"ragteam's LoRA products not installed: vLLM's punica_cpu has no {missing}")
        return
    for name in _REPLACED:
        setattr(punica_cpu, name, globals()[name])
