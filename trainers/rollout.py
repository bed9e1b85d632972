"""Phases 1 and 2 of a training step: run the method graph on a batch of questions with the
current policy (sampling), several runs at a time so their model calls share batched decoding;
then score every call of every run with the reward scheme into the learner's experience.

``RolloutSide`` is phase 1 wherever it is hosted: the embedded backend holds one in its own
process, the Ray backend one in each rollout worker; both build it, and so the team, one way.

A question's runs are its GRPO group: ``samples`` runs as the team chooses, plus, with forced
workflows, ``forced_samples`` runs per workflow whose planner reply for the whole question is
written as that workflow (by the method's ``WorkflowChoice.force``). Such a group compares
workflows on the same question even when the planner has stopped sampling all but one of them;
with two or more runs per workflow, ``grpo_by_workflow`` also compares executions of one plan."""

from __future__ import annotations

import asyncio
from collections import Counter, defaultdict
from dataclasses import dataclass, replace
from typing import Callable, Sequence

from ragteam.graphs.methods import get_method
from ragteam.graphs.run import RunResult, arun
from ragteam.nodes.context import RunContext, Settings
from ragteam.nodes.policies.protocol import EngineError, Policy
from ragteam.nodes.team import Team
from ragteam.stores.datasets import QAExample
from ragteam.trainers.config import TrainConfig
from ragteam.trainers.experience import Experience, to_experiences


@dataclass
class Rollout:
    """One run of the graph on one training question."""

    example: QAExample
    result: RunResult
    forced_workflow: str = ""  # the workflow written for its planner ("" = the team's own choice)


@dataclass
class FailedRun:
    """A run that raised: it is reported and left out of the step, never the step's end."""

    question_id: str
    sample: int
    error: str


async def collect(graph, examples: Sequence[QAExample], ctx: RunContext, samples: int,
                  concurrency: int, tag: str, forced_workflows: Sequence[str] = (),
                  force: Callable[[Settings, str], Settings] | None = None, forced_samples: int = 1
                  ) -> tuple[list[Rollout], list[FailedRun]]:
    """``samples`` runs per question and ``forced_samples`` per forced workflow, forced by
    ``force`` (the method's ``WorkflowChoice.force``; its group, see the module docstring), in
    question order, and the runs that failed. A dead engine (``EngineError``) is no one question's fault: it
    ends the whole collection, so the backend can restart the engine and run it again."""
    if forced_workflows and force is None:
        raise ValueError("forced workflows need the method's way to force one (its workflow_choice)")
    gate = asyncio.Semaphore(max(1, concurrency))
    variants = [""] * samples + [w for w in forced_workflows for _ in range(forced_samples)]

    async def one(example: QAExample, k: int) -> Rollout | FailedRun:
        forced = variants[k]
        run_ctx = replace(ctx, settings=force(ctx.settings, forced)) if forced else ctx
        async with gate:
            try:
                result = await arun(graph, example.question, run_ctx, run_id=f"{tag}-{example.id}-{k}")
            except EngineError:
                raise
            except Exception as error:  # one bad question must not cost the others their step
                return FailedRun(example.id, k, f"{type(error).__name__}: {error}"[:500])
        return Rollout(example, result, forced)

    done = await asyncio.gather(*(one(e, k) for e in examples for k in range(len(variants))))
    return ([r for r in done if isinstance(r, Rollout)], [r for r in done if isinstance(r, FailedRun)])


def frozen_player(config: TrainConfig, frozen_roles: Sequence[str], initial: Callable[[], Policy]) -> Policy | None:
    """Who plays the team's frozen roles: the config's ``frozen_policy`` (a policy spec, e.g.
    rule-based executors), else ``initial()`` (the initial weights, never synced); None when the
    team freezes none."""
    if not frozen_roles:
        return None
    if config.frozen_policy:
        from ragteam.nodes.policies.spec import load_policy

        return load_policy(config.frozen_policy)
    return initial()


def run_settings(config: TrainConfig) -> Settings:
    """The run settings every rollout uses (sampling temperature, budgets, fallback)."""
    given = {"temperature": config.temperature, "max_rounds": config.max_rounds, "top_k": config.top_k,
             "few_shot": config.few_shot}
    settings = Settings().updated(**{k: v for k, v in given.items() if v is not None})
    if config.fallback_workflow is not None:
        settings = settings.updated(planning={"fallback": config.fallback_workflow})
    if config.fan_out is not None:
        settings = settings.updated(serial={"fan_out": config.fan_out})
    if config.subquestion_workflow is not None:
        settings = settings.updated(written={"subplans": config.subquestion_workflow})
    if config.plan_choices:
        settings = settings.updated(planning={"choices": tuple(config.plan_choices)})
    return settings


class RolloutSide:
    """The method's training graph and the team over one sampling policy (an engine, or the
    learner's own module), with the run context a step's runs share. ``frozen`` plays
    ``frozen_roles`` (the initial weights, never synced); every other role is ``policy``'s —
    with per-role adapters, a role in no adapter is ``policy``'s base weights, untrained."""

    def __init__(self, config: TrainConfig, policy: Policy, frozen: Policy | None = None,
                 frozen_roles: Sequence[str] = ()):
        method = get_method(config.graph)
        self.config = config
        self.policy = policy
        self.graph = method.training_graph()
        self.force = method.workflow_choice.force if method.workflow_choice else None
        team = (Team.with_adapters(policy, [r for a in config.adapters.values() for r in a.roles], frozen,
                                   frozen_roles)
                if config.adapters else Team.with_frozen(policy, frozen, frozen_roles))
        # imported here: BM25 brings numba, whose llvmlite wrappers a spawned vLLM worker must
        # not inherit through this module (nodes.policies.vllm._engine_environment)
        from ragteam.stores.index import open_retriever
        self.ctx = RunContext(team, open_retriever(config.index), run_settings(config))

    async def collect(self, examples: Sequence[QAExample], tag: str) -> tuple[list[Rollout], list[FailedRun]]:
        """The step's runs of ``examples`` (see ``collect``) with the config's group shape."""
        config = self.config
        return await collect(self.graph, examples, self.ctx, config.samples_per_question,
                             config.concurrency, tag, config.forced_workflows, self.force, config.forced_samples)


def score_rollouts(rollouts: Sequence[Rollout], reward, train_roles, rollout_s: float
                   ) -> tuple[list[Experience], dict, list]:
    """The learner's experience (rewards per call, flattened order), the step's rollout metrics
    and each run's reward outcome (``RewardOutcome``, in rollout order), from finished rollouts
    in question order."""
    items, outcomes = [], []
    for rollout in rollouts:
        outcome = reward(rollout.result, rollout.example)
        items += to_experiences(rollout.result.transitions, outcome.rewards, group=rollout.example.id,
                                train_roles=train_roles, local=outcome.local_rewards,
                                workflow=next(iter(rollout.result.topologies), ""),
                                outcome=outcome.scores.get("f1", outcome.total))
        outcomes.append(outcome)
    return items, rollout_metrics(rollouts, outcomes, items, rollout_s), outcomes


def rollout_records(rollouts: Sequence[Rollout], outcomes: Sequence) -> list[dict]:
    """One JSON-ready record per run, for reading what the team did in a step: the question,
    the workflow written for its planner (if any), the answer and its scores, the run's reward
    (summed over its calls), the workflows run and each call's role, adapter, reply text, format
    check and reward (shared + local). No prompts or token ids: a record stays a few KB."""
    records = []
    for rollout, outcome in zip(rollouts, outcomes, strict=True):
        result, example = rollout.result, rollout.example
        calls = [{"role": t.role, "adapter": t.adapter, "task": t.task_id, "text": t.completion_text,
                  "format_ok": t.format_ok, "reward": shared + local, "weight_version": t.weight_version}
                 for t, shared, local in zip(result.transitions, outcome.rewards, outcome.local_rewards)]
        records.append({"question_id": example.id, "question": example.question,
                        "type": example.metadata.get("type", ""), "forced_workflow": rollout.forced_workflow,
                        "answer": result.answer, "golds": list(example.golds), **outcome.scores,
                        "reward": outcome.total, "workflows": result.topologies,
                        "costs": dict(result.costs), "calls": calls})
    return records


def rollout_metrics(rollouts: Sequence[Rollout], outcomes: Sequence, items: list[Experience],
                    rollout_s: float) -> dict:
    """The step's rollout metrics: reward, scores, calls, turns, retrievals, the topology mix and
    the workflow chosen for the whole question by question type (``root/<type>/<workflow>``:
    counts) of the team's own runs (what it would do); format violations and decoding
    throughput over every run; and, with forced workflows, each one's reward and F1
    (``forced/<workflow>/…``)."""
    own = [(r, o) for r, o in zip(rollouts, outcomes) if not r.forced_workflow]
    transitions = [t for r in rollouts for t in r.result.transitions]
    n = max(len(own), 1)
    metrics = {
        "reward": sum(o.total for _, o in own) / n,
        **{k: sum(o.scores.get(k, 0.0) for _, o in own) / n for k in ("f1", "em", "acc")},
        "format_violation_rate": sum(not t.format_ok for t in transitions) / max(len(transitions), 1),
        "calls_per_run": sum(len(r.result.transitions) for r, _ in own) / n,
        "turns": sum(r.result.costs.get("turns", 0) for r, _ in own) / n,
        "retrievals": sum(r.result.costs.get("retrieval_calls", 0) for r, _ in own) / n,
        "trained_transitions": len(items),
        "rollout_s": rollout_s,
        "rollout_completion_tok_per_s": sum(len(t.completion_ids) for t in transitions) / max(rollout_s, 1e-9),
    }
    for role, count in Counter(t.role for t in transitions).items():
        bad = sum(1 for t in transitions if t.role == role and not t.format_ok)
        metrics[f"format_violation_rate/{role}"] = bad / count
    topologies = Counter(w for r, _ in own for w in r.result.topologies)
    total = sum(topologies.values())
    for workflow, count in topologies.items():
        metrics[f"topology/{workflow}"] = count / total
    for rollout, _ in own:  # the workflow chosen for the whole question, by question type
        qtype = rollout.example.metadata.get("type") or "all"
        root = rollout.result.topologies[0] if rollout.result.topologies else "(none)"
        metrics[f"root/{qtype}/{root}"] = metrics.get(f"root/{qtype}/{root}", 0) + 1
    forced = defaultdict(list)
    for rollout, outcome in zip(rollouts, outcomes):
        if rollout.forced_workflow:
            forced[rollout.forced_workflow].append(outcome)
    for workflow, done in forced.items():
        metrics[f"forced/{workflow}/reward"] = sum(o.total for o in done) / len(done)
        metrics[f"forced/{workflow}/f1"] = sum(o.scores.get("f1", 0.0) for o in done) / len(done)
    return metrics
