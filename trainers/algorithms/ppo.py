"""PPO on a unified buffer of mixed-role transitions (JADE Alg. 2, phase 2).

``prepare`` fills each experience's rollout-time value (and reference log-probs when a KL term
is on) and its advantage; ``update`` runs several epochs of shuffled mini-batches, each split
into micro-batches that fit a token budget. Log-probs are recomputed on the exact recorded ids.
"""

from __future__ import annotations

import random
import time
from collections import defaultdict
from typing import Iterable, Sequence

import torch

from trainers.algorithms.advantages import gae, group_normalized, whiten
from trainers.config import PPOSettings
from trainers.experience import Experience
from trainers.algorithms.losses import kl_to_reference, policy_loss, value_loss
from trainers.learner.model import PolicyValueModel, make_batch


def micro_batches(items: Sequence[Experience], token_budget: int) -> list[list[Experience]]:
    """Consecutive groups whose padded size (rows × longest row) stays within the budget."""
    groups: list[list[Experience]] = []
    for item in sorted(items, key=lambda e: e.n_tokens):
        current = groups[-1] if groups else None
        if current and (len(current) + 1) * max(item.n_tokens, current[-1].n_tokens) <= token_budget:
            current.append(item)
        else:
            groups.append([item])
    return groups


def forward_items(model: PolicyValueModel, items: Sequence[Experience], pad_id: int):
    batch = make_batch([e.prompt_ids for e in items], [e.completion_ids for e in items],
                       [e.temperature for e in items], pad_id).to(next(model.parameters()).device)
    logprobs, values = model(batch)
    return batch, logprobs, values


def _padded(rows: Iterable[Sequence[float]], width: int) -> torch.Tensor:
    return torch.tensor([list(r) + [0.0] * (width - len(r)) for r in rows], dtype=torch.float32)


@torch.no_grad()
def score_rollout(model: PolicyValueModel, items: Sequence[Experience], pad_id: int,
                  token_budget: int, reference=None) -> None:
    """Rollout-time values from the critic and, with a reference model, its log-probs."""
    model.eval()
    for group in micro_batches(items, token_budget):
        _, _, values = forward_items(model, group, pad_id)
        for e, v in zip(group, values.tolist()):
            e.value = v
        if reference is not None:
            with reference() as ref_model:
                _, ref_logprobs, _ = forward_items(ref_model, group, pad_id)
            for e, row in zip(group, ref_logprobs.tolist()):
                e.ref_logprobs = row[:len(e.completion_ids)]


def assign_advantages(items: Sequence[Experience], settings: PPOSettings) -> None:
    """GAE within each trajectory (flattened order is preserved in ``items``), or GRPO's
    group-normalized trajectory return broadcast over the trajectory's calls; then each call's
    local reward is added to its own advantage (the critic's targets stay the shared return)."""
    if settings.kl_coef and settings.kl_in == "reward":
        for e in items:
            e.reward -= settings.kl_coef * sum(o - r for o, r in zip(e.old_logprobs, e.ref_logprobs))
    trajectories: dict[str, list[Experience]] = defaultdict(list)
    for e in items:
        trajectories[e.trajectory].append(e)
    if settings.advantage == "gae":
        for steps in trajectories.values():
            advantages, returns = gae([e.reward for e in steps], [e.value for e in steps],
                                      settings.gamma, settings.lam)
            for e, a, r in zip(steps, advantages, returns):
                e.advantage, e.returns = a, r
    elif settings.advantage == "grpo":
        groups: dict[str, list[str]] = defaultdict(list)
        for run_id, steps in trajectories.items():
            groups[steps[0].group].append(run_id)
        for run_ids in groups.values():
            totals = [sum(e.reward for e in trajectories[r]) for r in run_ids]
            for run_id, a in zip(run_ids, group_normalized(totals) if len(totals) > 1 else [0.0]):
                for e in trajectories[run_id]:
                    e.advantage = e.returns = a
    else:
        raise ValueError(f"unknown advantage estimator {settings.advantage!r}: use gae or grpo")
    for e in items:
        e.advantage += e.local_reward
    if settings.whiten_advantages:
        for e, a in zip(items, whiten([e.advantage for e in items])):
            e.advantage = a


def optimize_pass(engine, items: Sequence[Experience], pad_id: int, minibatch_size: int,
                  token_budget: int, rng: random.Random, loss_of) -> tuple[int, list[float]]:
    """One shuffled pass: mini-batches (one optimizer step each) split into micro-batches under
    the token budget. ``loss_of(group, batch_outputs)`` returns the micro-batch's mean loss; it is
    weighted by the group's share so the accumulated gradient is the mini-batch mean.
    Returns (tokens processed, grad norm of each step)."""
    order = list(items)
    rng.shuffle(order)
    tokens, norms = 0, []
    for start in range(0, len(order), minibatch_size):
        minibatch = order[start:start + minibatch_size]
        groups = micro_batches(minibatch, token_budget)
        for n, group in enumerate(groups):
            outputs = forward_items(engine.module, group, pad_id)
            loss = loss_of(group, outputs)
            engine.accumulate(loss * len(group) / len(minibatch), boundary=n == len(groups) - 1)
            tokens += int(outputs[0].attention_mask.sum())
        norms.append(engine.step())
    return tokens, norms


def ppo_loss(settings: PPOSettings, stats: dict[str, list[float]]):
    """ragteam's loss for one micro-batch of ``Experience``: clipped surrogate, clipped value
    loss (GAE only) and the k3 reference KL, each recording its statistics in ``stats``."""
    use_critic = settings.advantage == "gae"

    def loss_of(group, outputs):
        batch, logprobs, values = outputs
        width = batch.completion_ids.shape[1]
        device = logprobs.device
        old = _padded((e.old_logprobs for e in group), width).to(device)
        advantages = torch.tensor([e.advantage for e in group], device=device)
        loss, info = policy_loss(logprobs, old, advantages, batch.completion_mask, settings.clip)
        stats["policy_loss"].append(loss.item())
        stats["clip_frac"].append(info["clip_frac"])
        stats["approx_kl_old"].append(info["approx_kl_old"])
        if use_critic:
            v_loss = value_loss(values, torch.tensor([e.value for e in group], device=device),
                                torch.tensor([e.returns for e in group], device=device),
                                settings.value_clip)
            loss = loss + settings.vf_coef * v_loss
            stats["value_loss"].append(v_loss.item())
        if settings.kl_coef and settings.kl_in == "loss":
            kl = kl_to_reference(logprobs, _padded((e.ref_logprobs for e in group), width).to(device),
                                 batch.completion_mask)
            loss = loss + settings.kl_coef * kl
            stats["kl_ref"].append(kl.item())
        return loss

    return loss_of


def update(engine, items: Sequence, settings: PPOSettings, pad_id: int, shuffle_seed: int,
           loss=ppo_loss) -> dict[str, float]:
    """Epochs × shuffled mini-batches of PPO on the shared model; returns mean statistics.
    ``loss(settings, stats)`` makes the micro-batch loss (another library's losses plug in here;
    its items need only ``prompt_ids``, ``completion_ids``, ``temperature`` and ``n_tokens``)."""
    model: PolicyValueModel = engine.module
    model.train()
    stats: dict[str, list[float]] = defaultdict(list)
    rng = random.Random(shuffle_seed)
    loss_of = loss(settings, stats)
    tokens, started = 0, time.perf_counter()
    for _ in range(settings.epochs):
        done, norms = optimize_pass(engine, items, pad_id, settings.minibatch_size,
                                    settings.micro_batch_tokens, rng, loss_of)
        tokens += done
        stats["grad_norm"] += norms
    elapsed = time.perf_counter() - started
    model.eval()
    out = {k: sum(v) / len(v) for k, v in stats.items() if v}
    out.update(update_tokens=tokens, update_s=elapsed, tokens_per_s=tokens / max(elapsed, 1e-9))
    return out


def reference_kl(items: Sequence[Experience]) -> float:
    """Mean per-token log π_old − log π_ref over the rollout (how far the policy has moved)."""
    pairs = [(o - r) for e in items for o, r in zip(e.old_logprobs, e.ref_logprobs)]
    return sum(pairs) / len(pairs) if pairs else 0.0

