"""The embedded backend: the whole step in this process.

Rollouts sample from the very module being optimized (``engine: hf``, on-policy by
construction), or from a vLLM rollout engine that receives the learner's weights after every
update (``engine: vllm``; over the weight channel, ``weight_sync: channel``, or as one blob).
The team's frozen roles are played by the learner's frozen initial copy.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Sequence

from nodes.context import RunContext
from nodes.policies.hf import HFPolicy
from nodes.policies.spec import model_dir
from nodes.team import Team
from stores.datasets import QAExample
from stores.retriever import open_retriever
from trainers.config import TrainConfig, engine_options
from trainers.experience import Experience
from trainers.learner.learner import Learner
from trainers.loop import run_settings
from trainers.rollout import Rollout, collect


class EmbeddedBackend:
    """A ``trainers.loop.Backend`` in one process."""

    def __init__(self, config: TrainConfig, frozen_roles: list[str]):
        from graphs.methods import get_method

        self.config = config
        self.graph = get_method(config.graph).training_graph()
        self.learner = Learner(config, model_dir(config.model), frozen_roles)
        self.rollout_policy = self._rollout_policy()
        self.channel = None  # the weight channel to a vLLM engine, once the first sync opens it
        self._engine_sleeps = config.engine == "vllm" and self.rollout_policy.sleeps
        self._asleep = False
        self.ctx = RunContext(self._team(frozen_roles), open_retriever(config.index), run_settings(config))

    def _rollout_policy(self):
        """The learner's module itself (HF generate), or a vLLM rollout engine."""
        if self.config.engine == "vllm":
            from nodes.policies.vllm import VLLMPolicy
            learner_on_gpu = next(self.learner.model.parameters()).is_cuda  # the GPU is shared
            return VLLMPolicy(model_dir(self.config.model), name="learner", seed=self.config.seed,
                              shares_gpu=learner_on_gpu, **engine_options(self.config)).start()
        return HFPolicy(self.learner.model.lm, self.learner.tokenizer, name="learner")

    def _team(self, frozen_roles: list[str]) -> Team:
        """The learner plays every role except the frozen ones, which the initial copy plays."""
        if not frozen_roles:
            return Team(self.rollout_policy)
        frozen = HFPolicy(self.learner.frozen.lm, self.learner.tokenizer, name="frozen", trainable=False)
        return Team(self.rollout_policy, {role: frozen for role in frozen_roles})

    def rollouts(self, examples: Sequence[QAExample], tag: str) -> tuple[list[Rollout], dict]:
        config = self.config
        self._awake()
        rollouts, failed = asyncio.run(collect(self.graph, examples, self.ctx, config.samples_per_question,
                                               config.concurrency, tag, config.forced_workflows))
        if self._engine_sleeps:  # one GPU: the engine makes room for the learner's update
            self.rollout_policy.sleep()
            self._asleep = True
        return rollouts, {"failed": failed}

    def _awake(self) -> None:
        if self._asleep:
            self.rollout_policy.wake_up()
            self._asleep = False

    def learn(self, items: list[Experience], step: int) -> dict:
        return self.learner.learn(items, step)

    def sync(self) -> float:
        """Push the learner's weights (LoRA merged, or the adapter alone) into a vLLM rollout
        engine; seconds taken."""
        if self.config.engine != "vllm":
            return 0.0
        started = time.perf_counter()
        self._awake()
        if self.config.weight_sync == "adapter":
            self.rollout_policy.load_adapter_files(self.learner.adapter_files())
        elif self.config.weight_sync == "channel":
            if self.channel is None:  # opened at the first sync: the engine is up by then
                from trainers.learner.weight_channel import WeightChannel
                self.channel = WeightChannel([self.rollout_policy])
            self.channel.send(self.learner.weights(), self.rollout_policy.engine_dtype)
        else:
            self.rollout_policy.load_weights(self.learner.weights())
        return time.perf_counter() - started

    def lr(self) -> float:
        return self.learner.optimizer.lr

    def learner_logprobs(self, prompt_ids: list[int], completion_ids: list[int], temperature: float) -> list[float]:
        """The learner's log-probs of recorded ids (to check the engine against it)."""
        return self.learner.logprobs(prompt_ids, completion_ids, temperature)

    def engine_generate(self, requests) -> list:
        """Generations of the rollout engine for ``requests`` (to check it against the learner)."""
        return asyncio.run(self.rollout_policy.generate(requests))

    def save(self, folder: Path, step: int, extra: dict) -> None:
        self.learner.save(folder, step, extra)

    def resume(self, folder: Path) -> dict | None:
        return self.learner.resume(folder)

    def export(self, folder: Path) -> None:
        self.learner.export(folder)

    def close(self) -> None:
        if hasattr(self.rollout_policy, "close"):  # a vLLM engine: end its process
            self.rollout_policy.close()
