"""PPO losses on padded [batch, completion] tensors. ``mask`` is 1 on real completion tokens and
0 on padding; prompt tokens never reach these functions (the model returns completion positions
only), so they cannot carry loss.

Aggregation: token mean within a transition, then mean over transitions — every agent step
weighs the same however long its completion is (a 3-token planner topology is as much an action
as a 40-token answer)."""

from __future__ import annotations

import torch


def per_transition_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return ((values * mask).sum(-1) / mask.sum(-1).clamp(min=1)).mean()


def policy_loss(logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor,
                mask: torch.Tensor, clip: float = 0.2) -> tuple[torch.Tensor, dict[str, float]]:
    """Clipped surrogate; ``advantages`` is one value per transition, broadcast over its tokens."""
    ratio = torch.exp(logprobs - old_logprobs)
    adv = advantages.unsqueeze(-1)
    unclipped, clipped = ratio * adv, ratio.clamp(1 - clip, 1 + clip) * adv
    loss = per_transition_mean(-torch.minimum(unclipped, clipped), mask)
    with torch.no_grad():
        clip_frac = per_transition_mean((clipped < unclipped).float(), mask)
        approx_kl = per_transition_mean(old_logprobs - logprobs, mask)
    return loss, {"clip_frac": clip_frac.item(), "approx_kl_old": approx_kl.item()}


def value_loss(values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor,
               clip: float | None = 0.2) -> torch.Tensor:
    """0.5·max((V−R)², (V_clipped−R)²) with V kept within ``clip`` of the rollout-time value."""
    loss = (values - returns) ** 2
    if clip is not None:
        clipped = old_values + (values - old_values).clamp(-clip, clip)
        loss = torch.maximum(loss, (clipped - returns) ** 2)
    return 0.5 * loss.mean()


def kl_to_reference(logprobs: torch.Tensor, ref_logprobs: torch.Tensor,
                    mask: torch.Tensor) -> torch.Tensor:
    """The non-negative k3 estimator exp(r) − r − 1 with r = log π_ref − log π."""
    r = ref_logprobs - logprobs
    return per_transition_mean(torch.exp(r) - r - 1, mask)
