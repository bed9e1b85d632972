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
from collections.abc import Sequence
from pathlib import Path

_CHECKOUT = Path(__file__).resolve().parents[1]
if not __package__ and (_CHECKOUT / "ragteam" / "__init__.py").is_file():
    sys.path.insert(0, str(_CHECKOUT))  # run from a checkout: its own ragteam, not an installed one

from ragteam.graphs.apps.cli import add_sampler_option, positive_int, refused
from ragteam.graphs.apps.progress import add_progress_options, progress_mode, quiet_libraries
from ragteam.trainers.algorithms.advantages import ADVANTAGE_ESTIMATORS
from ragteam.trainers.loop import NothingToTrain


def _backend(value: str) -> str:
    if value in ("deepspeed", "torch"):  # the optimizer's old spelling: one word, one meaning
        raise argparse.ArgumentTypeError(f"--backend {value} is now --optimizer {value}")
    if value not in ("embedded", "ray"):
        raise argparse.ArgumentTypeError(f"choose embedded or ray, not {value!r}")
    return value


def _add_placement_options(p: argparse.ArgumentParser) -> None:
    """Where and how the step runs: the learner's device and optimizer, Ray's workers and ranks."""
    p.add_argument("--weight-sync", choices=["channel", "blob", "adapter"], dest="weight_sync",
                   help="how weights reach a vLLM engine: channel (buckets over a gloo group, default), "
                        "blob, or adapter (with --lora-r: the adapter alone)")
    p.add_argument("--device", help="the learner's device: cpu (default), cuda[:N] or auto")
    p.add_argument("--bf16", action="store_true", default=None, help="learner weights in bfloat16 (GPU)")
    p.add_argument("--backend", type=_backend, metavar="{embedded,ray}",
                   help="where the step runs: embedded (this process, default) or ray (rollout "
                        "workers + a learner actor through OpenRLHF)")
    p.add_argument("--optimizer", choices=["auto", "deepspeed", "torch"],
                   help="the learner's optimizer: torch (AdamW), deepspeed (ZeRO + CPU Adam) or auto "
                        "(default: torch in this process, deepspeed for the ray backend or a --zero-stage)")
    p.add_argument("--ray-workers", type=int, dest="ray.rollout_workers", help="rollout workers (ray)")
    p.add_argument("--ray-address", dest="ray.address", help="a running Ray cluster (default: start one here)")
    p.add_argument("--learner-ranks", type=int, dest="ray.learner_ranks",
                   help="data-parallel learner ranks (ray; DeepSpeed ZeRO, default 1)")
    p.add_argument("--zero-stage", type=int, choices=[0, 1, 2, 3], dest="zero_stage")
    p.add_argument("--gradient-checkpointing", action="store_true", default=None, dest="gradient_checkpointing",
                   help="recompute activations in the backward pass (long calls, big models)")


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
    p.add_argument("--forced-workflow", action="append", dest="forced_workflows", metavar="WORKFLOW",
                   help="JADE: one more run per question with the planner's reply written as this "
                        "workflow (repeat the flag; GRPO groups that compare workflows)")
    p.add_argument("--forced-samples", type=positive_int, dest="forced_samples",
                   help="runs per forced workflow (default 1; 2+ for --advantage grpo_by_workflow)")
    p.add_argument("--temperature", type=float)
    p.add_argument("--concurrency", type=int)
    add_sampler_option(p, default=None, help="what samples the rollouts: hf (the learner's own module, "
                       "default) or vllm (a vLLM engine)")
    p.add_argument("--max-rounds", type=int, dest="max_rounds")
    p.add_argument("--top-k", type=int, dest="top_k", help="documents per retrieval (default 5)")
    p.add_argument("--fan-out", type=int, dest="fan_out", metavar="N",
                   help="a sub-question naming an earlier answer of several names retrieves once per "
                        "name, up to N (default 0: once, the names joined)")
    _add_placement_options(p)
    p.add_argument("--lr", type=float)
    p.add_argument("--lora-r", type=positive_int, help="train LoRA adapters of this rank instead of all weights")
    p.add_argument("--reward", help="reward scheme (default: the method's own)")
    p.add_argument("--advantage", choices=sorted(ADVANTAGE_ESTIMATORS), dest="ppo.advantage")
    p.add_argument("--epochs", type=int, dest="ppo.epochs", help="PPO epochs per step")
    p.add_argument("--minibatch-size", type=int, dest="ppo.minibatch_size")
    p.add_argument("--kl-coef", type=float, dest="ppo.kl_coef")
    p.add_argument("--no-share-prompts", action="store_const", const=False, dest="ppo.share_prompts",
                   help="compute every call's prompt in full (for comparison; default: each shared "
                        "prompt once)")
    p.add_argument("--max-staleness", type=int, dest="async.max_staleness", metavar="K",
                   help="asynchronous rollouts: the next K steps' runs sample while the learner "
                        "updates (0, the default: synchronous steps)")
    p.add_argument("--save-every", type=int, dest="save_every",
                   help="checkpoint every N steps (default: adaptive, ~10%% of the run at most)")
    p.add_argument("--no-save-rollouts", action="store_const", const=False, dest="save_rollouts",
                   help="keep no OUT/rollouts/step-N.jsonl (default: each step's runs, a record each)")
    p.add_argument("--resume", action="store_true", help="continue from OUT/checkpoints/latest")
    p.add_argument("--no-progress", action="store_true", help="the same as --quiet")
    add_progress_options(p)
    return p


_RUN_CONTROLS = ("config", "resume", "no_progress", "lora_r", "reward", "quiet", "log_level")  # not TrainConfig fields
# What a resumed run may change: how long it runs and how it saves, never what it learns.
RESUMABLE = {"steps", "save_every", "keep_checkpoints", "export_hf", "save_rollouts", "concurrency",
             "weight_sync", "async"}


def config_from_args(args: argparse.Namespace):
    """The validated TrainConfig: defaults, then the ``--config`` file, then the flags given. With
    ``--resume`` on a run folder that holds a run, that run's saved config instead, and a flag or
    file value that contradicts it is refused, naming both values."""
    from ragteam.trainers.config import load_config, lora_settings

    flags = {k: v for k, v in vars(args).items() if k not in _RUN_CONTROLS}
    config = load_config(args.config, flags)
    if args.lora_r:
        config.lora = lora_settings(args.lora_r)
    if args.reward:
        config.reward = {**config.reward, "scheme": args.reward}
    if args.resume:
        return resumed_config(config, set(given_keys(args)))
    return config


def given_keys(args: argparse.Namespace) -> list[str]:
    """The TrainConfig keys the command line or the ``--config`` file set explicitly (what
    ``--resume`` compares with the run's own)."""
    from ragteam.trainers.config import read_yaml

    keys = [k for k, v in vars(args).items() if v is not None and k not in _RUN_CONTROLS]
    keys += ["lora"] * bool(args.lora_r) + ["reward"] * bool(args.reward)
    if args.config:
        for key, value in read_yaml(args.config).items():
            nested = isinstance(value, dict) and key in ("ppo", "ray", "vllm", "async")
            keys += [f"{key}.{k}" for k in value] if nested else [key]
    return keys


def resumed_config(requested, given: set[str]):
    """The saved config of the run in ``requested.out`` with the resumable keys the command gave
    (``requested`` itself when the folder holds no run yet)."""
    from ragteam.trainers.config import from_dict
    from ragteam.trainers.loop import saved_config

    saved = saved_config(requested.out)
    if saved is None:
        return requested
    where = f"{requested.out}/run_config.json"
    saved = from_dict(saved, where)
    # The folder given is the run: its checkpoints and metrics are here. A saved out naming
    # another folder was edited, or the file copied from another run; resuming would write this
    # run's next steps over that folder (or pair this checkpoint with another run's config), so
    # it is refused rather than either folder picked silently.
    if not _names_folder(saved.out, requested.out):
        raise ValueError(f"--resume: {where} names out={saved.out!r}, not this run folder "
                         f"{requested.out!r}; set its out to this folder, or start a new run")
    flat_saved, flat_requested = _flat(saved.to_dict()), _flat(requested.to_dict())
    for key in sorted(given - {"out"}):
        top = key.split(".")[0]
        if top in RESUMABLE:
            continue
        matching = [k for k in flat_requested if k == key or k.startswith(key + ".")]
        if not matching:  # a key the config no longer has: it would be dropped unchecked
            raise ValueError(f"--resume: {key} cannot be checked against the run in {requested.out}; "
                             "drop it to continue the run")
        for name in matching:
            if flat_requested[name] != flat_saved.get(name):
                raise ValueError(f"--resume: the run in {requested.out} was started with {name}="
                                 f"{flat_saved.get(name)!r}; this command asks for {name}="
                                 f"{flat_requested[name]!r} (drop it to continue the run, or start "
                                 "a new run with another --out)")
    wanted = requested.to_dict()
    changes = {k: wanted[k] for k in RESUMABLE if any(g.split(".")[0] == k for g in given)}
    return from_dict({**saved.to_dict(), **changes, "out": requested.out}, where)


def _names_folder(saved: str, folder: str) -> bool:
    """Whether a run's saved ``out`` names ``folder``: the same folder, or a relative path (to
    wherever the run was started) that ``folder`` ends with."""
    here, parts = Path(folder).resolve(), Path(os.path.normpath(saved)).parts
    return Path(saved).resolve() == here or (
        not Path(saved).is_absolute() and bool(parts) and here.parts[-len(parts):] == parts)


def _flat(values: dict, prefix: str = "") -> dict:
    flat = {}
    for key, value in values.items():
        if isinstance(value, dict) and key in ("ppo", "ray", "vllm"):
            flat.update(_flat(value, prefix + key + "."))
        else:
            flat[prefix + key] = value
    return flat


def make_trainer(config, resume: bool, progress: str | bool, engines: Sequence | None = None):
    """The training loop on the configured backend (embedded, or Ray + OpenRLHF)."""
    from ragteam.trainers.loop import Trainer

    return Trainer(config, resume=resume, progress=progress, engines=engines)


def train_ppo(graph: str = "jade", resume: bool = False, engines: Sequence | None = None,
              **options) -> list[dict]:
    """Joint PPO on ``graph`` — a method name or your own ``path/to/file.py:NAME`` — from Python.
    ``options`` are ``TrainConfig`` fields (``steps=2``, ``out="runs/ppo"``, ``data=...``,
    ``optimizer="torch"``, ``sampler="vllm"``…; ``ppo.<name>``/``ray.<name>`` keys set those
    sections). ``engines``: started rollout engines to use instead of starting them, which the
    caller keeps (``trainers.engines``). Writes the run folder like the script does and returns
    each step's metrics."""
    from ragteam.trainers.config import load_config

    config = load_config(None, {"graph": graph, **options})
    trainer = make_trainer(config, resume=resume, progress=False, engines=engines)
    try:
        return trainer.train()
    finally:
        trainer.close()  # the vLLM engine, or the Ray actors


def finished_step(out: str) -> int:
    """The step a run's newest checkpoint holds (0 without one), read without loading a model,
    so a resume of a finished run says so at once."""
    from ragteam.trainers.learner.checkpoint import latest_checkpoint, read_json

    checkpoint = latest_checkpoint(Path(out) / "checkpoints")
    state = read_json(checkpoint / "trainer.json") if checkpoint else {}
    return state.get("step", 0) if isinstance(state, dict) else 0


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    args = parser().parse_args(argv)
    try:
        return train(args)
    except OSError as error:  # --out on a read-only mount, a full disk: one line naming the path
        print(f"ppo_graph: {refused(error)}", file=sys.stderr)
        return 2


def train(args: argparse.Namespace) -> int:
    """The run ``args`` describe, from setup to its printed figures; the exit status."""
    try:
        mode = "off" if args.no_progress else progress_mode(args)
        quiet_libraries(mode)
        config = config_from_args(args)
        if args.resume and (done := finished_step(config.out)) >= config.steps:
            print(f"--resume: the run in {config.out} has finished its {config.steps} steps (checkpoint "
                  f"at step {done}); nothing to do: give --steps above {done} to continue it",
                  file=sys.stderr)
            return 0
        trainer = make_trainer(config, resume=args.resume, progress=mode)
    except (ValueError, FileNotFoundError, RuntimeError) as error:
        print(f"ppo_graph: {str(error)[:2000]}", file=sys.stderr)
        return 2
    if args.resume:
        print(f"resumed at step {trainer.step} (cursor {trainer.cursor})" if trainer.step else
              f"--resume: no checkpoint in {config.out} yet; starting the run", file=sys.stderr)
    try:
        history = trainer.train()
    except NothingToTrain as error:
        print(f"ppo_graph: {error}", file=sys.stderr)
        return 2
    finally:
        trainer.close()  # the vLLM engine, or the Ray actors
    for metrics in history:
        print(json.dumps({k: float(f"{v:.4g}") if isinstance(v, float) else v for k, v in metrics.items()
                          if "/" not in k}))  # 4 significant digits: an lr of 2e-05 stays 2e-05
    out = Path(config.out)
    print(f"metrics: {out / 'metrics.jsonl'}  curve: {out / 'learning_curve.png'}  "
          f"checkpoints: {out / 'checkpoints'}" + (f"  model: {out / config.export_name}" if config.export_hf else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
