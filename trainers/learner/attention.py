"""The learner's attention on a GPU: FlexAttention for packed shared-prompt rows, causal flash
attention for right-padded rows, and never cuDNN's masked SDPA.

Why: with the packed layout's 4D boolean mask, PyTorch's SDPA dispatches to cuDNN on recent
GPUs, which plans every call on the host (~2.5 ms per layer call on an H100, measured): the
shared-prompt update ran at 0.92× a bare causal training loop. A FlexAttention ``BlockMask``
built once per forward from the same segment rule (``batches.may_attend``) skips the blocks
no query may see and plans nothing per call. Right-padded rows need no mask at all: a real
token's causal window never reaches the padding after it, so they get SDPA's ``is_causal``
flash kernel, as the bare loop does. Any other boolean mask (e.g. ``generate`` on the learner's
model, or a torch without FlexAttention) goes through SDPA with cuDNN excluded.

Chosen by device in ``load_lm``: on a CPU the model keeps plain SDPA with the 4D mask (eager
FlexAttention there materializes every score and compiling it costs seconds per shape).
"""

from __future__ import annotations

import torch

from ragteam.trainers.learner.batches import Batch, may_attend

NAME = "ragteam_gpu"  # the attention implementation's name in transformers' registries
GPU_BLOCK = 128  # FlexAttention's default block: packed rows on a GPU are padded to a multiple of it


def flex_available() -> bool:
    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention  # noqa: F401
    except ImportError:  # torch < 2.5
        return False
    return True


def segment_block_mask(batch: Batch):
    """The packed batch's visibility (``batches.may_attend`` on its segment and owner ids) as a
    FlexAttention ``BlockMask`` on the batch's device."""
    from torch.nn.attention.flex_attention import create_block_mask

    segments, owners = batch.segments, batch.owners
    rows, width = segments.shape

    def mask_mod(b, h, q, k):
        return may_attend(segments[b, q], segments[b, k], owners[b, q], owners[b, k], q, k)

    build = create_block_mask
    if segments.device.type == "cuda":  # the eager builder evaluates the rule with vmap over every (q, k) pair
        build = _compiled("block_mask", create_block_mask)
    return build(mask_mod, rows, None, width, width, device=segments.device)


def packed_block(lm) -> int | None:
    """The block packed rows are laid out for (``batches.pack_batch``): FlexAttention's when
    ``lm`` runs this attention, else None (a dense mask)."""
    uses_this = getattr(lm.config, "_attn_implementation", None) == NAME
    return GPU_BLOCK if uses_this and flex_available() else None


def learner_mask(batch: Batch):
    """What the backbone gets as ``attention_mask`` under this attention: a BlockMask for packed
    rows, nothing (causal) for right-padded ones, or the 4D boolean mask without FlexAttention."""
    if batch.segments is not None:
        return segment_block_mask(batch) if flex_available() else batch.attention_mask
    return None  # right-padded rows (``make_batch``): causal alone hides every pad from real tokens


_COMPILED: dict = {}
FLEX_MIN_HEAD_DIM = 16  # the fused kernel's smallest head dimension (smaller ones are zero-padded)


def _compiled(name: str, fn):
    """``fn`` compiled once per process with dynamic shapes: every micro-batch has its own row
    count and width, and a compile specialized to each shape would compile again (seconds) for
    each new one. What still compiles anew: grad on or off, one row or several."""
    if name not in _COMPILED:
        _COMPILED[name] = torch.compile(fn, dynamic=True)
    return _COMPILED[name]


def _flex(device: torch.device):
    """FlexAttention, compiled on CUDA (the fused kernel); eager elsewhere (a reference that
    materializes the scores: the CPU tests)."""
    from torch.nn.attention.flex_attention import flex_attention

    return _compiled("flex", flex_attention) if device.type == "cuda" else flex_attention


def attention_forward(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """transformers' attention interface: (output [B, L, H, D], no weights)."""
    from transformers.integrations.sdpa_attention import repeat_kv, sdpa_attention_forward

    if attention_mask is None or isinstance(attention_mask, torch.Tensor):
        from torch.nn.attention import SDPBackend, sdpa_kernel

        backends = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]
        with sdpa_kernel(backends):  # everything but cuDNN (see the module docstring)
            return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout,
                                          scaling=scaling, **kwargs)
    if dropout:
        raise ValueError("flex attention path: attention dropout is not supported")
    heads, kv_heads = query.shape[1], key.shape[1]
    gqa = heads != kv_heads
    if gqa and heads & (heads - 1):  # as transformers does: a head count that is no power of two
        key, value = repeat_kv(key, heads // kv_heads), repeat_kv(value, heads // kv_heads)
        gqa = False
    head_dim = query.shape[-1]
    if scaling is None:
        scaling = head_dim ** -0.5
    if head_dim < FLEX_MIN_HEAD_DIM:  # zeros add nothing to q·k and give output columns we drop
        widen = lambda t: torch.nn.functional.pad(t, (0, FLEX_MIN_HEAD_DIM - head_dim))  # noqa: E731
        query, key, value = widen(query), widen(key), widen(value)
    out = _flex(query.device)(query, key, value, block_mask=attention_mask, scale=scaling, enable_gqa=gqa)
    return out[..., :head_dim].transpose(1, 2).contiguous(), None


def _register() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(NAME, attention_forward)
    # 2D padding masks (generate, padded rows given one) are built as SDPA's are
    AttentionMaskInterface.register(NAME, sdpa_mask)


def use_gpu_attention(lm) -> bool:
    """Switch a loaded HF model to this attention (False when it cannot take a custom one)."""
    _register()
    base = lm.get_base_model() if hasattr(lm, "get_base_model") else lm
    if not getattr(base, "_can_set_attn_implementation", lambda: False)():
        return False
    base.set_attn_implementation(NAME)
    return base.config._attn_implementation == NAME
