"""Training beyond one process: the learner step with 1 vs 2 learner ranks, and the Ray backend's
PPO step and rollout throughput with 1 vs 2 rollout workers.

**Learner ranks** (first): one JADE buffer recorded from the offline model (4 questions x 2
samples), then the learner's whole step on it (values, GRPO advantages, 1 PPO epoch) by one rank
and by 2 data-parallel ranks over gloo (DeepSpeed ZeRO-2, CPU Adam, each rank 1 thread), each
timed after an untimed warm-up step; per-rank optimizer state beside it. Baseline: 1 rank. On
this 2-core machine two ranks add an all-reduce and split nothing that one rank could not
already spread over the cores: expect no gain — the figure says what the ranks cost, the test
``tests/test_data_parallel.py`` says they compute the same step.

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

    python benchmarks/bench_distributed.py [--steps 2] [--questions 8] [--only learner|rollout]

Weight sync, channel vs object store, 1 and 2 engines: ``benchmarks/bench_weight_sync.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

PARAMS = 135e6                  # SmolLM2-135M
H100_BF16_FLOPS = 989e12        # dense bf16 peak
ROLLOUT_MFU, TRAIN_MFU = 0.05, 0.30  # decode of a tiny model is latency-bound; training is not


def run(workers: int, steps: int, questions: int, data: str | None) -> list[dict]:
    from ragteam.trainers.config import load_config
    from ragteam.trainers.loop import Trainer

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


# -- learner ranks ---------------------------------------------------------------------------------
def _learner_rank(rank: int, size: int, port: int, model_dir: str, buffer: str, out: str) -> None:
    """One learner rank: a warm-up step, then a timed one, on the recorded buffer."""
    import copy

    import torch

    from ragteam.trainers.config import TrainConfig
    from ragteam.trainers.learner.data_parallel import init_learner_group
    from ragteam.trainers.learner.learner import Learner

    torch.set_num_threads(max(1, (os.cpu_count() or 1) // size))
    if size > 1:
        init_learner_group("127.0.0.1", port, rank, size)
    config = TrainConfig(graph="jade", model=model_dir, backend="ray" if size > 1 else "embedded",
                         ray={"learner_ranks": size}, optimizer="deepspeed", zero_stage=2,
                         lr=1e-6, samples_per_question=2, ppo={"advantage": "grpo", "epochs": 1})
    learner = Learner(config, model_dir, frozen_roles=[])
    items = pickle.loads(Path(buffer).read_bytes())
    learner.learn(copy.deepcopy(items), step=0)  # warm-up: DeepSpeed's first step sets up buffers
    started = time.perf_counter()
    metrics = learner.learn(copy.deepcopy(items), step=1)
    seconds = time.perf_counter() - started
    Path(out, f"rank{rank}.json").write_text(json.dumps({
        "step_s": seconds, "tokens": metrics["update_tokens"],
        "optimizer_state": learner.optimizer.optimizer_state_numel()}))
    torch.distributed.destroy_process_group()


def learner_ranks() -> dict[int, dict]:
    import socket

    import torch.multiprocessing as mp

    from jade_buffer import record_jade_buffer
    from ragteam.nodes.policies.offline_model import ensure_offline_model

    _, _, items = record_jade_buffer(4, samples=2)
    results = {}
    with tempfile.TemporaryDirectory() as folder:
        buffer = Path(folder, "buffer.pkl")
        buffer.write_bytes(pickle.dumps(items))
        for size in (1, 2):
            out = Path(folder, f"ranks{size}")
            out.mkdir()
            with socket.socket() as probe:
                probe.bind(("127.0.0.1", 0))
                port = probe.getsockname()[1]
            mp.start_processes(_learner_rank, args=(size, port, str(ensure_offline_model()), str(buffer), str(out)),
                               nprocs=size, start_method="spawn")
            ranks = [json.loads(Path(out, f"rank{r}.json").read_text()) for r in range(size)]
            results[size] = {"step_s": max(r["step_s"] for r in ranks), "tokens": ranks[0]["tokens"],
                             "optimizer_state": ranks[0]["optimizer_state"]}
            print(f"{size} learner rank(s): step {results[size]['step_s']:.2f} s for "
                  f"{results[size]['tokens']} tokens ({results[size]['tokens'] / results[size]['step_s']:.0f} tok/s), "
                  f"optimizer state per rank {results[size]['optimizer_state'] / 1e6:.1f} M values", flush=True)
    one, two = results[1], results[2]
    print(f"ratio 2 ranks / 1 rank: step time {two['step_s'] / one['step_s']:.2f}x, "
          f"optimizer state per rank {two['optimizer_state'] / one['optimizer_state']:.2f}x")
    return results


def learner_estimate_7b(results: dict[int, dict]) -> None:
    """The measured step's tokens, scaled to a 7B model on 8 H100s (arithmetic, not a measurement)."""
    tokens = results[1]["tokens"]
    params, gpus, mfu = 7e9, 8, 0.35
    compute_s = 8 * params * tokens / (gpus * H100_BF16_FLOPS * mfu)  # values pass 2N + update 6N per token
    grads_gb = 2 * params * 2 / 1e9  # ZeRO-2: bf16 gradients reduce-scattered, weights all-gathered
    comm_s = grads_gb * (gpus - 1) / gpus / 150  # ~150 GB/s achieved NVLink ring bandwidth
    print(f"\npaper estimate, 7B on 8xH100 (ZeRO-2, bf16, MFU {mfu:.0%}): the same {tokens}-token step "
          f"computes in {compute_s * 1e3:.0f} ms and moves {grads_gb:.0f} GB of gradients and weights per "
          f"optimizer step in ~{comm_s * 1e3:.0f} ms; a buffer of 64 questions x 4 samples (~{tokens * 32:,} "
          f"tokens) would compute in ~{compute_s * 32:.1f} s per epoch.")


# -- rollout workers ---------------------------------------------------------------------------------
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
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=2, help="Ray PPO steps counted after the warm-up step (default 2)")
    parser.add_argument("--questions", type=int, default=8, help="questions per Ray PPO step (default 8)")
    parser.add_argument("--only", choices=["learner", "rollout"], help="only the learner ranks, or only the Ray "
                        "rollout workers (default: both)")
    args = parser.parse_args()
    only, steps, questions = args.only, args.steps, args.questions
    data = None
    if only in (None, "learner"):
        print(f"the learner's step, offline SmolLM2-135M, 1 vs 2 ranks, {os.cpu_count()} CPUs")
        learner_estimate_7b(learner_ranks())
    if only == "learner":
        return
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
