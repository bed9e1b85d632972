"""Advantage estimators over flattened trajectories, registered by name (``ppo.advantage``).

JADE (Alg. 2) flattens a run's hierarchical rounds and steps into one sequence and runs GAE over
it, so a terminal team reward reaches the planner of round 1 through the critic's bootstrap.
GRPO replaces the critic by the spread of several rollouts of the same question;
``grpo_by_workflow`` compares a planner's choice across workflows and its executors' work
within one.

An estimator takes the step's trajectories (run id → its calls, in flattened order) and the PPO
settings, and sets every call's ``advantage`` and ``returns`` (the critic's target). Add one with
``@register_advantage("name")``; ``assign_advantages`` is what the learner calls.

Group comparisons keep the signal's sign and size (``group_standings``):

- ``ppo.group_std`` (default off, Dr. GRPO): a run's standing is its reward minus the group's
  mean, not divided by the group's spread. Divided, a group whose runs differ by a cost term
  alone (every run scored F1 0) turns that 0.06 of cost into a standing of ±1, as strong as a
  40-point win: on multi-hop questions nobody solves yet, that teaches "never decompose".
- ``ppo.tied_groups``: a group whose runs' outcome scores (F1) all tie either compares them by
  their cost alone, never scaled up (``cost``, default: an unusable answer is cheaper given
  cheaply), or teaches nothing (``zero``).
- ``ppo.plan_weight``: the deciding call's advantage (a run's first call, by one of
  ``plan_roles``) is multiplied by it: one planner reply among ~9 calls is otherwise ~5% of the
  loss, however much it decided.
- ``ppo.written_replies``: a deciding reply training wrote (a forced workflow) was not sampled;
  ``skip`` (default) keeps it in its group's comparison but out of the update, ``importance``
  weighs its advantage by π_old(reply) (the behaviour policy put all its mass on it), ``menu``
  turns the group's written alternatives into the exact expected-reward gradient of the
  planner's choice among them (``menu_advantages``: when it chooses among a menu,
  ``Settings.planning.choices``, and the group writes each workflow of it once), ``sampled`` trains
  it as if sampled.
  Written replies that decide nothing (sub-question plans the setup writes) are never trained.
- ``ppo.batch_baseline`` λ (default 0): each deciding call's advantage, as trained, less λ × the
  mean over the step's deciding calls of the same workflow. Biased on purpose: an action's
  baseline is not a control variate; it damps what every question's update shares. A planner's
  prompts share ~90% of their tokens, so the preference all questions share moves 20–40× faster
  than what tells them apart, and a small imbalance between the questions' pushes carries every
  plan one way (docs/results/learning_gate.md, runs 20–37). λ = 1 removes the shared part to
  first order (and with it anything a step teaches every question alike); λ < 1 keeps 1 − λ of it.
  ``ppo.keep_unanimous`` keeps what every question agrees on: when all of a workflow's pushes
  have one sign, the smallest of them stays shared (nothing pays anywhere, and the cheaper
  workflow is better for every question); where the questions disagree, their mean is removed.
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
    plan_roles: Sequence[str]         # the roles whose first call in a run chooses the question's
                                      # workflow (grpo_by_workflow, plan_weight)
    group_std: bool                   # divide group standings by the group's std (off: Dr. GRPO)
    tied_groups: Literal["cost", "zero"]  # groups whose outcomes all tie: cost-only, or nothing
    plan_weight: float                # the deciding call's advantage multiplier
    written_replies: Literal["skip", "importance", "menu", "sampled"]
    batch_baseline: float             # the share of each workflow's mean deciding advantage removed
    keep_unanimous: bool              # with batch_baseline: the part every push agrees on stays


Estimator = Callable[["dict[str, list[Experience]]", AdvantageSettings], None]
ADVANTAGE_ESTIMATORS: dict[str, Estimator] = {}


READS_VALUES: set[str] = set()  # estimators that read every call's rollout-time value (a critic)


def register_advantage(name: str, reads_values: bool = False) -> Callable[[Estimator], Estimator]:
    """Register an advantage estimator under ``name`` (the value of ``ppo.advantage``);
    ``reads_values``: it reads the critic's value of every call, trained or not."""
    def add(estimator: Estimator) -> Estimator:
        ADVANTAGE_ESTIMATORS[name] = estimator
        if reads_values:
            READS_VALUES.add(name)
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


def group_standings(totals: Sequence[float], outcomes: Sequence[float], scale_by_std: bool = False,
                    tied: str = "cost", eps: float = 1e-6) -> list[float]:
    """Each run's standing in its group: total reward − the group's mean (÷ the group's std with
    ``scale_by_std``). When every run's outcome score ties, the totals differ by cost alone:
    ``tied="cost"`` keeps that difference as it is (never scaled up to a full standing),
    ``tied="zero"`` gives every run 0. totals, outcomes: [G] → [G]"""
    if len(totals) != len(outcomes):
        raise ValueError(f"{len(totals)} totals but {len(outcomes)} outcomes")
    tie = max(outcomes) - min(outcomes) <= eps
    if tie and tied == "zero":
        return [0.0] * len(totals)
    if scale_by_std and not tie:
        return group_normalized(totals, eps)
    mean = sum(totals) / len(totals)
    return [t - mean for t in totals]


def whiten(values: Sequence[float], eps: float = 1e-8) -> list[float]:
    """Center and scale to unit variance across the batch. [N] → [N]"""
    if len(values) < 2:
        return list(values)
    mean = sum(values) / len(values)
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))
    return [(v - mean) / (std + eps) for v in values]


# -- the registered estimators ---------------------------------------------------------------------
@register_advantage("gae", reads_values=True)
def gae_advantages(trajectories: "dict[str, list[Experience]]", settings: AdvantageSettings) -> None:
    """GAE within each trajectory on the critic's rollout-time values."""
    for steps in trajectories.values():
        advantages, returns = gae([e.reward for e in steps], [e.value for e in steps],
                                  settings.gamma, settings.lam)
        for e, a, r in zip(steps, advantages, returns):
            e.advantage, e.returns = a, r


def run_standings(trajectories: "dict[str, list[Experience]]", key: Callable[["Experience"], object],
                  settings: AdvantageSettings) -> dict[str, float]:
    """Each run's summed reward, compared among the runs that share ``key`` of their first call
    (``group_standings``; a run alone under its key gets 0: nothing to compare with). {run id: standing}"""
    groups: dict[object, list[str]] = defaultdict(list)
    for run_id, steps in trajectories.items():
        groups[key(steps[0])].append(run_id)
    standing = {}
    for run_ids in groups.values():
        totals = [sum(e.reward for e in trajectories[r]) for r in run_ids]
        outcomes = [trajectories[r][0].outcome for r in run_ids]
        standing.update(zip(run_ids, group_standings(totals, outcomes, settings.group_std, settings.tied_groups)
                            if len(totals) > 1 else [0.0]))
    return standing


@register_advantage("grpo")
def grpo_advantages(trajectories: "dict[str, list[Experience]]", settings: AdvantageSettings) -> None:
    """Each run's standing within its question's group, on every call of the run."""
    standing = run_standings(trajectories, lambda e: e.group, settings)
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
    plan = run_standings(trajectories, lambda e: e.group, settings)
    execution = run_standings(trajectories, lambda e: (e.group, e.workflow), settings)
    for run_id, steps in trajectories.items():
        for i, e in enumerate(steps):
            chose_the_workflow = i == 0 and e.role in settings.plan_roles
            e.advantage = e.returns = plan[run_id] if chose_the_workflow else execution[run_id]


def deciding_calls(trajectories: "dict[str, list[Experience]]", plan_roles: Sequence[str]) -> "list[Experience]":
    """Each run's first call when one of ``plan_roles`` made it: the call that chose the
    question's workflow."""
    return [steps[0] for steps in trajectories.values() if steps and steps[0].role in plan_roles]


def written_weight(e: "Experience", rule: str, deciding: bool = True) -> float:
    """How much a call's advantage counts by how its reply came to be: 1 for a sampled reply; for
    a written one that chose its run's workflow (a forced workflow: an alternative of the decision
    the group compares) 0 (``skip``), π_old(reply) (``importance``: the behaviour policy gave it
    probability 1, so that is the likelihood ratio; ``menu`` normalises it over the group's
    written alternatives, ``menu_advantages``) or 1 (``sampled``). A written call that decides
    nothing (a sub-question's plan or a decomposition the setup wrote) is never trained: its
    reply is the setup's, and its run's standing is not its doing."""
    if not e.written:
        return 1.0
    if not deciding or rule == "skip":
        return 0.0
    if rule == "sampled":
        return 1.0
    return math.exp(min(sum(e.old_logprobs), 0.0))


def menu_advantages(written: "Sequence[Experience]") -> None:
    """``written_replies: menu``, for the written deciding calls of a step: in each group, with p
    the planner's probability of each written reply normalised over them (π_old), each advantage
    becomes p_a (A_a − Σ_b p_b A_b). The p-weighted baseline makes them sum to 0, so the tokens'
    gradient Σ_a p_a (A_a − Ā_p) ∇ log π(a) is the expected-reward gradient of the menu's softmax
    (the normaliser's term cancels; exactly under ``loss_aggregation: per_token``, while per call
    each reply's push is also divided by its token count): a question's push on its two-way choice is
    p (1 − p) ΔA, which fades once the question's choice is made, where the uniform-mean baseline
    keeps pushing the whole planner toward whichever workflow the step's sums favour. [N] → [N]."""
    by_group: dict[str, list[Experience]] = defaultdict(list)
    for e in written:
        by_group[e.group].append(e)
    for calls in by_group.values():
        likelihoods = [math.exp(min(sum(e.old_logprobs), 0.0)) for e in calls]
        mass = sum(likelihoods)
        p = [likelihood / mass if mass > 0 else 0.0 for likelihood in likelihoods]
        baseline = sum(p_a * e.advantage for p_a, e in zip(p, calls))
        for p_a, e in zip(p, calls):
            e.advantage = p_a * (e.advantage - baseline)


def written_weights(trajectories: "dict[str, list[Experience]]", settings: AdvantageSettings) -> dict[int, float]:
    """``written_weight`` of every call, by ``id``."""
    deciding = {id(e) for e in deciding_calls(trajectories, settings.plan_roles)}
    return {id(e): written_weight(e, settings.written_replies, id(e) in deciding)
            for steps in trajectories.values() for e in steps}


def trained_calls(items: "Sequence[Experience]", settings: AdvantageSettings) -> "list[Experience]":
    """The calls an update trains: every sampled one, and the written ones ``written_weight``
    keeps (order kept)."""
    trajectories: dict[str, list[Experience]] = defaultdict(list)
    for e in items:
        trajectories[e.trajectory].append(e)
    weights = written_weights(trajectories, settings)
    return [e for e in items if weights[id(e)] > 0]


def assign_advantages(items: "Sequence[Experience]", settings: AdvantageSettings) -> None:
    """The configured estimator over ``items`` grouped by trajectory (flattened order kept),
    after the KL-in-reward penalty when that is on; then each call's local reward is added to
    its own advantage (the critic's targets stay the shared return), then whitening; last, the
    deciding calls' advantages are scaled by ``plan_weight`` and written replies' by
    ``written_weight`` (the learner leaves the calls it zeroes out of the update: ``trained_calls``)."""
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
    deciding = deciding_calls(trajectories, settings.plan_roles)
    for e in deciding:
        e.advantage *= settings.plan_weight
    weights = written_weights(trajectories, settings)
    menu = [e for e in deciding if e.written] if settings.written_replies == "menu" else []
    in_menu = {id(e) for e in menu}
    for e in items:
        if id(e) not in in_menu:
            e.advantage *= weights[id(e)]
    menu_advantages(menu)
    if settings.batch_baseline:
        remove_shared_push([e for e in deciding if weights[id(e)] > 0], settings.batch_baseline,
                           settings.keep_unanimous)


def unanimous_part(pushes: Sequence[float]) -> float:
    """What every push agrees on: the smallest in size when all have one sign, else 0. [N] → []"""
    if all(a > 0 for a in pushes):
        return min(pushes)
    if all(a < 0 for a in pushes):
        return max(pushes)
    return 0.0


def remove_shared_push(deciding: "Sequence[Experience]", share: float, keep_unanimous: bool = False) -> None:
    """``ppo.batch_baseline``: each call's advantage less ``share`` × the mean advantage of the
    calls (over the step's questions) whose run chose the same workflow; with
    ``keep_unanimous``, less ``share`` × (that mean − ``unanimous_part``). [N] → [N], in place."""
    by_workflow: dict[str, list[Experience]] = defaultdict(list)
    for e in deciding:
        by_workflow[e.workflow].append(e)
    for calls in by_workflow.values():
        pushes = [e.advantage for e in calls]
        shared = sum(pushes) / len(pushes) - (unanimous_part(pushes) if keep_unanimous else 0.0)
        for e in calls:
            e.advantage -= share * shared
