"""The learning half of joint PPO, apart from where rollouts come from: the shared policy-value
model, its optimizer, and the frozen initial copy (it plays the team's frozen roles and is the KL
reference). The embedded backend holds one in its own process; the Ray backend holds one inside
a learner actor.
"""

from __future__ import annotations

import copy
import time
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Collection, Sequence

from trainers.learner.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from trainers.config import TrainConfig
from trainers.learner.optimizers import make_optimizer
from trainers.experience import Experience
from trainers.learner.model import PolicyValueModel, load_lm, merged_lm
from trainers.algorithms.advantages import assign_advantages
from trainers.algorithms.ppo import fill_values, forward_items, ppo_loss, reference_kl, update


def shuffle_seed(seed: int, step: int) -> int:
    """The mini-batch order of ``step`` (0-based; an SFT epoch): a function of seed and step only."""
    return seed * 1_000_003 + step


class Learner:
    """The shared policy-value model, its optimizer and the frozen copy, with the operations a
    backend calls: ``learn`` (values, advantages, PPO update), ``weights``, ``save``/``resume``."""

    def __init__(self, config: TrainConfig, model_path: str, frozen_roles: Collection[str]):
        self.config = config
        lm, self.tokenizer = load_lm(model_path, config.lora, config.device, config.bf16)
        model = PolicyValueModel(lm)
        # A frozen copy of the initial weights plays the frozen roles and is the KL reference;
        # with LoRA and no frozen roles the base model under disabled adapters is the reference.
        self.frozen: PolicyValueModel | None = None
        if frozen_roles or (config.ppo.kl_coef > 0 and not config.lora):
            self.frozen = copy.deepcopy(model).eval().requires_grad_(False)
        self.optimizer = make_optimizer(config.optimizer, model, lr=config.lr, head_lr=config.head_lr,
                                        weight_decay=config.weight_decay, max_grad_norm=config.max_grad_norm,
                                        warmup_steps=config.warmup_steps, zero_stage=config.zero_stage)
        self.model: PolicyValueModel = self.optimizer.module
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
        another library's is given); the metrics of both, each pass timed."""
        started = time.perf_counter()
        metrics = self.prepare(items)
        metrics["values_s"] = time.perf_counter() - started
        metrics.update(update(self.optimizer, items, self.config.ppo, self.pad_id,
                              shuffle_seed(self.config.seed, step), loss))
        return metrics

    def prepare(self, items: Sequence[Experience]) -> dict:
        """Rollout-time values (and reference log-probs with a KL term), then advantages."""
        metrics = {}
        fill_values(self.model, items, self.pad_id, self.config.ppo.micro_batch_tokens, self.reference(),
                    self.config.ppo.share_prompts)
        if self.config.ppo.kl_coef:
            metrics["kl_ref"] = reference_kl(items)
        assign_advantages(items, self.config.ppo)
        return metrics

    def logprobs(self, prompt_ids: list[int], completion_ids: list[int], temperature: float) -> list[float]:
        """The learner's log-probs of recorded ids (to check a rollout engine against it)."""
        import torch

        call = Experience(trajectory="", group="", role="", prompt_ids=prompt_ids,
                          completion_ids=completion_ids, old_logprobs=[], temperature=temperature, reward=0.0)
        with torch.no_grad():
            _, logprobs, _ = forward_items(self.model.eval(), [call], self.pad_id)
        return logprobs[0, :len(completion_ids)].tolist()

    def weights(self) -> dict:
        """The LM's weights under Hugging Face names (LoRA merged): what rollout engines load."""
        return lm_state_dict(self.model.lm)

    # -- checkpoints --------------------------------------------------------------------------
    def save(self, folder: Path, step: int, extra: dict) -> None:
        save_checkpoint(folder, step, self.optimizer, extra, keep=self.config.keep_checkpoints)

    def resume(self, folder: Path) -> dict | None:
        """The saved state of the newest complete checkpoint under ``folder`` (loaded into the
        optimizer), or None when there is none."""
        checkpoint = latest_checkpoint(folder)
        return None if checkpoint is None else load_checkpoint(checkpoint, self.optimizer)


def lm_state_dict(lm) -> dict:
    """The LM's weights under Hugging Face names, LoRA adapters merged into a copy."""
    return merged_lm(lm).state_dict()


@contextmanager
def _adapters_off(model: PolicyValueModel):
    with model.lm.disable_adapter():
        yield model
