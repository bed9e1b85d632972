"""The learning half of joint PPO, apart from where rollouts come from: the shared policy-value
model, its optimizer engine, and the frozen initial copy (it plays the frozen roles and is the KL
reference). The embedded trainer holds one in its own process; the Ray backend holds one inside
a learner actor.
"""

from __future__ import annotations

import copy
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Collection, Sequence

from trainers.learner.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from trainers.config import TrainConfig
from trainers.learner.optimizers import make_engine
from trainers.experience import Experience
from trainers.learner.model import PolicyValueModel, load_lm
from trainers.algorithms.ppo import assign_advantages, ppo_loss, reference_kl, score_rollout, update


class Learner:
    def __init__(self, config: TrainConfig, model_path: str, frozen_roles: Collection[str]):
        self.config = config
        lm, self.tokenizer = load_lm(model_path, config.lora, config.device, config.bf16)
        model = PolicyValueModel(lm)
        # A frozen copy of the initial weights plays the frozen roles and is the KL reference;
        # with LoRA and no frozen roles the base model under disabled adapters is the reference.
        self.frozen: PolicyValueModel | None = None
        if frozen_roles or (config.ppo.kl_coef > 0 and not config.lora):
            self.frozen = copy.deepcopy(model).eval().requires_grad_(False)
        self.engine = make_engine(config.backend_engine, model, lr=config.lr, head_lr=config.head_lr,
                                  weight_decay=config.weight_decay, max_grad_norm=config.max_grad_norm,
                                  warmup_steps=config.warmup_steps, zero_stage=config.zero_stage)
        self.model: PolicyValueModel = self.engine.module
        self.pad_id = self.tokenizer.pad_token_id

    def reference(self):
        """A context-manager factory yielding the KL reference model, or None without KL."""
        if not self.config.ppo.kl_coef:
            return None
        if self.frozen is not None:
            return lambda: nullcontext(self.frozen)
        return lambda: _adapters_off(self.model)

    def prepare(self, items: Sequence[Experience]) -> dict:
        """Rollout-time values (and reference log-probs with a KL term), then advantages."""
        metrics = {}
        score_rollout(self.model, items, self.pad_id, self.config.ppo.micro_batch_tokens,
                      self.reference())
        if self.config.ppo.kl_coef:
            metrics["kl_ref"] = reference_kl(items)
        assign_advantages(items, self.config.ppo)
        return metrics

    def update(self, items: Sequence, step: int, loss=ppo_loss) -> dict:
        """PPO epochs over ``items`` with ``loss`` (ragteam's own unless another is given)."""
        return update(self.engine, items, self.config.ppo, self.pad_id, self.shuffle_seed(step), loss)

    def shuffle_seed(self, step: int) -> int:
        """The mini-batch order of ``step`` (0-based): a function of the seed and step only."""
        return self.config.seed * 1_000_003 + step

    def weights(self) -> dict:
        """The LM's weights under Hugging Face names (LoRA merged): what rollout engines load."""
        return lm_state_dict(self.model.lm)

    # -- checkpoints --------------------------------------------------------------------------
    def save(self, folder: Path, step: int, extra: dict) -> None:
        save_checkpoint(folder, step, self.engine, extra, keep=self.config.keep_checkpoints)

    def resume(self, folder: Path) -> dict | None:
        """The saved state of the newest complete checkpoint under ``folder`` (loaded into the
        engine), or None when there is none."""
        checkpoint = latest_checkpoint(folder)
        return None if checkpoint is None else load_checkpoint(checkpoint, self.engine)


def lm_state_dict(lm) -> dict:
    """The LM's weights under Hugging Face names, LoRA adapters merged into a copy."""
    if hasattr(lm, "merge_and_unload"):
        lm = copy.deepcopy(lm).merge_and_unload()
    return lm.state_dict()


@contextmanager
def _adapters_off(model: PolicyValueModel):
    with model.lm.disable_adapter():
        yield model
