"""A per-role team on one engine (``--policy adapters:DIR``): decode throughput of the same batch
served by the base weights, by 1 adapter, and by 2 and 6 adapters (requests spread round-robin
over them), in one run on one engine that holds all 6.

The team stands in as 6 random LoRA adapters (peft, every linear layer, lora_B non-zero so each
one changes the model) over a base model (default the offline SmolLM2-135M; ``--model`` another
folder, e.g. one of ``benchmarks/random_model.py``), written as a team export and served either by
vLLM (``VLLMPolicy.for_team``: a ``LoRARequest`` per request, every adapter in one batch) or by the
HF engine (``HFPolicy`` over one peft model), which is timed twice on the same model: as it
decodes by default (a decoding batch holds one role's calls and runs under its adapter, so a batch
of 6 roles decodes as 6 groups whatever the adapters) and with ``mix_roles`` (one batch of any
roles, each row under its own adapter). The phase "1 adapter, 6 roles" serves the 6-adapter
phase's role mix from one adapter, which tells what the adapters cost apart from what the roles
cost. Every request samples (temperature 1) up to ``--tokens`` tokens; each phase runs
``--repeats`` times (vLLM's prefix cache emptied first), and its best time counts. The issue's
goal: 6 adapters at >= 0.8x the single-adapter rate. Measured: docs/train.md (vLLM) and
docs/gpu.md (the HF engine on an H100).

    python benchmarks/bench_role_adapters.py [--sampler vllm|hf] [--device cuda] [--bf16] [--model DIR]
        [--requests 32] [--tokens 32] [--rank 8] [--repeats 2] [--context-words 0]

``--context-words N`` puts N words of (per-request) context before each question, so prefill
weighs as it does in a RAG prompt (a PhantomWiki answer prompt is ~500 tokens); the default
prompts are a dozen tokens and time decoding alone.
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


def request_text(i: int, context_words: int = 0) -> str:
    """Request i's prompt: ``context_words`` words of its own first (so no two prompts share a
    cached prefix), then a question about one of the topics."""
    question = f"Tell me about {TOPICS[i % len(TOPICS)]}."
    if not context_words:
        return question
    words = (TOPICS[(i + k) % len(TOPICS)].split()[-1] for k in range(context_words))
    return f"Request {i}. {' '.join(words)}\n\n{question}"


def serve_team(team, sampler: str, device: str, bf16: bool) -> dict:
    """The team export served by ``sampler``: {variant: (policy, a function that empties its caches)}."""
    if sampler == "vllm":
        from ragteam.nodes.policies.vllm import VLLMPolicy

        policy = VLLMPolicy.for_team(team, name="bench").start()
        return {"vllm": (policy, policy.reset_prefix_cache)}
    import torch

    from ragteam.nodes.policies.hf import HFPolicy
    from ragteam.nodes.policies.role_adapters import load_team_export

    lm, tokenizer, roles = load_team_export(team.folder, device=device)
    if bf16:
        lm = lm.to(torch.bfloat16)
    return {f"hf{', mix_roles' if mix else ''}": (HFPolicy(lm, tokenizer, name="bench", max_batch_size=1024,
                                                          adapters=roles, mix_roles=mix), lambda: None)
            for mix in (False, True)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sampler", choices=["vllm", "hf"], default="vllm", help="what serves the team (default vllm)")
    parser.add_argument("--model", default=None, help="the base model's folder (default: the offline SmolLM2-135M)")
    parser.add_argument("--device", default="cpu", help="the HF engine's device (default cpu)")
    parser.add_argument("--bf16", action="store_true", help="the HF engine in bfloat16")
    parser.add_argument("--requests", type=int, default=32, help="requests per phase (default 32)")
    parser.add_argument("--tokens", type=int, default=32, help="completion tokens per request at most (default 32)")
    parser.add_argument("--rank", type=int, default=8, help="the adapters' LoRA rank (default 8)")
    parser.add_argument("--repeats", type=int, default=2, help="runs per phase; the best counts (default 2)")
    parser.add_argument("--context-words", type=int, default=0,
                        help="words of context before each question, its own per request (default 0)")
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

    names = [f"adapter{i}" for i in range(6)]
    scratch = tempfile.TemporaryDirectory(prefix="bench-role-adapters-")
    # adapter i plays role ri, and adapter0 also s1..s5 (the 6-role mix on one adapter); the role
    # "base" is in none, so it decodes on the base weights
    roles_of = {name: [f"r{i}", *([f"s{j}" for j in range(1, 6)] if i == 0 else [])] for i, name in enumerate(names)}
    base_model = args.model or str(ensure_offline_model())
    team = read_team_export(random_team_export(base_model, Path(scratch.name) / "team", roles_of, args.rank))
    served = serve_team(team, args.sampler, args.device, args.bf16)

    def batch(roles: list[str]) -> list[GenerationRequest]:
        return [GenerationRequest(({"role": "user", "content": request_text(i, args.context_words)},),
                                  SamplingParams(args.tokens, 1.0), role=roles[i % len(roles)])
                for i in range(args.requests)]

    def tok_per_s(policy, empty_caches, requests: list[GenerationRequest]) -> float:
        best = 0.0
        for _ in range(args.repeats):
            empty_caches()  # a phase must not reuse the previous one's prompt blocks
            started = time.perf_counter()
            done = asyncio.run(policy.generate(requests))
            seconds = time.perf_counter() - started
            assert [g.adapter for g in done] == [team.roles.adapter_of(r.role) for r in requests]
            best = max(best, sum(len(g.completion_ids) for g in done) / seconds)
        return best

    phases = {"base weights": ["base"], "1 adapter": ["r0"], "1 adapter, 6 roles": ["r0", *[f"s{j}" for j in range(1, 6)]],
              "2 adapters": ["r0", "r1"], "6 adapters": [f"r{i}" for i in range(6)]}
    rates = {}
    try:
        for variant, (policy, empty_caches) in served.items():
            asyncio.run(policy.generate(batch(phases["6 adapters"])[:8]))  # warm-up: every adapter's first use
            rates[variant] = {phase: tok_per_s(policy, empty_caches, batch(roles)) for phase, roles in phases.items()}
    finally:
        for policy, _ in served.values():
            if hasattr(policy, "close"):
                policy.close()
        scratch.cleanup()

    device = "cpu" if args.sampler == "vllm" else args.device
    print(f"{Path(base_model).name} {'bfloat16' if args.bf16 else 'float32'} on {device}, one engine holding "
          f"6 LoRA adapters (rank {args.rank}, every linear layer); {args.requests} requests x up to "
          f"{args.tokens} tokens, sampled, {args.context_words} words of context each; best of {args.repeats}")
    print("| engine | served by | completion tok/s | vs base weights | vs 1 adapter |")
    print("|---|---|---|---|---|")
    for variant, by_phase in rates.items():
        for phase, rate in by_phase.items():
            print(f"| {variant} | {phase} | {rate:.0f} | {rate / by_phase['base weights']:.2f}x | "
                  f"{rate / by_phase['1 adapter']:.2f}x |")
    for variant, by_phase in rates.items():
        print(f"{variant}: 6 adapters vs 1 adapter playing the same 6 roles: "
              f"{by_phase['6 adapters'] / by_phase['1 adapter, 6 roles']:.2f}x; "
              f"6 adapters vs 1 adapter: {by_phase['6 adapters'] / by_phase['1 adapter']:.2f}x (goal >= 0.8x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
