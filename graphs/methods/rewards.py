"""What a reward scheme is. Each method's module defines its own schemes (its paper's reward);
this module holds the shared vocabulary: a finished run and its gold answer → one reward per call.

A scheme is any object with a ``name``, ``train_roles`` (the roles its paper trains; None = every
role the team trains) and ``__call__(result, example) -> RewardOutcome``; a ``Method`` names its
schemes (``rewards={"exact": ExactAnswer}``, each built with the options ``reward:`` gives) and a
run picks one (``--reward exact``). ``score`` (``graphs.eval.metrics``) grades an answer,
``last_call`` finds the call an outcome reward belongs on, ``format_penalties`` charges each reply
that broke its format. All are ``ragteam.*`` names; docs/compose_your_own_graph.md has a scheme of
ten lines.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, Sequence

from ragteam.graphs.results import RunResult
from ragteam.nodes.tracing import Transition
from ragteam.stores.datasets import QAExample


@dataclass
class RewardOutcome:
    """Per-call rewards aligned with ``result.transitions``, in two streams: ``rewards`` are
    shared through the advantage estimator (GAE carries them back to earlier calls); ``local``
    rewards are added to their own call's advantage only — JADE's "immediate, non-transferable"
    format penalty. Under GAE with γ = 1 a penalty given as an ordinary reward would also charge
    the planner whose valid decomposition led to a later sub-planner's mistake."""

    rewards: list[float]
    scores: dict[str, float] = field(default_factory=dict)  # f1, em, ... of the run
    local: list[float] | None = None

    @property
    def local_rewards(self) -> list[float]:
        return self.local if self.local is not None else [0.0] * len(self.rewards)

    @property
    def total(self) -> float:
        return sum(self.rewards) + sum(self.local_rewards)


class RewardScheme(Protocol):
    """A reward scheme: its ``name`` (what ``--reward`` picks), the roles it trains
    (``train_roles``; None = every role the team trains), and one ``RewardOutcome`` per finished
    run and its question."""

    name: str
    train_roles: frozenset[str] | None

    def __call__(self, result: RunResult, example: QAExample) -> RewardOutcome: ...


def last_call(transitions: Sequence[Transition], role: str | None = None) -> int | None:
    """Index of the run's last call (by turn, then step), optionally of one role only."""
    candidates = [i for i, t in enumerate(transitions) if role is None or t.role == role]
    if not candidates:
        return None
    return max(candidates, key=lambda i: (transitions[i].turn, transitions[i].step))


def format_penalties(transitions: Sequence[Transition], penalty: float) -> list[float]:
    """−``penalty`` for each call whose reply broke its role's format, 0 for the others (JADE's
    local reward, ``RewardOutcome.local``)."""
    return [0.0 if t.format_ok else -penalty for t in transitions]
