"""Advantage estimators over flattened trajectories (one entry per trainable transition).

JADE (Alg. 2) flattens a run's hierarchical rounds and steps into one sequence and runs GAE over
it, so a terminal team reward reaches the planner of round 1 through the critic's bootstrap.
GRPO replaces the critic by the spread of several rollouts of the same question.
"""

from __future__ import annotations

import math
from typing import Sequence


def gae(rewards: Sequence[float], values: Sequence[float], gamma: float = 1.0,
        lam: float = 0.95) -> tuple[list[float], list[float]]:
    """Generalized advantage estimation for one finished trajectory (value after the end = 0).

    Returns (advantages, returns) with returns = advantages + values (the critic's targets)."""
    if len(rewards) != len(values):
        raise ValueError(f"{len(rewards)} rewards but {len(values)} values")
    advantages = [0.0] * len(rewards)
    running = 0.0
    for t in reversed(range(len(rewards))):
        next_value = values[t + 1] if t + 1 < len(values) else 0.0
        delta = rewards[t] + gamma * next_value - values[t]
        running = delta + gamma * lam * running
        advantages[t] = running
    return advantages, [a + v for a, v in zip(advantages, values)]


def discounted_returns(rewards: Sequence[float], gamma: float = 1.0) -> list[float]:
    returns, running = [0.0] * len(rewards), 0.0
    for t in reversed(range(len(rewards))):
        running = rewards[t] + gamma * running
        returns[t] = running
    return returns


def group_normalized(scores: Sequence[float], eps: float = 1e-6) -> list[float]:
    """GRPO: (score − group mean) / (group std + eps) among rollouts of one question."""
    mean = sum(scores) / len(scores)
    std = math.sqrt(sum((s - mean) ** 2 for s in scores) / len(scores))
    return [(s - mean) / (std + eps) for s in scores]


def whiten(values: Sequence[float], shift_mean: bool = True, eps: float = 1e-8) -> list[float]:
    """Scale to unit variance across the batch (and center unless ``shift_mean`` is False)."""
    if len(values) < 2:
        return list(values)
    mean = sum(values) / len(values)
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))
    return [((v - mean) if shift_mean else v) / (std + eps) for v in values]
