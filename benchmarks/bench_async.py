"""Asynchronous rollouts: step time of synchronous PPO steps vs ``async.max_staleness`` k = 1, 2.

The learner is real (SmolLM2-135M-Instruct, float32, LoRA r = 16 and AdamW on this CPU,
JADE's team on the bundled questions, GRPO with truncated importance weights); the rollout side is a stand-in engine (``nodes.policies.scripted_engine``)
that waits a fixed latency per model call, as a remote engine or an API would, and replies by the
roles' plumbing rules in the learner's token ids. That is the case overlap can help on two cores:
the rollouts wait on something other than these cores. (A local engine on the same two cores
would compete with the learner for them; on separate devices the same overlap applies.)

The default latency, 12 s a call, makes a run's calls (two: the plumbing planner plans RA,AG)
take about as long as one update of this learner here (~26 s); the bound printed, the longer half
over the synchronous step, says how much any overlap could save at the latency given.

Each setting runs ``--steps`` steps from the same seed; the figure is the mean step time after the
first (the first step has no update to overlap with, and is the same in every setting).

``--ray``: the same settings on the Ray backend with a real engine (one rollout worker's vLLM
engine, started once and given to every setting, and one learner actor; LoRA, adapter sync), no
latency added. On this 2-core machine the engine and the learner share the cores, so this
measures what overlap gains when both halves compete for them, not what it gains on separate
devices.

    python benchmarks/bench_async.py [--latency 12.0] [--steps 4] [--ray]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def bench_config(staleness: int, steps: int, folder: str, ray: bool):
    """One setting's run: JADE, 4 questions × 2 samples a step, LoRA with adapter syncs, GRPO with
    truncated importance weights, ``async.max_staleness: staleness``; on Ray with ``ray``."""
    from ragteam.trainers.config import from_dict

    return from_dict({"graph": "jade", "steps": steps, "questions_per_step": 4, "samples_per_question": 2,
                      "sampler": "vllm", "weight_sync": "adapter", "lora": {"r": 16}, "optimizer": "torch",
                      "lr": 1e-5, "ppo": {"advantage": "grpo", "behaviour_correction": "tis"},
                      "async": {"max_staleness": staleness}, "export_hf": False, "save_rollouts": False,
                      **({"backend": "ray", "ray": {"rollout_workers": 1}} if ray else {}),
                      "out": os.path.join(folder, f"k{staleness}")})


def stand_in_engines(latency_s: float) -> list:
    """The stand-in engine: ``latency_s`` a call, the roles' plumbing replies."""
    from transformers import AutoTokenizer

    from ragteam.nodes.policies.scripted_engine import ScriptedEngine
    from ragteam.nodes.policies.spec import model_dir

    path = model_dir("offline")
    return [ScriptedEngine(AutoTokenizer.from_pretrained(path), path, latency_s=latency_s)]


def run(staleness: int, engines: list, steps: int, folder: str, ray: bool = False) -> list[dict]:
    """``steps`` training steps at ``async.max_staleness: staleness`` on ``engines``: each
    step's metrics with its wall time (``step_s``, return to return)."""
    from ragteam.trainers.loop import Trainer

    trainer = Trainer(bench_config(staleness, steps, folder, ray), progress=False, engines=engines)
    history, last = [], time.perf_counter()
    try:
        for _ in range(steps):
            metrics = trainer.train_step()
            now = time.perf_counter()
            history.append({**metrics, "step_s": now - last})
            last = now
    finally:
        trainer.close()
    return history


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--latency", type=float, default=12.0, help="seconds per model call (default 12.0)")
    parser.add_argument("--steps", type=int, default=4, help="steps per setting (default 4)")
    parser.add_argument("--ray", action="store_true", help="the Ray backend with a real vLLM engine, no latency added")
    args = parser.parse_args()
    if args.steps < 2:
        parser.error("--steps: at least 2 (the first step has nothing to overlap with)")
    results = {}
    with tempfile.TemporaryDirectory(prefix="bench-async-") as folder, engines_for(args, folder) as engines:
        for staleness in (0, 1, 2):
            history = run(staleness, engines, args.steps, folder, args.ray)
            later = history[1:]
            results[staleness] = statistics.mean(m["step_s"] for m in later)
            if staleness == 0:  # the best overlap can do: the longer of the two halves
                rollout, learn = (statistics.mean(m[k] for m in later) for k in ("rollout_s", "learn_s"))
                bound = max(rollout, learn) / results[0]
            print(f"k={staleness}: step {results[staleness]:.1f} s (mean of steps 2-{args.steps}); "
                  f"waiting for rollouts {statistics.mean(m['rollout_wait_s'] for m in later):.1f} s, "
                  f"learn {statistics.mean(m['learn_s'] for m in later):.1f} s; "
                  f"calls/run {statistics.mean(m['calls_per_run'] for m in later):.1f}; "
                  f"staleness {[m['staleness'] for m in history]}; "
                  f"weight lag max {max(m.get('weight_lag/max', 0) for m in history):.0f} optimizer steps", flush=True)
    latency = "a real vLLM engine on Ray" if args.ray else f"latency {args.latency} s per call"
    print(f"{latency}, {args.steps} steps per setting; the bound overlap "
          f"could reach, max(rollouts, update) / synchronous step: {bound:.2f}")
    for staleness in (1, 2):
        print(f"async k={staleness} vs synchronous step time: {results[staleness] / results[0]:.2f}")


@contextlib.contextmanager
def engines_for(args, folder: str):
    """The engines every setting is given: the stand-in, or (``--ray``) one rollout worker with
    a real engine on a local Ray, stopped at the end."""
    if not args.ray:
        yield stand_in_engines(args.latency)
        return
    import ray

    from ragteam.trainers.backends.ray import start_ray, start_rollout_workers, stop_rollout_workers
    from ragteam.trainers.loop import frozen_roles_of

    config = bench_config(0, args.steps, folder, ray=True)
    started = start_ray(config)
    workers = start_rollout_workers(config, frozen_roles_of(config))
    try:
        yield workers
    finally:
        stop_rollout_workers(workers)
        if started:
            ray.shutdown()


if __name__ == "__main__":
    main()
