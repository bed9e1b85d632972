"""The learning half of joint PPO, apart from where rollouts come from: the shared policy-value
model, its optimizer, and the frozen initial copy (it plays the team's frozen roles and is the KL
reference). The embedded backend holds one in its own process; the Ray backend holds one inside
each learner actor: N actors are N data-parallel ranks (``trainers.learner.data_parallel``), each
called with the same buffer; every method is called on every rank, since ZeRO-3 forwards,
gathers and checkpoints are collective, and only the first rank writes files.
"""

from __future__ import annotations

import time
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Collection, Sequence

from ragteam.nodes.policies.role_adapters import BASE
from ragteam.trainers.learner.adapters import RoleAdapters, adapter_digest, export_adapters
from ragteam.trainers.learner.checkpoint import export_hf, latest_checkpoint, load_checkpoint, save_checkpoint
from ragteam.trainers.config import TrainConfig
from ragteam.trainers.learner.optimizers import make_optimizer
from ragteam.trainers.experience import Experience
from ragteam.trainers.learner.data_parallel import Ranks
from ragteam.trainers.learner.model import PolicyValueModel, adapter_files, load_lm, merged_lm
from ragteam.trainers.algorithms.advantages import READS_VALUES, assign_advantages, trained_calls
from ragteam.trainers.algorithms.ppo import ppo_loss, reference_kl
from ragteam.trainers.learner.ppo_update import active_adapter, fill_values, forward_items, update


def shuffle_seed(seed: int, step: int) -> int:
    """The mini-batch order of ``step`` (0-based; an SFT epoch): a function of seed and step only."""
    return seed * 1_000_003 + step


class Learner:
    """The shared policy-value model, its optimizer and the frozen copy, with the operations a
    backend calls: ``learn`` (values, advantages, PPO update), ``weights``, ``save``/``resume``."""

    def __init__(self, config: TrainConfig, model_path: str, frozen_roles: Collection[str]):
        self.config = config
        self.model_path = model_path
        # per-role adapters (``adapters:``): one peft model with each; the value head stays one,
        # shared: one critic over one backbone, as JADE's shared model (the state is the role's
        # instruction + observation, whichever adapter acts on it)
        self.adapters = RoleAdapters(config.adapters) if config.adapters else None
        lm, self.tokenizer = load_lm(model_path, config.lora, config.device, config.bf16,
                                     config.gradient_checkpointing, self.adapters)
        model = PolicyValueModel(lm)
        groups = {"groups": self.adapters.parameter_groups(model, config.lr, config.head_lr)} if self.adapters else {}
        self.optimizer = make_optimizer(config.optimizer, model, lr=config.lr, head_lr=config.head_lr,
                                        weight_decay=config.weight_decay, max_grad_norm=config.max_grad_norm,
                                        warmup_steps=config.warmup_steps, zero_stage=config.zero_stage,
                                        offload=config.offload_optimizer, bf16=config.bf16,
                                        rule=config.update_rule, **groups)
        self.model: PolicyValueModel = self.optimizer.module
        self.ranks = self.optimizer.ranks
        # The initial weights, loaded again (no copy of the trained model), play the frozen roles
        # and are the KL reference; with LoRA and no frozen roles the base model under disabled
        # adapters is the reference.
        self.frozen: PolicyValueModel | None = None
        if frozen_roles or (config.ppo.kl_coef > 0 and not (config.lora or config.adapters)):
            self.frozen = frozen_copy(model_path, config)
        self.pad_id = self.tokenizer.pad_token_id

    def reference(self):
        """A context-manager factory yielding the KL reference model, or None without KL."""
        if not self.config.ppo.kl_coef:
            return None
        if self.frozen is not None:
            return lambda: nullcontext(self.frozen)
        return lambda: _adapters_off(self.model)

    def learn(self, items: Sequence[Experience], step: int, loss=ppo_loss) -> dict:
        """One step's learning on a scored buffer: rollout-time values (and reference log-probs
        with a KL term), advantages, then PPO epochs with ``loss`` (ragteam's own unless
        another library's is given); the metrics of both, each pass timed. With per-role
        adapters, calls of a role in no adapter are not trained (the rollout side traces them
        ``trained=False``; any that reach here are left out)."""
        if self.adapters is not None:
            items = [e for e in items if self.adapters.adapter_of(e.role) != BASE]
        started = time.perf_counter()
        metrics = {**weight_lag(items, self.version), **self.prepare(items)}
        metrics["values_s"] = time.perf_counter() - started
        items = trained_calls(items, self.config.ppo)  # written replies: compared, trained only as configured
        metrics.update(update(self.optimizer, items, self.config.ppo, self.pad_id,
                              shuffle_seed(self.config.seed, step), loss, self.adapters))
        return metrics

    @property
    def version(self) -> int:
        """The weights' version: optimizer steps taken (what a sampler records, ``weight_version``)."""
        return self.optimizer.steps

    def prepare(self, items: Sequence[Experience]) -> dict:
        """Rollout-time values (and reference log-probs with a KL term), then advantages. The
        forward runs on the calls the update trains, unless the estimator reads every call's
        value or the KL term every call's log-probs: a gate step's written sub-question plans,
        half its calls, are compared but never trained."""
        ppo = self.config.ppo
        # before π_old is known, an importance-weighted written reply counts as trained (weight
        # exp(0) = 1): the calls chosen here hold every call the update will train
        needed = items if ppo.advantage in READS_VALUES or ppo.kl_coef else trained_calls(items, ppo)
        metrics = fill_values(self.model, needed, self.pad_id, self.config.ppo.micro_batch_tokens,
                              self.reference(), self.config.ppo.share_prompts, self.ranks, self.adapters,
                              learner_old=self.config.ppo.behaviour_correction == "tis", version=self.version)
        if self.config.ppo.kl_coef:
            metrics["kl_ref"] = reference_kl(items)
        assign_advantages(items, self.config.ppo)
        return metrics

    def logprobs(self, prompt_ids: list[int], completion_ids: list[int], temperature: float,
                 role: str = "") -> list[float]:
        """The learner's log-probs of recorded ids (to check a rollout engine against it); with
        per-role adapters, under ``role``'s adapter (the base weights for a role in none)."""
        import torch

        call = Experience(trajectory="", group="", role=role, prompt_ids=prompt_ids,
                          completion_ids=completion_ids, old_logprobs=[], temperature=temperature, reward=0.0)
        name = self.adapters.adapter_of(role) if self.adapters is not None else None
        with torch.no_grad(), active_adapter(self.model, self.adapters, name):
            _, logprobs, _ = forward_items(self.model.eval(), [call], self.pad_id)
        return logprobs[0, :len(completion_ids)].tolist()

    def weights(self) -> dict:
        """The LM's whole weights under Hugging Face names (LoRA merged): what rollout engines
        load. A collective under ZeRO-3 (every rank calls it; each gets them)."""
        if self.adapters is not None:  # merging would take the active adapter alone
            raise ValueError("per-role adapters reach a rollout engine as the adapters alone "
                             "(weight_sync: adapter, adapter_files)")
        return self.optimizer.full_state_dict(merged_lm(self.model.lm))

    def adapter_names(self) -> list[str | None]:
        """The LoRA adapters a sync may send (``weight_sync: adapter``): each per-role adapter,
        or the ``lora`` one (None)."""
        return list(self.adapters.names) if self.adapters is not None else [None]

    def adapter_files(self, name: str | None = None) -> dict[str, bytes]:
        """A trained LoRA adapter's files (``model.adapter_files``; ``weight_sync: adapter``):
        the per-role adapter ``name``, or the ``lora`` one (None)."""
        return adapter_files(self.model.lm, name)

    def adapter_digests(self) -> dict[str | None, str]:
        """Each adapter of ``adapter_names`` → a digest of its weights (``adapters.adapter_digest``):
        a sync resends an adapter only when it changed."""
        return {name: adapter_digest(self.model.lm, name if name is not None else "default")
                for name in self.adapter_names()}

    def export(self, folder: Path) -> None:
        """The trained model in Hugging Face format (``export_hf``), written by the first rank;
        with per-role adapters, each adapter's peft folder instead (``export_adapters``)."""
        if self.adapters is not None:  # every rank holds them whole (plain AdamW)
            if self.ranks.is_first:
                export_adapters(self.model.lm, self.tokenizer, self.adapters, folder, self.model_path,
                                self.model.value_head.state_dict())
            self.ranks.barrier()
            return
        lm_state, head_state = self.weights(), self.optimizer.full_state_dict(self.model.value_head)
        if self.ranks.is_first:
            export_hf(self.model, self.tokenizer, folder, lm_state, head_state)
        self.ranks.barrier()

    # -- checkpoints --------------------------------------------------------------------------
    def save(self, folder: Path, step: int, extra: dict) -> None:
        save_checkpoint(folder, step, self.optimizer, extra, keep=self.config.keep_checkpoints)

    def resume(self, folder: Path) -> dict | None:
        """The saved state of the newest complete checkpoint under ``folder`` (loaded into the
        optimizer), or None when there is none."""
        checkpoint = latest_checkpoint(folder)
        return None if checkpoint is None else load_checkpoint(checkpoint, self.optimizer)


def frozen_copy(model_path: str, config: TrainConfig) -> PolicyValueModel:
    """The initial weights for the frozen roles and the KL reference, read from ``model_path``
    in the learner's precision. Under ZeRO-3 with several ranks each holds a shard of it (a
    DeepSpeed inference engine: its forwards gather, like the trained model's)."""
    lm, _ = load_lm(model_path, None, config.device, config.bf16)
    model = PolicyValueModel(lm).eval().requires_grad_(False)
    if config.optimizer != "deepspeed" or config.zero_stage < 3 or Ranks.current().size == 1:
        return model
    import deepspeed

    engine, *_ = deepspeed.initialize(model=model, config={
        "train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 3},
        "bf16": {"enabled": config.bf16}, "steps_per_print": 10 ** 9})
    return engine.module.eval()


@contextmanager
def _adapters_off(model: PolicyValueModel):
    with model.lm.disable_adapter():
        yield model


def weight_lag(items: Sequence[Experience], version: int) -> dict[str, float]:
    """How many versions behind the learner's weights (``version``, before this update) the
    sampled calls were: 0 on a synchronous step (``weight_lag/mean``, ``/max``). Written calls
    were never sampled and count for nothing."""
    lags = [version - e.weight_version for e in items if not e.written]
    if not lags:
        return {}
    return {"weight_lag/mean": sum(lags) / len(lags), "weight_lag/max": float(max(lags))}
