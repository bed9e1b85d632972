"""The PPO loss of a micro-batch and the batching of a buffer, pure functions over ``Experience``
(the learner runs them on its model: ``trainers.learner.ppo_update``).

``ppo_loss`` combines the registered policy loss, the clipped value loss and the reference KL
(``trainers.algorithms.losses``); ``LossTerms`` lets another library's pieces plug in. A pass
over the buffer is shuffled mini-batches (``minibatches``: one optimizer step each), each split
into micro-batches that fit a token budget (``micro_batches``), never splitting the calls that
share a prompt (``prompt_groups``).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

import torch

from ragteam.trainers.algorithms.losses import MAX_LOG_RATIO, POLICY_LOSSES, kl_to_reference, masked_mean, value_loss
from ragteam.trainers.algorithms.settings import PPOSettings
from ragteam.trainers.experience import Experience


def prompt_groups(items: Sequence[Experience]) -> list[list[Experience]]:
    """Calls grouped by identical prompt (first-seen order): the unit that is computed once
    (``trainers.learner.batches.segments`` packs each such group as one segment)."""
    by_prompt: dict[tuple[int, ...], list[Experience]] = {}
    for e in items:
        by_prompt.setdefault(tuple(e.prompt_ids), []).append(e)
    return list(by_prompt.values())


def _segment_tokens(group: Sequence[Experience]) -> int:
    """Real tokens of a prompt group computed once: the prompt plus every completion."""
    return len(group[0].prompt_ids) + sum(len(e.completion_ids) for e in group)


def micro_batches(items: Sequence[Experience], token_budget: int,
                  share_prompts: bool = True) -> list[list[Experience]]:
    """Consecutive groups within the token budget. Shared (default): calls with one prompt stay
    together (one segment) and the budget counts real tokens, each prompt once; a segment larger
    than the budget is a micro-batch of its own. Unshared: padded size (rows × longest row)."""
    if not share_prompts:
        groups: list[list[Experience]] = []
        for item in sorted(items, key=lambda e: e.n_tokens):
            current = groups[-1] if groups else None
            if current and (len(current) + 1) * max(item.n_tokens, current[-1].n_tokens) <= token_budget:
                current.append(item)
            else:
                groups.append([item])
        return groups
    batches: list[list[Experience]] = []
    used = 0
    for segment in sorted(prompt_groups(items), key=_segment_tokens):
        cost = _segment_tokens(segment)
        if batches and used + cost <= token_budget:
            batches[-1].extend(segment)
            used += cost
        else:
            batches.append(list(segment))
            used = cost
    return batches


def minibatches(items: Sequence[Experience], size: int, rng: random.Random) -> list[list[Experience]]:
    """A shuffled pass in mini-batches of at least ``size`` calls that never split a shared
    prompt: prompt groups are shuffled and dealt whole, so each is still computed once."""
    groups = prompt_groups(items)
    rng.shuffle(groups)
    batches, current = [], []
    for group in groups:
        current += group
        if len(current) >= size:
            batches.append(current)
            current = []
    return batches + ([current] if current else [])


def _padded(rows: Iterable[Sequence[float]], width: int) -> torch.Tensor:
    return torch.tensor([list(r) + [0.0] * (width - len(r)) for r in rows], dtype=torch.float32)


@dataclass(frozen=True)
class LossTerms:
    """The three pieces of the PPO loss, on [B, C] completion tensors (``mask`` [B, C]):

    - ``policy(logprobs, old, advantages [B] or [B, C], mask, clip_low, clip_high, aggregation)`` →
      (loss, {"clip_frac", "approx_kl_old"});
    - ``value(values [B], old_values [B], returns [B], clip)`` → loss;
    - ``kl(logprobs, ref_logprobs, mask, aggregation)`` → loss.

    ragteam's own are the registered policy loss and ``trainers.algorithms.losses``; the Ray
    backend plugs in OpenRLHF's (``trainers/backends/openrlhf.py``)."""

    policy: Callable | None = None  # None: the policy loss the settings name (the registry)
    value: Callable = value_loss
    kl: Callable = kl_to_reference


def ppo_loss(settings: PPOSettings, stats: dict[str, list[float]], terms: LossTerms = LossTerms()):
    """The loss for one micro-batch of ``Experience``: the policy loss (clip bounds,
    aggregation), the clipped value loss (GAE only) and the k3 reference KL, each recording its
    statistics in ``stats``."""
    use_critic = settings.advantage == "gae"
    policy = terms.policy or POLICY_LOSSES[settings.policy_loss]
    clip_low, clip_high = settings.clip_bounds

    def loss_of(group, outputs):
        batch, logprobs, values = outputs
        width = batch.completion_ids.shape[1]
        device = logprobs.device
        old = _padded((e.old_logprobs for e in group), width).to(device)
        advantages = torch.tensor([e.advantage for e in group], device=device)
        if settings.behaviour_correction == "tis":
            weights = tis_weights(group, old, settings.tis_cap)
            stats["tis_weight"].append(masked_mean(weights, batch.completion_mask).item())
            advantages = advantages.unsqueeze(-1) * weights  # per token: the surrogate scales with it
        loss, info = policy(logprobs, old, advantages, batch.completion_mask, clip_low, clip_high,
                            settings.loss_aggregation)
        stats["policy_loss"].append(loss.item())
        stats["clip_frac"].append(info["clip_frac"])
        stats["approx_kl_old"].append(info["approx_kl_old"])
        if use_critic:
            v_loss = terms.value(values, torch.tensor([e.value for e in group], device=device),
                                 torch.tensor([e.returns for e in group], device=device),
                                 settings.value_clip)
            loss = loss + settings.vf_coef * v_loss
            stats["value_loss"].append(v_loss.item())
        if settings.kl_coef and settings.kl_in == "loss":
            kl = terms.kl(logprobs, _padded((e.ref_logprobs for e in group), width).to(device),
                          batch.completion_mask, settings.loss_aggregation)
            loss = loss + settings.kl_coef * kl
            stats["kl_ref"].append(kl.item())
        return loss

    return loss_of


def tis_weights(group: Sequence[Experience], old: torch.Tensor, cap: float) -> torch.Tensor:
    """Truncated importance weights [B, C]: min(π_old / π_behaviour, ``cap``) per token of each
    call that was sampled (``behaviour_logprobs``), 1 on a written call's tokens (never sampled)
    and on padding. ``old``: the learner's π_old, [B, C]. A constant of the loss (no gradient):
    it reweighs the clipped surrogate of samples that another policy drew."""
    behaviour = _padded((e.behaviour_logprobs or [] for e in group), old.shape[1]).to(old.device)
    sampled = torch.zeros_like(old, dtype=torch.bool)
    for row, e in enumerate(group):
        sampled[row, :len(e.behaviour_logprobs)] = True
    ratio = torch.exp((old - behaviour).clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO)).clamp(max=cap)
    return torch.where(sampled, ratio, torch.ones_like(old)).detach()


def reference_kl(items: Sequence[Experience]) -> float:
    """Mean per-token log π_old − log π_ref over the rollout (how far the policy has moved)."""
    pairs = [(o - r) for e in items for o, r in zip(e.old_logprobs, e.ref_logprobs)]
    return sum(pairs) / len(pairs) if pairs else 0.0


def rollout_gap(items: Sequence[Experience], learner_logprobs: Sequence[Sequence[float]],
                behaviour_logprobs: Sequence[Sequence[float]] | None = None,
                version: int | None = None) -> dict[str, float]:
    """How far the rollout engine's behaviour log-probs (``behaviour_logprobs[i]``, else
    ``items[i].old_logprobs``) are from the learner's on the same sampled ids
    (``learner_logprobs[i]``, computed before the update): after a sync they differ by precision
    alone, so a gap that grows over training means the engine samples from another policy than
    the one PPO corrects for. Per completion token: ``rollout_gap/mean_abs``, ``/max_abs``,
    ``/mean`` (behaviour − learner, a k1 estimate of KL(behaviour‖learner)), ``/<role>/mean_abs``
    per role and, given the learner's ``version``, ``/lag<k>/mean_abs`` per version lag (calls
    sampled k versions back). Empty when no call was sampled (all written)."""
    behaviour = behaviour_logprobs if behaviour_logprobs is not None else [e.old_logprobs for e in items]
    by_role: dict[str, list[float]] = {}
    by_lag: dict[int, list[float]] = {}
    for e, learner, sampled in zip(items, learner_logprobs, behaviour, strict=True):
        diffs = [b - l for b, l in zip(sampled, learner, strict=True)]
        by_role.setdefault(e.role, []).extend(diffs)
        if version is not None:
            by_lag.setdefault(version - e.weight_version, []).extend(diffs)
    every = [g for role in by_role.values() for g in role]
    if not every:
        return {}
    mean_abs = lambda gaps: sum(map(abs, gaps)) / len(gaps)  # noqa: E731
    out = {"rollout_gap/mean_abs": mean_abs(every), "rollout_gap/max_abs": max(map(abs, every)),
           "rollout_gap/mean": sum(every) / len(every)}
    out.update({f"rollout_gap/{role}/mean_abs": mean_abs(g) for role, g in by_role.items() if g})
    out.update({f"rollout_gap/lag{lag}/mean_abs": mean_abs(g) for lag, g in by_lag.items() if g})
    return out
