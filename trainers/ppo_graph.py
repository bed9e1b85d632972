"""Train a method graph's shared model with joint PPO.

    python trainers/ppo_graph.py --graph jade --data FILE --index DIR --steps N [--config x.yaml]
    python trainers/ppo_graph.py --out runs/ppo --resume      # continue a killed run exactly
    python trainers/ppo_graph.py --backend ray --ray-workers 2 …   # Ray + OpenRLHF (make setup-ray)

Writes OUT/metrics.jsonl, OUT/tensorboard/, OUT/learning_curve.png, OUT/checkpoints/ and, at
the end, OUT/hf (use it with ``ragteam run|eval --policy hf:OUT/hf``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from graphs.apps.cli import positive_int


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", help="YAML file of TrainConfig options (command-line flags override it)")
    p.add_argument("--graph", help="a method name (`ragteam graphs` lists them) or your own graph as "
                   "path/to/file.py:NAME or package.module:NAME")
    p.add_argument("--data", help="QA file (JSONL / JSON / HotpotQA); default: bundled dev sample")
    p.add_argument("--index", help="built index directory; default: bundled BM25 store")
    p.add_argument("--model", help="'offline' (packaged SmolLM2-135M) or a local HF model directory")
    p.add_argument("--out", help="run directory (default runs/ppo)")
    p.add_argument("--steps", type=int)
    p.add_argument("--seed", type=int)
    p.add_argument("--limit", type=int, help="train on the first N questions only")
    p.add_argument("--questions-per-step", type=int, dest="questions_per_step")
    p.add_argument("--samples", type=int, dest="samples_per_question", help="runs per question")
    p.add_argument("--temperature", type=float)
    p.add_argument("--concurrency", type=int)
    p.add_argument("--engine", choices=["hf", "vllm"], help="rollout engine (default hf)")
    p.add_argument("--max-rounds", type=int, dest="max_rounds")
    p.add_argument("--device", help="the learner's device: cpu (default), cuda[:N] or auto")
    p.add_argument("--bf16", action="store_true", default=None, help="learner weights in bfloat16 (GPU)")
    p.add_argument("--backend", choices=["embedded", "ray", "deepspeed", "torch"],
                   help="where the step runs: embedded (this process, default) or ray (rollout "
                        "workers + a learner actor through OpenRLHF); deepspeed/torch: the old "
                        "spelling of --optimizer")
    p.add_argument("--optimizer", choices=["deepspeed", "torch"],
                   help="the learner's optimizer: deepspeed (ZeRO + CPU Adam, default) or torch (AdamW)")
    p.add_argument("--ray-workers", type=int, dest="ray.rollout_workers", help="rollout workers (ray)")
    p.add_argument("--ray-address", dest="ray.address", help="a running Ray cluster (default: start one here)")
    p.add_argument("--zero-stage", type=int, choices=[0, 1, 2], dest="zero_stage")
    p.add_argument("--lr", type=float)
    p.add_argument("--lora-r", type=positive_int, help="train LoRA adapters of this rank instead of all weights")
    p.add_argument("--reward", help="reward scheme (default: the method's own)")
    p.add_argument("--advantage", choices=["gae", "grpo"], dest="ppo.advantage")
    p.add_argument("--epochs", type=int, dest="ppo.epochs", help="PPO epochs per step")
    p.add_argument("--minibatch-size", type=int, dest="ppo.minibatch_size")
    p.add_argument("--kl-coef", type=float, dest="ppo.kl_coef")
    p.add_argument("--save-every", type=int, dest="save_every")
    p.add_argument("--resume", action="store_true", help="continue from OUT/checkpoints/latest")
    p.add_argument("--no-progress", action="store_true")
    return p


_RUN_CONTROLS = ("config", "resume", "no_progress", "lora_r", "reward")  # not TrainConfig fields


def config_from_args(args: argparse.Namespace):
    """The validated TrainConfig: defaults, then the ``--config`` file, then the flags given."""
    from trainers.config import load_config, lora_settings

    config = load_config(args.config, {k: v for k, v in vars(args).items() if k not in _RUN_CONTROLS})
    if args.lora_r:
        config.lora = lora_settings(args.lora_r)
    if args.reward:
        config.reward = {**config.reward, "scheme": args.reward}
    return config


def make_trainer(config, resume: bool, progress: bool):
    """The training loop on the configured backend (embedded, or Ray + OpenRLHF)."""
    from trainers.loop import Trainer

    return Trainer(config, resume=resume, progress=progress)


def train_ppo(graph: str = "jade", resume: bool = False, **options) -> list[dict]:
    """Joint PPO on ``graph`` — a method name or your own ``path/to/file.py:NAME`` — from Python.
    ``options`` are ``TrainConfig`` fields (``steps=2``, ``out="runs/ppo"``, ``data=...``,
    ``optimizer="torch"``…; ``ppo.<name>``/``ray.<name>`` keys set those sections). Writes the run
    folder like the script does and returns each step's metrics."""
    from trainers.config import load_config

    config = load_config(None, {"graph": graph, **options})
    trainer = make_trainer(config, resume=resume, progress=False)
    try:
        return trainer.train()
    finally:
        trainer.close()  # the vLLM engine, or the Ray actors


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    args = parser().parse_args(argv)
    try:
        config = config_from_args(args)
        trainer = make_trainer(config, resume=args.resume,
                               progress=not args.no_progress and sys.stderr.isatty())
    except (ValueError, FileNotFoundError, RuntimeError) as error:
        print(f"ppo_graph: {error}", file=sys.stderr)
        return 2
    if args.resume and trainer.step:
        print(f"resumed at step {trainer.step} (cursor {trainer.cursor})", file=sys.stderr)
    try:
        history = trainer.train()
    finally:
        trainer.close()  # the vLLM engine, or the Ray actors
    for metrics in history:
        print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in metrics.items()
                          if "/" not in k}))
    out = Path(config.out)
    print(f"metrics: {out / 'metrics.jsonl'}  curve: {out / 'learning_curve.png'}  "
          f"checkpoints: {out / 'checkpoints'}" + (f"  model: {out / 'hf'}" if config.export_hf else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
