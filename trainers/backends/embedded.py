"""The embedded backend: the whole step in this process.

Rollouts sample from the very module being optimized (``sampler: hf``, on-policy by
construction), or from a vLLM rollout engine that receives the learner's weights after every
update (``sampler: vllm``; over the weight channel, ``weight_sync: channel``, or as one blob), or
the LoRA adapters alone (``weight_sync: adapter``; with per-role adapters the engine serves every
adapter, each call under its role's, and a sync sends only the adapters the update changed).
The team's frozen roles are played by the learner's frozen initial copy.

Asynchronous rollouts (``async.max_staleness`` > 0) run on an event loop of their own
(``nodes.background_loop``) while this thread updates the learner, so they cannot sample from the
module being updated: with ``sampler: hf`` they sample from a snapshot of it, which a sync
refreshes between two decoding batches; a vLLM engine takes its syncs between engine steps.
"""

from __future__ import annotations

import asyncio
import copy
import time
from pathlib import Path
from typing import Sequence

from ragteam.nodes.background_loop import BackgroundLoop
from ragteam.nodes.policies.hf import HFPolicy
from ragteam.nodes.policies.spec import model_dir
from ragteam.stores.datasets import QAExample
from ragteam.trainers.config import TrainConfig, engine_options
from ragteam.trainers.engines import RolloutEngine
from ragteam.trainers.experience import Experience
from ragteam.trainers.learner.learner import Learner
from ragteam.trainers.rollout import Rollout, RolloutSide, frozen_player
from ragteam.trainers.weight_sync import WeightSync


class EmbeddedBackend:
    """A ``trainers.loop.Backend`` in one process. ``engine``: a started ``RolloutEngine``
    (``trainers.engines``) to use instead of starting one (``sampler: vllm``; its options must be the config's, see
    ``trainers.config.engine_options``); it gets the learner's weights (or its adapters, replacing
    any the engine held) before its first rollout, and the caller keeps it (``close`` leaves it
    running)."""

    def __init__(self, config: TrainConfig, frozen_roles: list[str], engine: RolloutEngine | None = None):
        if engine is not None and not engine.serves(model_dir(config.model), engine_options(config)):
            raise ValueError(f"the given engine serves another model or other options than the run's "
                             f"({config.model}, {engine_options(config)})")
        self.config = config
        # a frozen_policy plays the frozen roles instead of the initial weights: none to load
        self.learner = Learner(config, model_dir(config.model), [] if config.frozen_policy else frozen_roles)
        self.owns_engine = engine is None
        if engine is not None:  # whatever adapters it served before are not this run's
            engine.serve_without_adapters()
        self.rollout_policy = engine if engine is not None else self._rollout_policy()
        if config.sampler == "vllm" and self.learner.adapters is not None:  # each call under its role's adapter
            self.rollout_policy.serve_team(self.learner.adapters)
        self._engine_sleeps = config.sampler == "vllm" and self.rollout_policy.sleeps
        self._asleep = False
        self.background = None  # the asynchronous rollouts' loop
        if config.async_.max_staleness:
            if self._engine_sleeps:
                raise ValueError("async.max_staleness: the rollout engine shares the learner's GPU and "
                                 "sleeps while it updates (vllm.enable_sleep_mode); asynchronous "
                                 "rollouts need it awake — set vllm.enable_sleep_mode: false and leave "
                                 "room for both, or run synchronous steps")
            self.background = BackgroundLoop("rollouts")
        self.weight_sync = LocalWeightSync(self.learner, self.rollout_policy, config.weight_sync)
        # a given engine holds whatever it last served; a team's engine holds no adapter yet
        # (they start as the base weights, but are loaded before the first rollout all the same);
        # a snapshot is copied again then: the weights may change before it (a warm start)
        self._stale = (engine is not None or (config.sampler == "vllm" and self.learner.adapters is not None)
                       or self.samples_from_snapshot)
        # the team binds it as Frozen (RolloutSide): its calls are never trained
        frozen = frozen_player(config, frozen_roles,
                               lambda: HFPolicy(self.learner.frozen.lm, self.learner.tokenizer, name="frozen"))
        self.side = RolloutSide(config, self.rollout_policy, frozen, frozen_roles)

    def _rollout_policy(self):
        """The learner's module itself (HF generate), or a vLLM rollout engine."""
        if self.config.sampler == "vllm":
            from ragteam.nodes.policies.vllm import VLLMPolicy
            learner_on_gpu = next(self.learner.model.parameters()).is_cuda  # the GPU is shared
            return VLLMPolicy(model_dir(self.config.model), name="learner", seed=self.config.seed,
                              shares_gpu=learner_on_gpu, **engine_options(self.config)).start()
        lm = self.learner.model.lm
        if self.config.async_.max_staleness:  # sampling beside the update: a snapshot, synced by copy
            lm = copy.deepcopy(lm).requires_grad_(False)
        return HFPolicy(lm, self.learner.tokenizer, name="learner", adapters=self.learner.adapters)

    @property
    def samples_from_snapshot(self) -> bool:
        return self.config.sampler == "hf" and self.background is not None

    def start_rollouts(self, examples: Sequence[QAExample], tag: str):
        """Synchronous steps: runs that start in ``finish_rollouts`` (today's order exactly).
        Asynchronous: the runs, started on the rollout loop (a ``concurrent.futures.Future``)."""
        if self.background is None:
            return DeferredRuns(examples, tag)
        if self._stale:
            self.sync()
        return self.background.submit(self.side.collect(examples, tag))

    def finish_rollouts(self, started) -> tuple[list[Rollout], dict]:
        if isinstance(started, DeferredRuns):
            rollouts, failed = self._run_now(started.examples, started.tag)
        else:
            rollouts, failed = started.result()
        return rollouts, {"failed": failed}

    def rollouts(self, examples: Sequence[QAExample], tag: str) -> tuple[list[Rollout], dict]:
        return self.finish_rollouts(self.start_rollouts(examples, tag))

    def _run_now(self, examples: Sequence[QAExample], tag: str):
        if self._stale:
            self.sync()
        if self.config.sampler == "hf":  # the learner's own module: always its current version
            self.rollout_policy.weight_version = self.learner.version
        self._awake()
        rollouts, failed = asyncio.run(self.side.collect(examples, tag))
        if self._engine_sleeps:  # one GPU: the engine makes room for the learner's update
            self.rollout_policy.sleep()
            self._asleep = True
        return rollouts, failed

    def _awake(self) -> None:
        if self._asleep:
            self.rollout_policy.wake_up()
            self._asleep = False

    def learn(self, items: list[Experience], step: int) -> dict:
        return self.learner.learn(items, step)

    def sync(self) -> float:
        """Push the learner's weights (LoRA merged, or the adapters alone) into a vLLM rollout
        engine, or copy them into the rollouts' snapshot; seconds taken."""
        if self.samples_from_snapshot:
            self._stale = False
            started = time.perf_counter()
            self.rollout_policy.load_weights(self.learner.model.lm.state_dict())
            self.rollout_policy.weight_version = self.learner.version
            return time.perf_counter() - started
        if self.config.sampler != "vllm":
            return 0.0
        self._awake()
        self._stale = False
        seconds = self.weight_sync.sync()
        self.rollout_policy.weight_version = self.learner.version
        return seconds

    def lr(self) -> float:
        return self.learner.optimizer.lr

    def learner_logprobs(self, prompt_ids: list[int], completion_ids: list[int], temperature: float,
                         role: str = "") -> list[float]:
        """The learner's log-probs of recorded ids (to check the engine against it); with
        per-role adapters, under ``role``'s adapter."""
        return self.learner.logprobs(prompt_ids, completion_ids, temperature, role)

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
        if self.background is not None:  # runs still going end first: they call the engine
            self.background.stop()
        if self.owns_engine and hasattr(self.rollout_policy, "close"):  # a vLLM engine: end its process
            self.rollout_policy.close()


class DeferredRuns:
    """A synchronous step's runs: they start when the trainer waits for them."""

    def __init__(self, examples: Sequence[QAExample], tag: str):
        self.examples, self.tag = examples, tag

    def cancel(self) -> None:
        """Nothing started, nothing to stop."""


class LocalWeightSync(WeightSync):
    """The moves of ``trainers.weight_sync`` from the learner in this process to local engines."""

    def __init__(self, learner: Learner, engine, mode: str):
        super().__init__(mode, [engine])
        self.learner = learner
        self.channel = None

    def adapter_digests(self) -> dict[str | None, str]:
        return self.learner.adapter_digests()

    def send_adapters(self, names: list[str | None], engines: list) -> int:
        sent = 0
        for name in names:
            files = self.learner.adapter_files(name)
            for engine in engines:
                engine.load_adapter_files(files, name)
            sent += sum(map(len, files.values()))
        return sent

    def open_channel(self, engines: list) -> None:
        from ragteam.trainers.learner.weight_channel import WeightChannel
        self.channel = WeightChannel(engines)

    def stream(self) -> None:
        self.channel.send(self.learner.weights(), self.engines[0].engine_dtype)

    def load_blob(self, engines: list) -> None:
        weights = self.learner.weights()
        for engine in engines:
            engine.load_weights(weights)
