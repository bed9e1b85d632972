"""The shared actor-critic: one causal LM for every role plus a value head on the same backbone.

Why a value head on the shared backbone rather than a separate critic model: it is the JADE
setting (one model for the whole team, O(1) memory in the number of roles), it doubles neither
memory nor forward passes, and the critic reads the same role instruction + observation the
actor does. Its cost is that value gradients reach the backbone; ``vf_coef`` bounds that.

The value of a transition is read at the last prompt token (the state is the observation); log
probs are taken at the completion positions only, so the vocabulary projection (a fifth of this
model's compute) never runs over the ~900 prompt tokens of a RAG call.
"""

from __future__ import annotations

import torch
from torch import nn

from ragteam.trainers.learner import attention as gpu_attention
from ragteam.trainers.learner.batches import Batch, make_batch  # noqa: F401  (make_batch: the padded layout)


class PolicyValueModel(nn.Module):
    def __init__(self, lm: nn.Module):
        super().__init__()
        self.lm = lm
        hidden = lm.config.hidden_size
        self.value_head = nn.Linear(hidden, 1)
        nn.init.zeros_(self.value_head.weight)  # start from V = 0: no made-up baseline
        nn.init.zeros_(self.value_head.bias)
        # float32 whatever the LM's precision (DeepSpeed's bf16 mode casts the whole module)
        self.value_head.to(next(lm.parameters()).device)

    def _backbone_and_head(self):
        base = self.lm.get_base_model() if hasattr(self.lm, "get_base_model") else self.lm
        return base.model, base.lm_head

    def forward(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        """(log-probs of the completion tokens [B, C], state values [B]), from a padded or a
        packed batch (``trainers.learner.batches``)."""
        backbone, head = self._backbone_and_head()
        mask = batch.attention_mask
        if backbone.config._attn_implementation == gpu_attention.NAME:  # on CUDA (``load_lm``)
            mask = gpu_attention.learner_mask(batch)
        elif mask.dim() == 4 and backbone.config._attn_implementation != "sdpa":
            # eager attention adds the mask to its scores: blocked pairs get the dtype's minimum
            blocked = torch.finfo(next(self.lm.parameters()).dtype).min
            mask = torch.zeros(mask.shape, dtype=next(self.lm.parameters()).dtype,
                               device=mask.device).masked_fill(~mask, blocked)
        hidden = backbone(input_ids=batch.input_ids, attention_mask=mask,
                          position_ids=batch.position_ids).last_hidden_state          # [R, L, H]
        picked = hidden[batch.rows.unsqueeze(1), batch.predict_at]                     # [B, C, H]
        logits = head(picked).float() / batch.temperatures.view(-1, 1, 1)
        logprobs = torch.log_softmax(logits, dim=-1).gather(-1, batch.completion_ids.unsqueeze(-1)).squeeze(-1)
        state = hidden[batch.rows, batch.state_at]                                     # [B, H]
        values = self.value_head(state.to(self.value_head.weight.dtype)).float().squeeze(-1)
        return logprobs * batch.completion_mask, values


def load_lm(path: str, lora: dict | None = None, device: str = "cpu", bf16: bool = False,
            gradient_checkpointing: bool = False, adapters=None):
    """A causal LM from a local directory on ``device``, optionally wrapped with LoRA adapters
    (peft); with ``gradient_checkpointing`` its layers recompute activations in the backward
    pass instead of keeping them (a long call's activations are the learner's largest memory).
    On CUDA it gets the GPU attention (``trainers.learner.attention``) and, when the ``gpu``
    extra is installed, Liger's fused kernels; on a CPU, SDPA over grouped KV heads in place
    (``nodes.policies.grouped_attention``).
    ``adapters`` (a ``trainers.learner.adapters.RoleAdapters``): one peft model with each of the
    run's per-role adapters instead of one ``lora`` adapter."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ragteam.nodes.policies.device import resolve_device, resolve_dtype
    from ragteam.nodes.policies.grouped_attention import use_grouped_sdpa

    where = resolve_device(device)
    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    lm = AutoModelForCausalLM.from_pretrained(path, dtype=resolve_dtype(where, bf16)).to(where)
    if torch.device(where).type == "cuda":
        gpu_attention.use_gpu_attention(lm)
        apply_liger(lm)
    else:
        use_grouped_sdpa(lm)  # its packed rows' masks would otherwise copy every KV head
    if gradient_checkpointing:
        lm.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if lora:
        from peft import LoraConfig, get_peft_model

        lm = get_peft_model(lm, LoraConfig(task_type="CAUSAL_LM", **lora))
    elif adapters is not None:
        lm = adapters.build(lm)
    return lm, tokenizer


def apply_liger(lm) -> bool:
    """Liger's fused Triton kernels (RMSNorm, SwiGLU, RoPE) in a CUDA model when ``liger-kernel``
    is installed (the ``gpu`` extra); True when applied. Not its fused linear-cross-entropy: the
    learner takes log-probs at completion positions itself.

    Liger also swaps classes and the RoPE function in the modeling module, which would send every
    model built later in this process, CPU ones included, to Triton. Those swaps are undone: the
    loaded instance keeps its patched layers, and RoPE becomes a switch that takes Liger's
    kernel on CUDA tensors only."""
    try:
        from liger_kernel.transformers import _apply_liger_kernel_to_instance
    except ImportError:
        return False
    if next(lm.parameters()).device.type != "cuda":  # Triton kernels: never on a CPU
        return False
    return _patch_instance_only(lm, _apply_liger_kernel_to_instance)


def _patch_instance_only(lm, apply) -> bool:
    """``apply(model=…, …)`` (Liger's patcher) on ``lm``, then its module-level swaps undone."""
    import sys

    base = lm.get_base_model() if hasattr(lm, "get_base_model") else lm
    module = sys.modules[type(base).__module__]
    before = dict(vars(module))
    applied = False
    try:
        apply(model=base, rope=True, rms_norm=True, swiglu=True, cross_entropy=False,
              fused_linear_cross_entropy=False)
        applied = True
    except (TypeError, ValueError, NotImplementedError, AssertionError) as error:  # an architecture it lacks
        import warnings

        warnings.warn(f"liger kernels not applied ({error}); the model keeps transformers' layers")
    finally:
        for name, value in list(vars(module).items()):
            if name in before and before[name] is not value:
                rope = applied and callable(value) and name.endswith("pos_emb")
                setattr(module, name, _on_cuda(value, before[name]) if rope else before[name])
    return applied


def _on_cuda(fused, plain):
    """A RoPE function that takes ``fused`` (Liger's Triton kernel) on CUDA tensors, else ``plain``."""
    plain = getattr(plain, "plain", plain)  # a second load: wrap the original, not the switch

    def rotary(q, k, *args, **kwargs):
        return (fused if q.is_cuda else plain)(q, k, *args, **kwargs)
    rotary.plain = plain
    return rotary


def merged_lm(lm):
    """The LM itself, or, when it carries LoRA adapters, a copy with them merged into its weights
    (what rollout engines load and what is exported)."""
    import copy

    return copy.deepcopy(lm).merge_and_unload() if hasattr(lm, "merge_and_unload") else lm


ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")  # what an engine loads


def adapter_files(lm, name: str | None = None) -> dict[str, bytes]:
    """A PEFT model's LoRA adapter as the files of a PEFT adapter folder (name → bytes), in
    PEFT's own layout, which vLLM reads: what an engine serving the base weights plus an adapter
    loads (``weight_sync: adapter``). ``name``: one adapter of several (per-role adapters);
    None: the model's only one."""
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory(prefix="ragteam-adapter-") as folder:
        lm.save_pretrained(folder, selected_adapters=[name] if name is not None else None)
        # peft writes every adapter but "default" into a subfolder of its name
        written = Path(folder) / name if name not in (None, "default") else Path(folder)
        return {file: (written / file).read_bytes() for file in ADAPTER_FILES}
