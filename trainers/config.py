"""Training configuration: defaults, a YAML file, then command-line overrides (in that order)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path

from trainers.ppo import PPOSettings


@dataclass
class TrainConfig:
    graph: str = "jade"
    data: str | None = None          # QA file (default: the bundled HotpotQA dev sample)
    index: str | None = None         # built index directory (default: bundled BM25 store)
    model: str = "offline"           # "offline" (packaged SmolLM2-135M) or a local HF directory
    out: str = "runs/ppo"
    steps: int = 10
    seed: int = 0
    limit: int | None = None         # use only the first N questions (the rest stay held out)
    # rollout
    questions_per_step: int = 4
    samples_per_question: int = 1    # > 1 for GRPO groups
    temperature: float = 1.0
    concurrency: int = 8
    max_rounds: int | None = None    # run budget override (Settings.max_rounds)
    fallback_workflow: str | None = None  # override Settings.fallback_workflow ("" = none)
    train_roles: list[str] | None = None  # default: what the reward scheme trains
    frozen_roles: list[str] | None = None  # default: what the method freezes (MAO-ARAG executors)
    # reward
    reward: dict = field(default_factory=dict)  # {"scheme": name, **options}
    # optimization
    backend: str = "deepspeed"       # "deepspeed" (ZeRO + CPU Adam) or "torch" (plain AdamW)
    zero_stage: int = 2
    lr: float = 2e-5
    head_lr: float = 1e-3
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    warmup_steps: int = 0
    lora: dict | None = None         # peft LoraConfig options, e.g. {"r": 16, "lora_alpha": 32}
    ppo: PPOSettings = field(default_factory=PPOSettings)
    # bookkeeping
    save_every: int = 1
    keep_checkpoints: int = 2
    export_hf: bool = True           # write OUT/hf at the end (loadable with --policy hf:OUT/hf)

    def to_dict(self) -> dict:
        return asdict(self)


def _known(cls, values: dict, where: str) -> None:
    names = {f.name for f in fields(cls)}
    unknown = sorted(set(values) - names)
    if unknown:
        raise ValueError(f"{where}: unknown option(s) {', '.join(unknown)}")


def from_dict(values: dict, where: str = "config") -> TrainConfig:
    values = dict(values)
    _known(TrainConfig, values, where)
    ppo = values.pop("ppo", None) or {}
    if isinstance(ppo, dict):
        _known(PPOSettings, ppo, f"{where}: ppo")
        ppo = PPOSettings(**ppo)
    return TrainConfig(**values, ppo=ppo)


def load_config(path: str | Path | None, overrides: dict) -> TrainConfig:
    """YAML file (if any) then overrides; keys of ``overrides`` with value None are ignored,
    and ``ppo.<name>`` keys override fields of the PPO settings."""
    import yaml

    values = {}
    if path:
        loaded = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
        if not isinstance(loaded, dict):
            raise ValueError(f"{path}: expected a mapping of options")
        values = loaded
    config = from_dict(values, str(path or "config"))
    plain = {k: v for k, v in overrides.items() if v is not None and not k.startswith("ppo.")}
    ppo = {k[4:]: v for k, v in overrides.items() if v is not None and k.startswith("ppo.")}
    _known(TrainConfig, plain, "overrides")
    _known(PPOSettings, ppo, "overrides")
    return replace(config, **plain, ppo=replace(config.ppo, **ppo))
