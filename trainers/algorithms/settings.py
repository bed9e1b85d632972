"""The PPO settings (the ``ppo:`` section of the training config, validated by name against the
algorithm registries) and ``Schema``, the strict pydantic base every config section shares.

``trainers.config`` builds the whole training config from these; nothing here imports it.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


class Schema(BaseModel):
    """Unknown keys, booleans as numbers, infinities and NaNs are errors; checked on assignment too."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _no_booleans_as_numbers(cls, values):
        """YAML's ``true`` would otherwise pass as the number 1."""
        if isinstance(values, dict):
            for name, value in values.items():
                field = cls.model_fields.get(name)
                if isinstance(value, bool) and field is not None and field.annotation in (
                        int, float, int | None, float | None):
                    raise ValueError(f"{name}: expected a number, got {value}")
        return values

    def to_dict(self) -> dict:
        """Every option under the name a config file gives it (``async``, not ``async_``)."""
        return self.model_dump(by_alias=True)


class PPOSettings(Schema):
    """The PPO/GRPO update (``ppo:`` in the YAML, ``--advantage``/``--epochs``/… flags)."""

    advantage: str = "gae"          # a registered estimator: gae (critic), grpo (group-normalized)
                                    # or grpo_by_workflow (see algorithms/advantages.py)
    plan_roles: list[str] = ["planner"]  # the roles whose first call in a run chooses the question's
                                         # workflow (grpo_by_workflow, plan_weight)
    # group comparisons (algorithms/advantages.py, module docstring): divide by the group's std
    # (GRPO) or not (Dr. GRPO); groups whose outcome scores all tie compared by cost alone or not
    # at all; the deciding call's advantage multiplier; written replies skipped, importance-
    # weighted (by π_old), made the exact expected gradient of a menu's choice, or trained as if sampled
    group_std: bool = False
    tied_groups: Literal["cost", "zero"] = "cost"
    plan_weight: float = Field(1.0, ge=0)
    written_replies: Literal["skip", "importance", "menu", "sampled"] = "skip"
    # the share λ of each workflow's mean deciding advantage over a step's questions taken off
    # its calls: damps what every question's update shares (algorithms/advantages.py)
    batch_baseline: float = Field(0.0, ge=0, le=1)
    # with batch_baseline: what every question's push agrees on stays (all of one sign: the smallest)
    keep_unanimous: bool = False
    policy_loss: str = "ppo_clip"   # a registered policy loss (trainers/algorithms/losses.py)
    gamma: float = Field(1.0, ge=0, le=1)
    lam: float = Field(0.95, ge=0, le=1)
    whiten_advantages: bool = True
    epochs: int = Field(1, ge=1)
    minibatch_size: int = Field(8, ge=1)        # transitions per optimizer step
    micro_batch_tokens: int = Field(1024, ge=1)  # tokens per forward/backward: real tokens, each
                                                 # shared prompt once (padded tokens when
                                                 # share_prompts is off)
    share_prompts: bool = True  # compute each shared prompt once (trainers/learner/batches.py)
    clip: float = Field(0.2, gt=0)                    # both bounds, unless set apart below
    clip_low: float | None = Field(None, gt=0, lt=1)  # ratio ≥ 1 − clip_low
    clip_high: float | None = Field(None, gt=0)       # ratio ≤ 1 + clip_high (DAPO: > clip_low)
    loss_aggregation: Literal["per_call", "per_token"] = "per_call"  # see algorithms/losses.py
    value_clip: float | None = Field(0.2, gt=0)
    vf_coef: float = Field(0.5, ge=0)
    kl_coef: float = Field(0.0, ge=0)
    kl_in: Literal["loss", "reward"] = "loss"   # k3 term in the loss, or −coef·log-ratio in the
                                                # reward (MAO-ARAG Eq. 9)
    # Off-policy correction of sampled calls: "none" takes the behaviour log-probs as π_old (the
    # ratio's denominator); "tis" takes the learner's own before the update as π_old and weighs
    # each token by min(π_old / π_behaviour, tis_cap), truncated importance sampling for an
    # engine that sampled other weights (stale ones, another precision) (algorithms/ppo.py)
    behaviour_correction: Literal["none", "tis"] = "none"
    tis_cap: float = Field(2.0, gt=0)

    @property
    def clip_bounds(self) -> tuple[float, float]:
        """(clip_low, clip_high), each ``clip`` unless set."""
        return (self.clip_low if self.clip_low is not None else self.clip,
                self.clip_high if self.clip_high is not None else self.clip)

    @field_validator("advantage", "policy_loss")
    @classmethod
    def _registered(cls, name: str, info) -> str:
        """Estimators and policy losses are looked up by name in their registries."""
        from ragteam.trainers.algorithms.advantages import ADVANTAGE_ESTIMATORS
        from ragteam.trainers.algorithms.losses import POLICY_LOSSES

        what, known = {"advantage": ("advantage estimator", ADVANTAGE_ESTIMATORS),
                       "policy_loss": ("policy loss", POLICY_LOSSES)}[info.field_name]
        if name not in known:
            raise ValueError(f"unknown {what} {name!r}; known: {', '.join(known)}")
        return name
