"""Rollout engines on the eval workload: HF one question at a time, HF at concurrency 16, vLLM at
concurrency 16 (and vLLM one at a time), in one run.

Same questions (53 HotpotQA dev), graph (JADE, max 3 rounds), offline model, greedy decoding and
retriever for every setting. Prints questions/s and completion tokens/s per setting, the share
of prompt tokens vLLM served from its prefix cache, and the prefill-bound floor: this workload
has ~18 prompt tokens per completion token and prefill on a CPU is compute-bound, so no engine
can beat (uncached prompt tokens ÷ measured prefill rate). Last line: the ratio of vLLM
concurrent to HF one at a time.

    python benchmarks/bench_engines.py [--questions 53] [--data path/to/hotpotqa-dev53.json]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

from ragteam.graphs.eval.evaluate import evaluate_graph  # noqa: E402
from ragteam.graphs.methods import build_graph  # noqa: E402
from ragteam.nodes.context import RunContext, Settings  # noqa: E402
from ragteam.nodes.policies.spec import load_policy  # noqa: E402
from ragteam.nodes.team import Team  # noqa: E402
from ragteam.stores.datasets import read_dataset  # noqa: E402

# The demo store (bm25s → numba) is imported inside main(): vLLM's spawned workers re-import this
# module, and vLLM 0.32's CPU kernel registration fails on llvmlite objects in sys.modules.
SHARED = Path(__file__).resolve().parents[2] / "shared" / "data" / "hotpotqa-dev53.json"


def measure(policy, examples, concurrency: int, out: Path) -> dict:
    from ragteam.stores.demo import demo_retriever

    ctx = RunContext(Team(policy), demo_retriever(), Settings(max_rounds=3))
    started = time.perf_counter()
    records = asyncio.run(evaluate_graph("jade", build_graph("jade"), examples, ctx, out, concurrency,
                                         progress=False))
    seconds = time.perf_counter() - started
    return {"seconds": seconds, "questions_per_s": len(records) / seconds,
            "completion_tok_per_s": sum(r["completion_tokens"] for r in records) / seconds,
            "prompt_tokens": sum(r["prompt_tokens"] for r in records),
            "predictions": [r["prediction"] for r in records]}


def prefill_rate(hf_policy, tokens: int = 900, repeats: int = 3) -> float:
    """HF forward tokens/s on one prompt of RAG length (batch 1): the CPU's prefill speed."""
    ids = torch.randint(100, 10_000, (1, tokens))
    with torch.inference_mode():
        hf_policy.model(ids)  # warm-up
        started = time.perf_counter()
        for _ in range(repeats):
            hf_policy.model(ids)
    return tokens * repeats / (time.perf_counter() - started)


def main(n: int, data: Path) -> None:
    examples = read_dataset(data).examples[:n]
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        # HF first and vLLM's engine only afterwards: an idle engine still polls and takes CPU
        hf = load_policy("offline")
        for label, concurrency in (("HF, one at a time", 1), ("HF, concurrency 16", 16)):
            results[label] = measure(hf, examples, concurrency, Path(tmp) / f"hf{concurrency}")
        rate = prefill_rate(hf)
        vllm = load_policy("offline", engine="vllm").start()
        for label, concurrency in (("vLLM, one at a time", 1), ("vLLM, concurrency 16", 16)):
            vllm.reset_prefix_cache()  # each pass starts cold
            results[label] = measure(vllm, examples, concurrency, Path(tmp) / f"vllm{concurrency}")
            results[label]["cached_share"] = vllm.cached_prompt_tokens / max(vllm.prompt_tokens, 1)
            results[label]["uncached_prompt_tokens"] = vllm.prompt_tokens - vllm.cached_prompt_tokens
        vllm.close()

    print(f"JADE, {len(examples)} questions ({data.name}), offline SmolLM2-135M, greedy, max 3 rounds")
    print(f"{'setting':<22} {'seconds':>8} {'questions/s':>12} {'compl. tok/s':>13} {'prefix-cached':>14}")
    for label, r in results.items():
        cached = f"{100 * r['cached_share']:.0f}%" if "cached_share" in r else "-"
        print(f"{label:<22} {r['seconds']:8.1f} {r['questions_per_s']:12.3f} "
              f"{r['completion_tok_per_s']:13.1f} {cached:>14}")
    base = results["HF, one at a time"]["predictions"]
    for label, r in results.items():
        same = sum(a == b for a, b in zip(base, r["predictions"]))
        print(f"identical predictions vs HF one at a time, {label}: {same}/{len(base)}")
    fast = results["vLLM, concurrency 16"]
    floor = fast["uncached_prompt_tokens"] / rate
    print(f"prefill rate (HF, batch 1, 900 tokens): {rate:.0f} tok/s")
    print(f"prefill-bound floor for vLLM concurrency 16: {fast['uncached_prompt_tokens']} uncached prompt "
          f"tokens / {rate:.0f} tok/s = {floor:.1f} s; measured {fast['seconds']:.1f} s "
          f"({floor / fast['seconds']:.0%} of the floor's speed)")
    print(f"vLLM concurrent / vLLM one at a time: "
          f"{results['vLLM, one at a time']['seconds'] / fast['seconds']:.2f}x (target >= 2)")
    print(f"vllm/hf throughput ratio: {results['HF, one at a time']['seconds'] / fast['seconds']:.2f}")


if __name__ == "__main__":
    from ragteam.stores.demo import DEMO_QUESTIONS

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--questions", type=int, default=53, help="the first N questions of the data (default 53)")
    parser.add_argument("--data", type=Path, default=SHARED if SHARED.exists() else DEMO_QUESTIONS,
                        help="a dataset file (default: ../shared/data/hotpotqa-dev53.json if present, else the "
                             "bundled questions)")
    args = parser.parse_args()
    main(args.questions, args.data)
