"""PPO losses on padded [B, C] completion tensors (B calls, C their longest completion), each a
small function over one masked-mean helper. ``mask`` is 1 on real completion tokens and 0 on
padding; prompt tokens never reach these functions (the model returns completion positions
only), so they cannot carry loss.

Aggregation (``ppo.loss_aggregation``):
- ``per_call`` (default): token mean within a call, then mean over calls — every agent step
  weighs the same however long its completion is (a 3-token planner topology is as much an
  action as a 40-token answer);
- ``per_token``: one mean over every completion token (longer completions weigh more, as in
  DAPO's token-level loss).

Policy losses are registered by name (``ppo.policy_loss``) with ``@register_policy_loss``.
"""

from __future__ import annotations

from typing import Callable, Literal

import torch

Aggregation = Literal["per_call", "per_token"]
PolicyLossFn = Callable[..., "tuple[torch.Tensor, dict[str, float]]"]
POLICY_LOSSES: dict[str, PolicyLossFn] = {}
MAX_LOG_RATIO = 20.0  # exp(20) ≈ 5e8: past it the ratio only overflows, it never clips usefully


def register_policy_loss(name: str) -> Callable[[PolicyLossFn], PolicyLossFn]:
    """Register a policy loss under ``name`` (the value of ``ppo.policy_loss``)."""
    def add(loss: PolicyLossFn) -> PolicyLossFn:
        POLICY_LOSSES[name] = loss
        return loss
    return add


def masked_mean(values: torch.Tensor, mask: torch.Tensor, aggregation: Aggregation = "per_call") -> torch.Tensor:
    """values, mask: [B, C] → scalar, aggregated as the module docstring says."""
    if aggregation == "per_token":
        return (values * mask).sum() / mask.sum().clamp(min=1)
    return ((values * mask).sum(-1) / mask.sum(-1).clamp(min=1)).mean()


DUAL_CLIP_CAP = 3.0  # the value-scale bound of dual clipping (Ye et al., 2020; verl's clip_ratio_c)


def _clipped_surrogate_loss(logprobs, old_logprobs, advantages, mask, clip_low, clip_high, aggregation,
                            cap: float | None) -> tuple[torch.Tensor, dict[str, float]]:
    """The clipped surrogate of ``ppo_clip`` and, with ``cap``, ``dual_clip``'s floor under
    negative advantages; shapes as in ``ppo_clip_loss``."""
    log_ratio = (logprobs - old_logprobs).clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO)
    ratio = torch.exp(log_ratio)
    adv = advantages.unsqueeze(-1) if advantages.dim() == 1 else advantages  # per call, or per token
    unclipped, clipped = ratio * adv, ratio.clamp(1 - clip_low, 1 + clip_high) * adv
    surrogate = torch.minimum(unclipped, clipped)
    held = clipped < unclipped
    if cap is not None:
        floor = cap * adv
        floored = (adv < 0) & (floor > surrogate)
        surrogate = torch.where(floored, floor, surrogate)
        held = held | floored
    loss = masked_mean(-surrogate, mask, aggregation)
    with torch.no_grad():
        clip_frac = masked_mean(held.float(), mask, aggregation)
        approx_kl = masked_mean(old_logprobs - logprobs, mask, aggregation)
    return loss, {"clip_frac": clip_frac.item(), "approx_kl_old": approx_kl.item()}


@register_policy_loss("ppo_clip")
def ppo_clip_loss(logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor,
                  mask: torch.Tensor, clip_low: float = 0.2, clip_high: float = 0.2,
                  aggregation: Aggregation = "per_call") -> tuple[torch.Tensor, dict[str, float]]:
    """The clipped surrogate with separate bounds: the ratio is kept in [1 − clip_low,
    1 + clip_high] (DAPO's clip-higher when clip_high > clip_low); the log-ratio is clamped to
    ±``MAX_LOG_RATIO`` before ``exp``. logprobs, old_logprobs, mask: [B, C]; advantages: [B],
    one per call, broadcast over its tokens, or [B, C] per token (importance-weighted)."""
    return _clipped_surrogate_loss(logprobs, old_logprobs, advantages, mask, clip_low, clip_high, aggregation, None)


@register_policy_loss("dual_clip")
def dual_clip_loss(logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor,
                   mask: torch.Tensor, clip_low: float = 0.2, clip_high: float = 0.2,
                   aggregation: Aggregation = "per_call",
                   cap: float = DUAL_CLIP_CAP) -> tuple[torch.Tensor, dict[str, float]]:
    """``ppo_clip`` with dual clipping: under a negative advantage the clipped surrogate takes its
    unclipped term whenever the ratio has risen past 1 + clip_high, so one token whose probability
    grew a lot (a stale behaviour log-prob, a policy that moved within the step) weighs its whole
    ratio, up to e^20; here that term is bounded below by ``cap`` × advantage, so such a token
    weighs at most ``cap`` times its advantage and passes no gradient. Positive advantages are
    as in ``ppo_clip``. Shapes as there; ``clip_frac`` counts tokens either bound held."""
    return _clipped_surrogate_loss(logprobs, old_logprobs, advantages, mask, clip_low, clip_high, aggregation, cap)


def policy_loss(logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor,
                mask: torch.Tensor, clip: float = 0.2) -> tuple[torch.Tensor, dict[str, float]]:
    """The symmetric clipped surrogate, per call (``ppo_clip`` with one bound)."""
    return ppo_clip_loss(logprobs, old_logprobs, advantages, mask, clip, clip)


def value_loss(values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor,
               clip: float | None = 0.2) -> torch.Tensor:
    """0.5·max((V−R)², (V_clipped−R)²) with V kept within ``clip`` of the rollout-time value.
    values, old_values, returns: [B] (one value per call) → scalar."""
    loss = (values - returns) ** 2
    if clip is not None:
        clipped = old_values + (values - old_values).clamp(-clip, clip)
        loss = torch.maximum(loss, (clipped - returns) ** 2)
    return 0.5 * loss.mean()


def kl_to_reference(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, mask: torch.Tensor,
                    aggregation: Aggregation = "per_call") -> torch.Tensor:
    """The non-negative k3 estimator exp(r) − r − 1 with r = log π_ref − log π. [B, C] → scalar"""
    r = ref_logprobs - logprobs
    return masked_mean(torch.exp(r) - r - 1, mask, aggregation)
