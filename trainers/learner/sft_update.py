"""Supervised fine-tuning on the learner's model (the calls ``trainers.algorithms.sft`` selects).

The loss is the negative log-likelihood of the recorded completion ids given the recorded prompt
ids — the same transition format and the same forward pass as PPO, so no text is ever re-tokenized.
"""

from __future__ import annotations

import random
import time
from collections import defaultdict
from typing import Sequence

import torch

from ragteam.trainers.algorithms.losses import masked_mean
from ragteam.trainers.algorithms.ppo import micro_batches
from ragteam.trainers.experience import Experience
from ragteam.trainers.learner.ppo_update import forward_items, optimize_pass


def sft_epoch(optimizer, items: Sequence[Experience], pad_id: int, minibatch_size: int,
              token_budget: int, seed: int, skip: int = 0, after_step=None,
              adapters=None) -> dict[str, float]:
    """One shuffled pass of next-token NLL steps; its figures. ``skip``: mini-batches a resumed
    epoch already took (its figures then cover the rest); ``adapters``: per-role adapters
    (``trainers.learner.adapters.RoleAdapters``), each micro-batch under its roles' adapter;
    ``after_step(n, total)`` after the n-th
    of its ``total`` steps."""
    model = optimizer.module
    model.train()
    losses, per_role = [], defaultdict(list)

    def loss_of(group, outputs):
        batch, logprobs, _ = outputs
        nll = -masked_mean(logprobs, batch.completion_mask)
        losses.append(nll.item())
        for e in group:
            per_role[e.role].append(nll.item())
        return nll

    started = time.perf_counter()
    tokens = optimize_pass(optimizer, items, pad_id, minibatch_size, token_budget,
                           random.Random(seed), loss_of, adapters=adapters, skip=skip,
                           after_step=after_step).tokens
    model.eval()
    elapsed = time.perf_counter() - started
    return {"nll": sum(losses) / max(len(losses), 1), "tokens": tokens, "seconds": elapsed,
            "tokens_per_s": tokens / max(elapsed, 1e-9),
            **{f"nll/{role}": sum(v) / len(v) for role, v in per_role.items()}}


@torch.no_grad()
def mean_nll(model, items: Sequence[Experience], pad_id: int, token_budget: int) -> float:
    model.eval()
    total = 0.0
    for group in micro_batches(items, token_budget):
        batch, logprobs, _ = forward_items(model, group, pad_id)
        total += -masked_mean(logprobs, batch.completion_mask).item() * len(group)
    return total / max(len(items), 1)
