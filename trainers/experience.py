"""From a finished run's transitions to the learner's experience: one item per trained call.

Ordering follows JADE's flattening: by turn (the JADE round), then by step within it. Calls made by
frozen policies (MAO-ARAG's executors, QAgent's generator) are part of the environment for the
learner; a reward they were given moves to the trained call just before them (or, when none
precedes, the first one after), which is where GAE with γ = 1 would have carried it anyway.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Collection, Sequence

from ragteam.nodes.tracing import Transition


@dataclass
class Experience:
    trajectory: str                 # run id: GAE runs within one trajectory
    group: str                      # question id: GRPO normalizes within one group
    role: str
    prompt_ids: list[int]
    completion_ids: list[int]
    old_logprobs: list[float]       # behaviour log-probs recorded at sampling time
    temperature: float
    reward: float                   # shared: GAE carries it to earlier calls
    local_reward: float = 0.0       # this call's own (format penalty): its advantage only
    value: float = 0.0              # critic's estimate at rollout time
    advantage: float = 0.0
    returns: float = 0.0
    ref_logprobs: list[float] = field(default_factory=list)
    workflow: str = ""              # the workflow its run's first plan chose (the question's):
                                    # GRPO by workflow compares executions of the same plan
    outcome: float = 0.0            # its run's task score (F1), the same on every call of the run:
                                    # groups whose outcomes tie are compared by cost alone
    written: bool = False           # the reply was written for the role, not sampled
    weight_version: int = 0         # the learner's version it was sampled under (Transition's)
    # the sampling engine's log-probs when π_old is the learner's own (ppo.behaviour_correction: tis)
    behaviour_logprobs: list[float] = field(default_factory=list)

    @property
    def n_tokens(self) -> int:
        return len(self.prompt_ids) + len(self.completion_ids)


def to_experiences(transitions: Sequence[Transition], rewards: Sequence[float], group: str,
                   train_roles: Collection[str] | None = None,
                   local: Sequence[float] | None = None, workflow: str = "",
                   outcome: float = 0.0) -> list[Experience]:
    """Trained calls (optionally only of ``train_roles``) in flattened order, carrying the
    rewards of the others as described in the module docstring. Calls with an empty completion
    have no action tokens to update and pass their reward on the same way. Local rewards belong
    to their own call: a non-learning call's local reward is dropped."""
    if len(transitions) != len(rewards):
        raise ValueError(f"{len(transitions)} transitions but {len(rewards)} rewards")
    order = sorted(range(len(transitions)), key=lambda i: (transitions[i].turn, transitions[i].step))

    def learns(t: Transition) -> bool:
        return t.trained and bool(t.completion_ids) and (train_roles is None or t.role in train_roles)

    items: list[Experience] = []
    carried = 0.0  # rewards of non-learning calls seen before the first learning one
    for i in order:
        t = transitions[i]
        if not learns(t):
            if items:
                items[-1].reward += rewards[i]
            else:
                carried += rewards[i]
            continue
        items.append(Experience(
            trajectory=t.run_id, group=group, role=t.role, prompt_ids=list(t.prompt_ids),
            completion_ids=list(t.completion_ids), old_logprobs=list(t.logprobs),
            temperature=t.temperature, reward=rewards[i] + carried,
            local_reward=local[i] if local is not None else 0.0, workflow=workflow, outcome=outcome,
            written=t.written, weight_version=t.weight_version))
        carried = 0.0
    return items
