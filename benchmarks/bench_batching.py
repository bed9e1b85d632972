"""Batching: 16 concurrent JADE runs vs the same 16 run one after another, real offline model.

Both sides use SmolLM2-135M-Instruct (float32, CPU), greedy decoding, the same questions, the
same settings and the same seed, so they make the same model calls and produce the same
completions (checked). Concurrent runs meet in the policy's request coalescer, which turns
their calls into batched ``generate`` calls. Figure: completion tokens per second; target
ratio concurrent / sequential >= 4.

The run also measures the two phases of generation on the same model, because RAG role calls are
prompt-heavy (planner instructions, five documents for AG): prefill is compute-bound on a CPU and
gains nothing from batching, while decoding gains several-fold. The end-to-end ratio therefore
lands between the two, weighted by the share of prompt tokens.

    python benchmarks/bench_batching.py [--questions 16]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

from ragteam.graphs.methods.jade import build_jade_graph
from ragteam.nodes.policies.spec import load_policy
from ragteam.graphs.run import arun, arun_many
from ragteam.nodes.context import RunContext, Settings
from ragteam.nodes.team import Team
from ragteam.stores.demo import demo_questions, demo_retriever


def completion_tokens(results) -> int:
    return sum(t.completion_tokens for r in results for t in r.transitions)


def prompt_tokens(results) -> int:
    return sum(t.prompt_tokens for r in results for t in r.transitions)


def phase_rates(model, batch: int, prompt_len: int = 300, steps: int = 32) -> tuple[float, float]:
    """(prefill tok/s, decode tok/s) at this batch size, on random ids."""
    ids = torch.randint(100, 40000, (batch, prompt_len))
    mask = torch.ones_like(ids)
    with torch.inference_mode():
        model(ids[:, :8], logits_to_keep=1)  # warm-up
        started = time.perf_counter()
        model.generate(ids, attention_mask=mask, max_new_tokens=1, do_sample=False)
        prefill_s = time.perf_counter() - started
        started = time.perf_counter()
        model.generate(ids, attention_mask=mask, max_new_tokens=steps + 1, min_new_tokens=steps + 1,
                       do_sample=False)
        decode_s = time.perf_counter() - started - prefill_s
    return batch * prompt_len / prefill_s, batch * steps / decode_s


def main(n: int) -> None:
    torch.manual_seed(0)
    policy = load_policy("offline")
    ctx = RunContext(Team(policy), demo_retriever(), Settings(max_rounds=3, temperature=0.0))
    graph = build_jade_graph()
    questions = [q["question"] for q in demo_questions()[:n]]
    asyncio.run(arun(graph, questions[0], ctx))  # warm-up: first-call allocations

    started = time.perf_counter()
    sequential = [asyncio.run(arun(graph, q, ctx)) for q in questions]
    sequential_s = time.perf_counter() - started

    batches_before = len(policy.coalescer.batch_sizes)
    started = time.perf_counter()
    concurrent = asyncio.run(arun_many(graph, questions, ctx))
    concurrent_s = time.perf_counter() - started
    batch_sizes = policy.coalescer.batch_sizes[batches_before:]

    same = sum(a.transitions[i].completion_ids == b.transitions[i].completion_ids
               for a, b in zip(sequential, concurrent) for i in range(min(len(a.transitions), len(b.transitions))))
    calls = sum(len(r.transitions) for r in sequential)
    seq_tps = completion_tokens(sequential) / sequential_s
    con_tps = completion_tokens(concurrent) / concurrent_s
    print(f"questions                  : {n} (max_rounds=3, greedy)")
    print(f"model calls                : {calls} sequential, {sum(len(r.transitions) for r in concurrent)} concurrent")
    print(f"identical completions      : {same}/{calls}")
    print(f"sequential                 : {sequential_s:.1f} s, {seq_tps:.1f} completion tok/s")
    print(f"concurrent ({n:>2} runs)       : {concurrent_s:.1f} s, {con_tps:.1f} completion tok/s")
    print(f"batch sizes (concurrent)   : {batch_sizes}")
    print(f"tokens per side            : {prompt_tokens(sequential)} prompt, {completion_tokens(sequential)} completion")
    print(f"ratio concurrent/sequential: {con_tps / seq_tps:.2f}x  (target >= 4)")
    prefill_1, decode_1 = phase_rates(policy.model, 1)
    prefill_n, decode_n = phase_rates(policy.model, n)
    print(f"prefill batch 1 vs {n:>2}       : {prefill_1:.0f} vs {prefill_n:.0f} tok/s ({prefill_n / prefill_1:.2f}x)")
    print(f"decode  batch 1 vs {n:>2}       : {decode_1:.0f} vs {decode_n:.0f} tok/s ({decode_n / decode_1:.2f}x)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--questions", type=int, default=16, help="bundled questions, run concurrently and one by one (default 16)")
    main(parser.parse_args().questions)
