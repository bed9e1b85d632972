"""Advantage estimators over flattened trajectories, registered by name (``ppo.advantage``).

JADE (Alg. 2) flattens a run's hierarchical rounds and steps into one sequence and runs GAE over
it, so a terminal team reward reaches the planner of round 1 through the critic's bootstrap.
GRPO replaces the critic by the spread of several rollouts of the same question;
``grpo_by_workflow`` compares a planner's choice across workflows and its executors' work
within one.

An estimator takes the step's trajectories (run id → its calls, in flattened order) and the PPO
settings, and sets every call's ``advantage`` and ``returns`` (the critic's target). Add one with
``@register_advantage("name")``; ``assign_advantages`` is what the learner calls.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import TYPE_CHECKING, Callable, Literal, Protocol, Sequence

if TYPE_CHECKING:
    from ragteam.trainers.experience import Experience


class AdvantageSettings(Protocol):
    """What the estimators and ``assign_advantages`` read of the PPO settings
    (``trainers.algorithms.settings.PPOSettings`` has these and more)."""

    advantage: str          # the registered estimator's name
    gamma: float
    lam: float
    whiten_advantages: bool
    kl_coef: float
    kl_in: Literal["loss", "reward"]  # "reward": the KL penalty comes off the reward here
    plan_roles: Sequence[str]         # grpo_by_workflow: the roles whose first call in a run chooses
                                      # the question's workflow


Estimator = Callable[["dict[str, list[Experience]]", AdvantageSettings], None]
ADVANTAGE_ESTIMATORS: dict[str, Estimator] = {}


def register_advantage(name: str) -> Callable[[Estimator], Estimator]:
    """Register an advantage estimator under ``name`` (the value of ``ppo.advantage``)."""
    def add(estimator: Estimator) -> Estimator:
        ADVANTAGE_ESTIMATORS[name] = estimator
        return estimator
    return add


# -- pure functions over one trajectory or group ----------------------------------------------------
def gae(rewards: Sequence[float], values: Sequence[float], gamma: float = 1.0,
        lam: float = 0.95) -> tuple[list[float], list[float]]:
    """Generalized advantage estimation for one finished trajectory (value after the end = 0).

    rewards, values: [T] → (advantages [T], returns [T]) with returns = advantages + values."""
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


def group_normalized(scores: Sequence[float], eps: float = 1e-6) -> list[float]:
    """GRPO: (score − group mean) / (group std + eps) among rollouts of one question. [G] → [G]"""
    mean = sum(scores) / len(scores)
    std = math.sqrt(sum((s - mean) ** 2 for s in scores) / len(scores))
    return [(s - mean) / (std + eps) for s in scores]


def whiten(values: Sequence[float], eps: float = 1e-8) -> list[float]:
    """Center and scale to unit variance across the batch. [N] → [N]"""
    if len(values) < 2:
        return list(values)
    mean = sum(values) / len(values)
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))
    return [(v - mean) / (std + eps) for v in values]


# -- the registered estimators ---------------------------------------------------------------------
@register_advantage("gae")
def gae_advantages(trajectories: "dict[str, list[Experience]]", settings: AdvantageSettings) -> None:
    """GAE within each trajectory on the critic's rollout-time values."""
    for steps in trajectories.values():
        advantages, returns = gae([e.reward for e in steps], [e.value for e in steps],
                                  settings.gamma, settings.lam)
        for e, a, r in zip(steps, advantages, returns):
            e.advantage, e.returns = a, r


def run_standings(trajectories: "dict[str, list[Experience]]", key: Callable[["Experience"], object]
                  ) -> dict[str, float]:
    """Each run's summed reward, normalized among the runs that share ``key`` of their first
    call (a run alone under its key gets 0: nothing to compare with). {run id: standing}"""
    groups: dict[object, list[str]] = defaultdict(list)
    for run_id, steps in trajectories.items():
        groups[key(steps[0])].append(run_id)
    standing = {}
    for run_ids in groups.values():
        totals = [sum(e.reward for e in trajectories[r]) for r in run_ids]
        standing.update(zip(run_ids, group_normalized(totals) if len(totals) > 1 else [0.0]))
    return standing


@register_advantage("grpo")
def grpo_advantages(trajectories: "dict[str, list[Experience]]", settings: AdvantageSettings) -> None:
    """Each run's standing within its question's group, on every call of the run."""
    standing = run_standings(trajectories, lambda e: e.group)
    for run_id, steps in trajectories.items():
        for e in steps:
            e.advantage = e.returns = standing[run_id]


@register_advantage("grpo_by_workflow")
def grpo_by_workflow_advantages(trajectories: "dict[str, list[Experience]]", settings: AdvantageSettings) -> None:
    """Two comparisons per question. The call that chose the question's workflow (a run's
    first call, when its role is one of ``plan_roles``) gets its run's standing among all the
    question's runs: which plan pays. Every other call gets its run's standing among the
    question's runs whose first plan chose the same workflow: which execution of that plan pays.
    That includes later plans inside the run (JADE plans each sub-question in a round of its
    own) and how many sub-questions a decomposition wrote: both are part of carrying it out.

    Why: under plain GRPO an executor shares its run's standing among plans. With forced
    workflows, a decomposer whose workflow loses to one retrieval on most questions is then
    pushed down whatever it wrote (a PhantomWiki run gave its calls −1.41, the group's floor,
    in 38 of 40); compared with another decomposition of the same question, a better one rises.
    Needs two or more runs per workflow (``forced_samples``); a run alone in its workflow
    teaches its executors nothing."""
    plan = run_standings(trajectories, lambda e: e.group)
    execution = run_standings(trajectories, lambda e: (e.group, e.workflow))
    for run_id, steps in trajectories.items():
        for i, e in enumerate(steps):
            chose_the_workflow = i == 0 and e.role in settings.plan_roles
            e.advantage = e.returns = plan[run_id] if chose_the_workflow else execution[run_id]


def assign_advantages(items: "Sequence[Experience]", settings: AdvantageSettings) -> None:
    """The configured estimator over ``items`` grouped by trajectory (flattened order kept),
    after the KL-in-reward penalty when that is on; then each call's local reward is added to
    its own advantage (the critic's targets stay the shared return), then whitening."""
    if settings.advantage not in ADVANTAGE_ESTIMATORS:
        raise ValueError(f"unknown advantage estimator {settings.advantage!r}; known: "
                         f"{', '.join(ADVANTAGE_ESTIMATORS)}")
    if settings.kl_coef and settings.kl_in == "reward":
        for e in items:
            e.reward -= settings.kl_coef * sum(o - r for o, r in zip(e.old_logprobs, e.ref_logprobs))
    trajectories: dict[str, list[Experience]] = defaultdict(list)
    for e in items:
        trajectories[e.trajectory].append(e)
    ADVANTAGE_ESTIMATORS[settings.advantage](trajectories, settings)
    for e in items:
        e.advantage += e.local_reward
    if settings.whiten_advantages:
        for e, a in zip(items, whiten([e.advantage for e in items])):
            e.advantage = a
