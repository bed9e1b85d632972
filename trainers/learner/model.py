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

from dataclasses import dataclass
from typing import Sequence

import torch
from torch import nn


@dataclass
class Batch:
    input_ids: torch.Tensor        # [B, L] prompt + completion, right-padded
    attention_mask: torch.Tensor   # [B, L]
    prompt_lens: torch.Tensor      # [B]
    completion_mask: torch.Tensor  # [B, C] 1 on real completion tokens
    completion_ids: torch.Tensor   # [B, C]
    temperatures: torch.Tensor     # [B] logit scale used when the tokens were sampled

    def to(self, device: torch.device) -> "Batch":
        return Batch(*(getattr(self, f).to(device) for f in self.__dataclass_fields__))


def make_batch(prompts: Sequence[Sequence[int]], completions: Sequence[Sequence[int]],
               temperatures: Sequence[float], pad_id: int) -> Batch:
    width = max(len(p) + len(c) for p, c in zip(prompts, completions))
    c_width = max(max(len(c) for c in completions), 1)
    ids, attn, cids, cmask = [], [], [], []
    for p, c in zip(prompts, completions):
        seq = list(p) + list(c)
        ids.append(seq + [pad_id] * (width - len(seq)))
        attn.append([1] * len(seq) + [0] * (width - len(seq)))
        cids.append(list(c) + [pad_id] * (c_width - len(c)))
        cmask.append([1.0] * len(c) + [0.0] * (c_width - len(c)))
    scale = [t if t > 0 else 1.0 for t in temperatures]  # greedy calls recorded unscaled log-probs
    return Batch(torch.tensor(ids), torch.tensor(attn), torch.tensor([len(p) for p in prompts]),
                 torch.tensor(cmask), torch.tensor(cids), torch.tensor(scale, dtype=torch.float32))


class PolicyValueModel(nn.Module):
    def __init__(self, lm: nn.Module):
        super().__init__()
        self.lm = lm
        hidden = lm.config.hidden_size
        self.value_head = nn.Linear(hidden, 1)
        nn.init.zeros_(self.value_head.weight)  # start from V = 0: no made-up baseline
        nn.init.zeros_(self.value_head.bias)
        self.value_head.to(next(lm.parameters()).device)  # float32 whatever the LM's precision

    def _backbone_and_head(self):
        base = self.lm.get_base_model() if hasattr(self.lm, "get_base_model") else self.lm
        return base.model, base.lm_head

    def forward(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        """(log-probs of the completion tokens [B, C], state values [B])."""
        backbone, head = self._backbone_and_head()
        hidden = backbone(input_ids=batch.input_ids, attention_mask=batch.attention_mask).last_hidden_state
        c_width = batch.completion_ids.shape[1]
        # token at position p + j is predicted by the hidden state at position p + j − 1
        offsets = torch.arange(c_width, device=hidden.device).unsqueeze(0)
        positions = (batch.prompt_lens.unsqueeze(1) - 1 + offsets).clamp(max=hidden.shape[1] - 1)
        picked = hidden.gather(1, positions.unsqueeze(-1).expand(-1, -1, hidden.shape[-1]))
        logits = head(picked).float() / batch.temperatures.view(-1, 1, 1)
        logprobs = torch.log_softmax(logits, dim=-1).gather(-1, batch.completion_ids.unsqueeze(-1)).squeeze(-1)
        state = hidden.gather(1, (batch.prompt_lens - 1).view(-1, 1, 1).expand(-1, 1, hidden.shape[-1]))
        values = self.value_head(state.squeeze(1).float()).squeeze(-1)
        return logprobs * batch.completion_mask, values


def load_lm(path: str, lora: dict | None = None, device: str = "cpu", bf16: bool = False):
    """A causal LM from a local directory on ``device``, optionally wrapped with LoRA adapters
    (peft)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from nodes.policies.device import resolve_device, resolve_dtype

    where = resolve_device(device)
    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    lm = AutoModelForCausalLM.from_pretrained(path, dtype=resolve_dtype(where, bf16)).to(where)
    if lora:
        from peft import LoraConfig, get_peft_model

        lm = get_peft_model(lm, LoraConfig(task_type="CAUSAL_LM", **lora))
    return lm, tokenizer


def merged_lm(lm):
    """The LM itself, or, when it carries LoRA adapters, a copy with them merged into its weights
    (what rollout engines load and what is exported)."""
    import copy

    return copy.deepcopy(lm).merge_and_unload() if hasattr(lm, "merge_and_unload") else lm
