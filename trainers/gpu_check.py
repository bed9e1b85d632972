"""A check a user with a GPU can run before a long job: one embedded PPO step and one Ray step on
one GPU, each followed by the engine-vs-learner log-prob check, and the figures measured.

    make gpu-check MODEL=/path/to/a/small/hf/model          # or:
    python trainers/gpu_check.py --model /path/to/model [--skip-ray] [--lora-r 16] [--device cpu --sampler hf]

Each step: JADE on two bundled questions, two runs each, GRPO, learner in bfloat16 on the GPU,
vLLM rollouts with the GPU defaults (``nodes.policies.vllm.engine_args``), then a weight sync.
After the sync the engine's behaviour log-probs of fresh greedy calls are compared with the
learner's log-probs of the same ids: they differ only by precision (bfloat16 vs the engine's
kernels), so the mean gap must stay small (``--tolerance``, default 0.05 nats per token) or the
sync did not reach the engine. With ``--lora-r`` the learner trains LoRA adapters and each sync
sends the adapter alone (``weight_sync: adapter``), which the engines serve over the base weights.
With ``--adapter NAME=ROLE[,ROLE]`` (repeatable) the learner trains one adapter per group of roles
(``adapters:``, of ``--lora-r``'s rank, 16 by default); the probe calls are the planner's and the
answerer's, each rescored by the learner under its own role's adapter, and the gap is also given
per role. Prints one JSON line per phase and exits 1 when a check fails.

``--device cpu --sampler hf --skip-ray`` runs the same path on a CPU (what the test suite does).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if not __package__ and str(ROOT) not in sys.path:  # run as a script from a checkout
    sys.path.insert(0, str(ROOT))

CHECK_RUN = {"graph": "jade", "limit": 2, "questions_per_step": 2, "samples_per_question": 2, "steps": 1,
             "temperature": 0.7, "max_rounds": 2, "concurrency": 4, "ppo.advantage": "grpo", "export_hf": False}


def probe_requests():
    """Greedy calls as a graph makes them (the planner's and the answerer's prompts), to score on
    both sides."""
    from ragteam.nodes.roles.base import Observation
    from ragteam.nodes.roles.jade import AG, PLANNER
    from ragteam.stores.demo import demo_questions

    return [role.request(Observation(query=q["question"]), temperature=0.0)
            for role in (PLANNER, AG) for q in demo_questions()[:4]]


def step_check(config) -> dict:
    """One PPO step on ``config``'s backend, then the engine's log-probs of fresh greedy calls
    against the learner's on the same ids."""
    from ragteam.trainers.loop import Trainer
    from ragteam.trainers.weight_sync import logprob_gap

    started = time.perf_counter()
    trainer = Trainer(config, progress=False)
    setup_s = time.perf_counter() - started
    try:
        metrics = trainer.train_step()
        requests = probe_requests()
        generations = trainer.backend.engine_generate(requests)
        # with per-role adapters each call is rescored under its own role's adapter
        rescored = [trainer.backend.learner_logprobs(g.prompt_ids, g.completion_ids, 0.0, r.role)
                    for r, g in zip(requests, generations)]
        gap = logprob_gap([list(g.logprobs) for g in generations], rescored)
        by_role = {}
        for role in dict.fromkeys(r.role for r in requests):
            rows = [i for i, r in enumerate(requests) if r.role == role]
            by_role[role] = {"adapter": generations[rows[0]].adapter,
                             **logprob_gap([list(generations[i].logprobs) for i in rows], [rescored[i] for i in rows])}
    finally:
        trainer.close()
    return {"setup_s": setup_s, **_step_figures(metrics), **gap, "by_role": by_role}


def rounded(figures: dict) -> dict:
    """``figures`` with every float (nested ones too) to 4 decimals, for printing."""
    return {k: rounded(v) if isinstance(v, dict) else round(v, 4) if isinstance(v, float) else v
            for k, v in figures.items()}


def _step_figures(metrics: dict) -> dict:
    keys = ("step_s", "rollout_s", "values_s", "update_s", "weight_sync_s", "update_tokens",
            "tokens_per_s", "reward", "format_violation_rate", "failed_runs")
    return {k: metrics[k] for k in keys if k in metrics}


def main(argv: list[str] | None = None) -> int:
    from ragteam.graphs.apps.cli import add_sampler_option

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="a local Hugging Face model directory (or 'offline')")
    parser.add_argument("--device", default="cuda", help="the learner's device (default cuda)")
    add_sampler_option(parser, default="vllm", help="what samples the rollouts (default vllm)")
    parser.add_argument("--skip-ray", action="store_true", help="the embedded step only")
    parser.add_argument("--lora-r", type=int, help="LoRA adapters of this rank, synced alone (weight_sync: adapter)")
    parser.add_argument("--adapter", action="append", default=[], metavar="NAME=ROLE[,ROLE]",
                        help="per-role adapters instead: adapter NAME plays these roles (repeatable)")
    parser.add_argument("--tolerance", type=float, default=0.05, help="largest mean log-prob gap accepted")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    from ragteam.trainers.config import adapter_options, load_config, lora_settings

    on_gpu = args.device.startswith("cuda")
    if on_gpu and not torch.cuda.is_available():
        print("gpu_check: no CUDA device is visible (use --device cpu for a dry run)", file=sys.stderr)
        return 2
    print(json.dumps({"device": torch.cuda.get_device_name(0) if on_gpu else "cpu", "torch": torch.__version__,
                      "gpu_memory_gib": round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1)
                      if on_gpu else None}))
    failed = False
    with tempfile.TemporaryDirectory(prefix="ragteam-gpu-check-") as scratch:
        base = {**CHECK_RUN, "model": args.model, "device": args.device, "bf16": on_gpu, "sampler": args.sampler}
        if args.adapter:
            try:
                adapters = adapter_options(args.adapter, args.lora_r or 16)
            except ValueError as error:
                raise SystemExit(f"gpu_check: {error}") from None
            base.update(adapters={name: a.model_dump(exclude_none=True) for name, a in adapters.items()})
            if args.sampler == "vllm":
                base["weight_sync"] = "adapter"
        elif args.lora_r:
            base.update(lora=lora_settings(args.lora_r), weight_sync="adapter" if args.sampler == "vllm" else "channel")
        checks = [("embedded", {})]
        if not args.skip_ray:  # the learner and one engine share the GPU: half of it each
            checks.append(("ray", {"backend": "ray", "ray.rollout_workers": 1,
                                              "ray.gpus_per_worker": 0.5 if on_gpu else 0.0,
                                              "ray.learner_gpus": 0.5 if on_gpu else 0.0,
                                              "vllm.gpu_memory_utilization": 0.4 if on_gpu else None}))
        for name, extra in checks:
            config = load_config(None, {**base, **extra, "out": str(Path(scratch) / name)})
            figures = step_check(config)
            # every role's calls within tolerance: a role served by a stale adapter shows in its own mean
            ok = all(gap["mean_abs_gap"] <= args.tolerance for gap in [figures, *figures["by_role"].values()])
            failed |= not ok
            print(json.dumps({"check": name, "ok": ok, **rounded(figures)}))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
