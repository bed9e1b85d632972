"""The Ray backend: PPO step time and rollout throughput with 1 vs 2 rollout workers.

Both runs train JADE on the offline model (SmolLM2-135M, float32) with one learner actor
(DeepSpeed ZeRO-2, CPU Adam), the same questions in the same order and the same settings; the
first step of each run is a warm-up (engines compile and fill their caches) and is not counted.
Baseline: 1 worker. Figures per step: rollout seconds, completion tokens per rollout second,
learner seconds, weight-sync seconds and the whole step; then the 2-worker / 1-worker ratios.

On this 2-core machine each worker's engine is bound to one core, so two workers can at best
split the rollout, and the learner and both engines share the same two cores: expect little gain.

Last, a paper estimate of the same step on one 8-GPU node (6 rollout engines, 2 learner GPUs),
from the step's measured token counts and FLOP counts per token at an assumed utilisation. It
is arithmetic, not a measurement.

    python benchmarks/bench_distributed.py [steps_counted] [questions_per_step]
"""

from __future__ import annotations

import os
import sys
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

PARAMS = 135e6                  # SmolLM2-135M
H100_BF16_FLOPS = 989e12        # dense bf16 peak
ROLLOUT_MFU, TRAIN_MFU = 0.05, 0.30  # decode of a tiny model is latency-bound; training is not


def run(workers: int, steps: int, questions: int, data: str | None) -> list[dict]:
    from trainers.config import load_config
    from trainers.loop import Trainer

    with tempfile.TemporaryDirectory() as out:
        config = load_config(None, {"graph": "jade", "out": out, "steps": steps + 1, "seed": 0,
                                    "data": data, "questions_per_step": questions, "temperature": 0.7,
                                    "concurrency": 8, "max_rounds": 2, "backend": "ray",
                                    "ray.rollout_workers": workers, "export_hf": False})
        trainer = Trainer(config, progress=False)
        try:
            history = []
            for _ in range(steps + 1):
                started = time.perf_counter()
                metrics = trainer.train_step()
                metrics["step_s"] = time.perf_counter() - started
                history.append(metrics)
        finally:
            trainer.close()
    return history[1:]  # the warm-up step is not counted


def mean(rows: list[dict], key: str) -> float:
    return sum(r.get(key, 0.0) for r in rows) / len(rows)


def paper_estimate(rows: list[dict]) -> None:
    completion = mean(rows, "rollout_completion_tok_per_s") * mean(rows, "rollout_s")
    trained = mean(rows, "update_tokens")
    rollout_flops = 2 * PARAMS * completion * 8  # ~8x the completion in uncached prompt tokens
    train_flops = 2 * PARAMS * trained + 6 * PARAMS * trained  # values/advantages pass + update
    rollout_s = rollout_flops / (6 * H100_BF16_FLOPS * ROLLOUT_MFU)
    train_s = train_flops / (2 * H100_BF16_FLOPS * TRAIN_MFU)
    print(f"\npaper estimate, one 8xH100 node (6 rollout engines, 2 learners; MFU {ROLLOUT_MFU:.0%} "
          f"rollout, {TRAIN_MFU:.0%} training): rollout {rollout_s * 1e3:.2f} ms, update "
          f"{train_s * 1e3:.2f} ms per step of {completion:.0f} generated and {trained:.0f} trained "
          "tokens. At this size a GPU step is bound by per-call latency (sequential graph calls, "
          "weight broadcast), not FLOPs: the estimate is a floor.")


def main() -> None:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    questions = int(sys.argv[2]) if len(sys.argv) > 2 else 8
    data = None
    print(f"JADE PPO on Ray, offline SmolLM2-135M, {questions} questions per step, "
          f"{steps} counted steps after 1 warm-up, {os.cpu_count()} CPUs")
    keys = ("rollout_s", "rollout_completion_tok_per_s", "learner_s", "weight_sync_s", "step_s")
    results = {}
    for workers in (1, 2):
        results[workers] = rows = run(workers, steps, questions, data)
        print(f"{workers} worker(s): " + ", ".join(f"{k} {mean(rows, k):.2f}" for k in keys), flush=True)
    one, two = results[1], results[2]
    print(f"\nratio 2 workers / 1 worker: rollout throughput "
          f"{mean(two, 'rollout_completion_tok_per_s') / mean(one, 'rollout_completion_tok_per_s'):.2f}x, "
          f"step time {mean(two, 'step_s') / mean(one, 'step_s'):.2f}x")
    paper_estimate(two)


if __name__ == "__main__":
    main()
