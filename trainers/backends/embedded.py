"""Joint PPO on one shared model for every role of a method graph (JADE Algorithm 2).

One step = rollout of ``questions_per_step`` questions → rewards per call → unified buffer of
mixed-role transitions → values/advantages → PPO epochs on the shared model → metrics and a
checkpoint. The rollout policy wraps the very module being optimized, so every step samples
from the current weights (on-policy).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Sequence

import torch

from graphs.methods import get_method, make_reward
from nodes.context import RunContext, Settings
from nodes.policies.hf import HFPolicy
from nodes.policies.spec import model_dir
from nodes.team import Team
from stores.retriever import open_retriever
from trainers.learner.checkpoint import export_hf
from trainers.config import TrainConfig
from trainers.experience import Experience, to_experiences
from trainers.learner.learner import Learner
from trainers.metrics_log import MetricsLog
from trainers.rollout import Rollout, collect


def load_examples(config: TrainConfig):
    from stores.datasets import read_dataset
    from stores.demo import DEMO_QUESTIONS

    examples = read_dataset(config.data or DEMO_QUESTIONS).examples
    examples = examples[: config.limit] if config.limit else examples
    if not examples:
        raise ValueError("no training questions")
    return examples


def batch_at(n_examples: int, cursor: int, size: int, seed: int) -> list[int]:
    """Example indices for the ``size`` questions after ``cursor`` questions were consumed; each
    pass over the data uses its own seeded shuffle, so the order is a function of the cursor."""
    indices = []
    for position in range(cursor, cursor + size):
        epoch, offset = divmod(position, n_examples)
        order = list(range(n_examples))
        random.Random(seed * 100_003 + epoch).shuffle(order)
        indices.append(order[offset])
    return indices


def run_settings(config: TrainConfig) -> Settings:
    overrides = {"temperature": config.temperature, "max_rounds": config.max_rounds,
                 "fallback_workflow": config.fallback_workflow}
    return replace(Settings(), **{k: v for k, v in overrides.items() if v is not None})


class TrainingLoop:
    """The loop both backends share: steps until ``config.steps``, one metrics line each, a
    checkpoint every ``save_every`` steps and at the end, then the curve and the HF export.
    A backend provides ``train_step``, ``save``, ``export``, ``close`` and the ``config``,
    ``step``, ``log`` and ``progress`` attributes."""

    def _begin(self, config: TrainConfig, progress: bool) -> None:
        """What every backend does first: the run folder, seeds, questions and reward."""
        self.config = config
        self.out = Path(config.out)
        self.out.mkdir(parents=True, exist_ok=True)
        self.progress = progress
        random.seed(config.seed)
        torch.manual_seed(config.seed)
        self.examples = load_examples(config)
        self.reward, self.train_roles = training_reward(config)

    def train(self, steps: int | None = None) -> list[dict]:
        from tqdm.auto import tqdm

        target = steps if steps is not None else self.config.steps
        history = []
        bar = tqdm(total=target, initial=min(self.step, target),
                   desc=f"ppo {self.config.graph} ({self.config.backend})", unit="step",
                   disable=not self.progress)
        while self.step < target:
            metrics = self.train_step()
            self.log.write(self.step, metrics)
            history.append(metrics)
            if self.step % self.config.save_every == 0 or self.step == target:
                self.save()
            bar.update(1)
            bar.set_postfix(reward=f"{metrics['reward']:.3f}", f1=f"{metrics['f1']:.3f}",
                            viol=f"{metrics['format_violation_rate']:.2f}")
        bar.close()
        self.log.plot()
        if self.config.export_hf:
            self.export()
        return history


class GraphPPOTrainer(TrainingLoop):
    def __init__(self, config: TrainConfig, resume: bool = False, progress: bool = True):
        self._begin(config, progress)
        self.graph = get_method(config.graph).training_graph()
        retriever = open_retriever(config.index)  # bad input fails here, before the model loads

        frozen_roles = frozen_roles_of(config)
        self.learner = Learner(config, model_dir(config.model), frozen_roles)
        self.rollout_policy = self._rollout_policy()
        self.ctx = RunContext(self._team(frozen_roles), retriever, run_settings(config))

        self.step, self.cursor = 0, 0
        state = self.learner.resume(self.out / "checkpoints") if resume else None
        if state is not None:
            self.step, self.cursor = state["step"], state["cursor"]
            self._sync_rollout_weights()
        self.log = MetricsLog(self.out, resume_step=self.step)

    # the learner's parts, by the names callers (and tests) use
    engine = property(lambda self: self.learner.engine)
    model = property(lambda self: self.learner.model)
    frozen = property(lambda self: self.learner.frozen)
    tokenizer = property(lambda self: self.learner.tokenizer)

    def _rollout_policy(self):
        """What samples the learner's roles: the module being optimized itself (HF), or a vLLM
        engine that receives the learner's weights after every update."""
        if self.config.engine == "vllm":
            from nodes.policies.vllm import VLLMPolicy
            return VLLMPolicy(model_dir(self.config.model), name="learner", seed=self.config.seed).start()
        return HFPolicy(self.model.lm, self.tokenizer, name="learner")

    def _sync_rollout_weights(self) -> float:
        """Push the learner's weights (LoRA merged) into a vLLM rollout engine; seconds taken."""
        if self.config.engine != "vllm":
            return 0.0
        started = time.perf_counter()
        self.rollout_policy.load_weights(self.learner.weights())
        return time.perf_counter() - started

    def _team(self, frozen_roles) -> Team:
        """The learner plays every role except the frozen ones, which the initial copy plays."""
        learner = self.rollout_policy
        if not frozen_roles:
            return Team(learner)
        frozen = HFPolicy(self.frozen.lm, self.tokenizer, name="frozen")
        frozen.trainable = False
        return Team(learner, {role: frozen for role in frozen_roles})

    # -- one step ----------------------------------------------------------------------------------
    def train_step(self) -> dict:
        config = self.config
        chosen = [self.examples[i] for i in batch_at(len(self.examples), self.cursor,
                                                     config.questions_per_step, config.seed)]
        started = time.perf_counter()
        rollouts = asyncio.run(collect(self.graph, chosen, self.ctx, config.samples_per_question,
                                       config.concurrency, tag=f"s{self.step + 1}"))
        rollout_s = time.perf_counter() - started
        items, metrics = score_rollouts(rollouts, self.reward, self.train_roles, rollout_s)
        if items:
            metrics.update(self.learner.prepare(items))
            metrics.update(self.learner.update(items, self.step))
            metrics["weight_sync_s"] = self._sync_rollout_weights()
        metrics["lr"] = self.engine.lr
        self.step += 1
        self.cursor += config.questions_per_step
        return metrics

    # -- what the shared loop calls ------------------------------------------------------------
    def save(self) -> None:
        self.learner.save(self.out / "checkpoints", self.step,
                          {"cursor": self.cursor, "config": self.config.to_dict()})

    def export(self) -> None:
        export_hf(self.model, self.tokenizer, self.out / "hf")

    def close(self) -> None:
        if hasattr(self.rollout_policy, "close"):  # a vLLM engine: end its process
            self.rollout_policy.close()


def training_reward(config: TrainConfig):
    """The reward scheme (the method's own unless the config names one) and the roles it
    trains (the config's ``train_roles`` win)."""
    options, method = dict(config.reward), get_method(config.graph)
    reward = make_reward(options.pop("scheme", method.default_reward), method, **options)
    train_roles = set(config.train_roles) if config.train_roles is not None else reward.train_roles
    return reward, train_roles


def frozen_roles_of(config: TrainConfig) -> list[str]:
    """The roles the frozen initial copy plays: the config's choice, else the method's."""
    if config.frozen_roles is not None:
        return list(config.frozen_roles)
    return list(get_method(config.graph).frozen_roles)


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
