"""The host's share of a shared-prompt update: building the packed micro-batches with the dense
[R, 1, L, L] mask (SDPA's layout) against the block layout a GPU's FlexAttention reads (segment
and owner ids, rows padded to its 128-token block, no dense mask), on the same buffers, in one run.

On a GPU this work is on the critical path: the kernels wait while the host builds each
micro-batch. The buffers are ``bench_learner.py``'s GRPO shapes: ``make gpu-bench``'s (8 groups ×
8 samples, 900-token shared prompts, 1,000-token answerer prompts, micro-batches of 8,192
tokens) and one with short answerer prompts (16 × 4, 100 tokens, micro-batches of 4,096).

    python benchmarks/bench_packing.py [--repeats 3]

Last line: ``block layout vs dense mask: X`` (host time per pass, the first buffer, dense ÷ block).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_learner import grpo_buffer  # noqa: E402
from ragteam.trainers.learner.attention import GPU_BLOCK  # noqa: E402
from ragteam.trainers.learner.batches import batch_for  # noqa: E402
from ragteam.trainers.learner.ppo_update import micro_batches  # noqa: E402

BUFFERS = {  # name: (groups, samples, answerer prompt tokens, micro-batch tokens)
    "gpu-bench": (8, 8, 1000, 8192),
    "short answers": (16, 4, 100, 4096),
}


def host_seconds(parts, block: int | None, repeats: int) -> float:
    """Best of ``repeats`` passes building every micro-batch of ``parts``."""
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        for calls in parts:
            batch_for([e.prompt_ids for e in calls], [e.completion_ids for e in calls],
                      [e.temperature for e in calls], 0, True, block=block)
        best = min(best, time.perf_counter() - started)
    return best


def main(argv: list[str] | None = None) -> float:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    print(f"{'buffer':14} {'micro-batches':>13} {'dense mask s':>12} {'block layout s':>14} {'ratio':>6}")
    ratios = []
    for name, (groups, samples, answer_prompt, budget) in BUFFERS.items():
        parts = micro_batches(grpo_buffer(groups, samples, 900, answer_prompt, 48, 49152), budget, True)
        dense, blocked = host_seconds(parts, None, args.repeats), host_seconds(parts, GPU_BLOCK, args.repeats)
        ratios.append(dense / blocked)
        print(f"{name:14} {len(parts):13d} {dense:12.3f} {blocked:14.3f} {ratios[-1]:6.1f}")
    print(f"block layout vs dense mask: {ratios[0]:.1f}")
    return ratios[0]


if __name__ == "__main__":
    main()
