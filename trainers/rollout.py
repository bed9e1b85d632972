"""Phases 1 and 2 of a training step: run the method graph on a batch of questions with the
current policy (sampling), several runs at a time so their model calls share batched decoding;
then score every call of every run with the reward scheme into the learner's experience."""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass
from typing import Sequence

from graphs.run import RunResult, arun
from nodes.context import RunContext
from nodes.policies.protocol import BackendError
from stores.datasets import QAExample
from trainers.experience import Experience, to_experiences


@dataclass
class Rollout:
    """One run of the graph on one training question."""

    example: QAExample
    result: RunResult


@dataclass
class FailedRun:
    """A run that raised: it is reported and left out of the step, never the step's end."""

    question_id: str
    sample: int
    error: str


async def collect(graph, examples: Sequence[QAExample], ctx: RunContext, samples: int,
                  concurrency: int, tag: str) -> tuple[list[Rollout], list[FailedRun]]:
    """``samples`` runs per question (GRPO groups need more than one), in question order, and
    the runs that failed. A dead engine (``BackendError``) is no one question's fault: it ends
    the whole collection, so the backend can restart the engine and run it again."""
    gate = asyncio.Semaphore(max(1, concurrency))

    async def one(example: QAExample, k: int) -> Rollout | FailedRun:
        async with gate:
            try:
                result = await arun(graph, example.question, ctx, run_id=f"{tag}-{example.id}-{k}")
            except BackendError:
                raise
            except Exception as error:  # one bad question must not cost the others their step
                return FailedRun(example.id, k, f"{type(error).__name__}: {error}"[:500])
        return Rollout(example, result)

    done = await asyncio.gather(*(one(e, k) for e in examples for k in range(samples)))
    return ([r for r in done if isinstance(r, Rollout)], [r for r in done if isinstance(r, FailedRun)])


def score_rollouts(rollouts: Sequence[Rollout], reward, train_roles, rollout_s: float
                   ) -> tuple[list[Experience], dict]:
    """The learner's experience (rewards per call, flattened order) and the step's rollout
    metrics, from finished rollouts in question order."""
    items, run_rewards, scores = [], [], []
    for rollout in rollouts:
        outcome = reward(rollout.result, rollout.example)
        items += to_experiences(rollout.result.transitions, outcome.rewards, group=rollout.example.id,
                                train_roles=train_roles, local=outcome.local_rewards)
        run_rewards.append(outcome.total)
        scores.append(outcome.scores)
    return items, rollout_metrics(rollouts, run_rewards, scores, items, rollout_s)


def rollout_metrics(rollouts: list[Rollout], run_rewards, scores, items: list[Experience],
                    rollout_s: float) -> dict:
    """The step's rollout metrics: reward, scores, format violations (overall and per role),
    calls, turns, retrievals, the topology mix, decoding throughput."""
    transitions = [t for r in rollouts for t in r.result.transitions]
    n = max(len(rollouts), 1)
    metrics = {
        "reward": sum(run_rewards) / n,
        **{k: sum(s.get(k, 0.0) for s in scores) / n for k in ("f1", "em", "acc")},
        "format_violation_rate": sum(not t.format_ok for t in transitions) / max(len(transitions), 1),
        "calls_per_run": len(transitions) / n,
        "turns": sum(r.result.costs.get("turns", 0) for r in rollouts) / n,
        "retrievals": sum(r.result.costs.get("retrieval_calls", 0) for r in rollouts) / n,
        "trained_transitions": len(items),
        "rollout_s": rollout_s,
        "rollout_completion_tok_per_s": sum(len(t.completion_ids) for t in transitions) / max(rollout_s, 1e-9),
    }
    for role, count in Counter(t.role for t in transitions).items():
        bad = sum(1 for t in transitions if t.role == role and not t.format_ok)
        metrics[f"format_violation_rate/{role}"] = bad / count
    topologies = Counter(w for r in rollouts for w in r.result.topologies)
    total = sum(topologies.values())
    for workflow, count in topologies.items():
        metrics[f"topology/{workflow}"] = count / total
    return metrics
