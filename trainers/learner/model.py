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

from trainers.learner.batches import Batch, make_batch  # noqa: F401  (make_batch: the padded layout)


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
        if mask.dim() == 4 and backbone.config._attn_implementation != "sdpa":
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
            gradient_checkpointing: bool = False):
    """A causal LM from a local directory on ``device``, optionally wrapped with LoRA adapters
    (peft); with ``gradient_checkpointing`` its layers recompute activations in the backward
    pass instead of keeping them (a long call's activations are the learner's largest memory)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from nodes.policies.device import resolve_device, resolve_dtype

    where = resolve_device(device)
    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    lm = AutoModelForCausalLM.from_pretrained(path, dtype=resolve_dtype(where, bf16)).to(where)
    if gradient_checkpointing:
        lm.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if lora:
        from peft import LoraConfig, get_peft_model

        lm = get_peft_model(lm, LoraConfig(task_type="CAUSAL_LM", **lora))
    return lm, tokenizer


def merged_lm(lm):
    """The LM itself, or, when it carries LoRA adapters, a copy with them merged into its weights
    (what rollout engines load and what is exported)."""
    import copy

    return copy.deepcopy(lm).merge_and_unload() if hasattr(lm, "merge_and_unload") else lm


ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")  # what an engine loads


def adapter_files(lm) -> dict[str, bytes]:
    """A PEFT model's LoRA adapter as the files of a PEFT adapter folder (name → bytes), in
    PEFT's own layout, which vLLM reads: what an engine serving the base weights plus an adapter
    loads (``weight_sync: adapter``)."""
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory(prefix="ragteam-adapter-") as folder:
        lm.save_pretrained(folder)
        return {name: (Path(folder) / name).read_bytes() for name in ADAPTER_FILES}
