"""The PPO update with shared prompts computed once vs every call padded in full (today's path
before this change), on one recorded JADE GRPO buffer, in one run.

The buffer comes from the offline model (SmolLM2-135M-Instruct, float32, CPU) sampling JADE at
T = 0.7 with ``samples`` runs per question — the recipe's PPO stage shape (4 questions × 4
samples, GRPO, one epoch, mini-batches of 16). Both sides run the same update (``update``: value
pass, clipped PPO, DeepSpeed ZeRO-2 + CPU Adam) on copies of the same weights and buffer; only
``share_prompts`` differs. Trained tokens are counted as the unshared computation counts them
(every call's prompt and completion), so the rate compares like with like. Peak memory is the
process's resident set above its level before each update (sampled every 10 ms).

    python benchmarks/bench_shared_prompts.py [--questions 4] [--samples 4] [--buffer FILE] [--fixed-workflow RA,AG]

``--buffer FILE`` keeps the recorded buffer (JSON lines): a rerun with the same file skips the
rollouts and times the same calls again.

Last line: ``shared-prompt update speedup: X`` (goal: X >= 2.5 on this machine).
"""

from __future__ import annotations

import argparse
import copy
import os
import threading
import time
from collections import Counter
from dataclasses import asdict
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

from ragteam.graphs.apps.progress import quiet_libraries

quiet_libraries("lines")

from jade_buffer import record_jade_buffer
from ragteam.nodes.policies.offline_model import ensure_offline_model
from ragteam.stores.jsonl import read_records, write_records
from ragteam.trainers.algorithms.advantages import assign_advantages
from ragteam.trainers.algorithms.settings import PPOSettings
from ragteam.trainers.learner.ppo_update import fill_values, update
from ragteam.trainers.experience import Experience
from ragteam.trainers.learner.model import PolicyValueModel, load_lm
from ragteam.trainers.learner.optimizers import make_optimizer


def resident_bytes() -> int:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmRSS:"))


class PeakMemory:
    """Peak resident memory above the level at entry, sampled in a background thread."""

    def __enter__(self):
        self.base = self.peak = resident_bytes()
        self.running = True
        self.thread = threading.Thread(target=self._sample, daemon=True)
        self.thread.start()
        return self

    def _sample(self):
        while self.running:
            self.peak = max(self.peak, resident_bytes())
            time.sleep(0.01)

    def __exit__(self, *exc):
        self.running = False
        self.thread.join()

    @property
    def above_base_mib(self) -> float:
        return (self.peak - self.base) / 2 ** 20


def buffer_shape(items) -> str:
    prompts = Counter(tuple(e.prompt_ids) for e in items)
    prompt_tokens = sum(len(e.prompt_ids) for e in items)
    completion_tokens = sum(len(e.completion_ids) for e in items)
    unique = sum(len(p) for p in prompts)
    return (f"{len(items)} calls, {prompt_tokens} prompt + {completion_tokens} completion tokens "
            f"(prompt:completion {prompt_tokens / completion_tokens:.1f}:1); {len(prompts)} distinct prompts "
            f"(mean {len(items) / len(prompts):.2f} calls each), {unique} distinct prompt tokens; "
            f"shared computation needs {(unique + completion_tokens) / (prompt_tokens + completion_tokens):.2f} "
            f"of the unshared tokens")


def timed_update(lm, items, settings: PPOSettings, pad_id: int) -> dict:
    torch.manual_seed(0)
    optimizer = make_optimizer("deepspeed", PolicyValueModel(copy.deepcopy(lm)), lr=1e-6, head_lr=1e-4,
                               zero_stage=2)
    work = copy.deepcopy(items)
    with PeakMemory() as memory:
        started = time.perf_counter()
        fill_values(optimizer.module, work, pad_id, settings.micro_batch_tokens, share_prompts=settings.share_prompts)
        values_s = time.perf_counter() - started
        assign_advantages(work, settings)
        stats = update(optimizer, work, settings, pad_id, shuffle_seed=0)
    return {**stats, "values_s": values_s, "peak_mib": memory.above_base_mib}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--questions", dest="n_questions", type=int, default=4, metavar="N",
                        help="bundled questions recorded (default 4)")
    parser.add_argument("--samples", type=int, default=4, help="JADE runs per question (default 4)")
    parser.add_argument("--buffer", type=Path, help="JSON lines of the recorded calls (reused if present)")
    parser.add_argument("--fixed-workflow", default="", metavar="WORKFLOW",
                        help="record runs that all take this workflow (RA,AG: the shape of the "
                             "warm-started team, whose planner chose RA,AG for every question)")
    args = parser.parse_args()
    torch.manual_seed(0)
    started = time.perf_counter()
    if args.buffer and args.buffer.exists():
        lm, tokenizer = load_lm(str(ensure_offline_model()))
        items = [Experience(**record) for record in read_records(args.buffer)]
        print(f"loaded {args.buffer}: {buffer_shape(items)}")
    else:
        lm, tokenizer, items = record_jade_buffer(args.n_questions, args.samples, args.fixed_workflow)
        if args.buffer:
            write_records(args.buffer, [asdict(e) for e in items])
        print(f"recorded {args.n_questions} questions x {args.samples} samples in "
              f"{time.perf_counter() - started:.0f} s: {buffer_shape(items)}")
    pad = tokenizer.pad_token_id
    for share in (False, True):  # warm-up: DeepSpeed's op builds and first-use allocations
        timed_update(lm, items[:2], PPOSettings(advantage="grpo", share_prompts=share), pad)
    rows = {}
    for share in (False, True):
        settings = PPOSettings(advantage="grpo", epochs=1, minibatch_size=16, share_prompts=share)
        rows[share] = timed_update(lm, items, settings, pad)
    print(f"\n{'update (GRPO, DeepSpeed)':26} {'trained tok':>11} {'computed tok':>12} {'update s':>8} "
          f"{'values s':>8} {'tok/s':>7} {'peak MiB':>8}")
    for share, r in rows.items():
        name = "shared prompts (new)" if share else "every call padded (old)"
        print(f"{name:26} {r['update_tokens']:11d} {r['update_computed_tokens']:12d} {r['update_s']:8.1f} "
              f"{r['values_s']:8.1f} {r['tokens_per_s']:7.1f} {r['peak_mib']:8.0f}")
    speedup = rows[True]["tokens_per_s"] / rows[False]["tokens_per_s"]
    values = rows[False]["values_s"] / max(rows[True]["values_s"], 1e-9)
    print(f"value pass speedup: {values:.2f}")
    print(f"shared-prompt update speedup: {speedup:.2f}")


if __name__ == "__main__":
    main()
