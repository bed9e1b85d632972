"""The HF engine (``HFPolicy.generate_batch``) against a plain ``model.generate`` on the same
prompts, batch size and token budget, in one run.

Both decode the same left-padded prompt ids greedily. ``HFPolicy`` adds what the trace needs:
per-row stop strings / budgets / finish reasons and the behaviour log-probs of every token;
plain ``generate`` does none of it. Completion tokens/s counts, for each side, the tokens it
returns (up to and including EOS). Each side runs ``--repeats`` times, interleaved, and the best
time counts (the CPU is shared). Works on any device (``--device``).

    python benchmarks/bench_hf_engine.py [--batch 16] [--new-tokens 32] [--model offline|PATH]

Last line: ``HFPolicy vs generate: X`` (tokens/s ratio; 1.0 = no overhead).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from ragteam.nodes.policies.hf import HFPolicy, encode_prompt  # noqa: E402
from ragteam.nodes.policies.protocol import GenerationRequest, SamplingParams  # noqa: E402

TOPICS = ["the Eiffel Tower", "photosynthesis", "the Roman Empire", "black holes", "the printing press",
          "honey bees", "the Amazon river", "jazz music", "volcanoes", "the moon landing", "chess",
          "coffee", "the Great Wall", "penguins", "electricity", "the Olympic games"]


def requests(batch: int, new_tokens: int, stops: tuple[str, ...]) -> list[GenerationRequest]:
    # One role and prompts of near-equal length: HFPolicy decodes them as one group, like generate.
    return [GenerationRequest(({"role": "user", "content": f"Tell me about {TOPICS[i % len(TOPICS)]}."},),
                              SamplingParams(new_tokens, 0.0, stops), role="AG") for i in range(batch)]


def plain_generate(policy: HFPolicy, reqs: list[GenerationRequest]) -> tuple[float, int, list[list[int]]]:
    """Seconds, completion tokens and ids of a bare greedy ``generate`` on the same ids."""
    tok, model = policy.tokenizer, policy.model
    ids = [encode_prompt(tok, r)[1] for r in reqs]
    width = max(map(len, ids))
    inputs = torch.tensor([[tok.pad_token_id] * (width - len(i)) + i for i in ids], device=model.device)
    mask = torch.tensor([[0] * (width - len(i)) + [1] * len(i) for i in ids], device=model.device)
    eos = sorted(policy._eos_ids)
    started = time.perf_counter()
    with torch.inference_mode():
        out = model.generate(input_ids=inputs, attention_mask=mask, do_sample=False,
                             max_new_tokens=reqs[0].sampling.max_new_tokens, eos_token_id=eos,
                             pad_token_id=tok.pad_token_id)
    if model.device.type == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - started
    rows = []
    for row in out[:, width:].tolist():  # keep up to and including the first EOS
        end = next((j + 1 for j, t in enumerate(row) if t in eos), len(row))
        rows.append(row[:end])
    return seconds, sum(map(len, rows)), rows


def engine_generate(policy: HFPolicy, reqs: list[GenerationRequest]):
    started = time.perf_counter()
    gens = policy.generate_batch(reqs)
    return time.perf_counter() - started, sum(len(g.completion_ids) for g in gens), gens


def main(argv: list[str] | None = None) -> float:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="offline", help="'offline' (SmolLM2-135M) or a local HF model folder")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--bf16", action="store_true")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--stop", action="append", default=None,
                        help="a stop string every request carries (repeatable; default </answer>)")
    args = parser.parse_args(argv)
    from ragteam.nodes.policies.spec import model_dir

    path = model_dir(args.model) if args.model.startswith("offline") else args.model
    policy = HFPolicy.from_pretrained(path, device=args.device, bf16=args.bf16, max_batch_size=args.batch)
    reqs = requests(args.batch, args.new_tokens, tuple(args.stop or ["</answer>"]))
    plain_generate(policy, reqs[:2])  # warm-up: first-call allocations
    engine_generate(policy, reqs[:2])
    best = {"generate": (float("inf"), 0, None), "HFPolicy": (float("inf"), 0, None)}
    for _ in range(args.repeats):
        for name, run in (("generate", plain_generate), ("HFPolicy", engine_generate)):
            result = run(policy, reqs)
            if result[0] < best[name][0]:
                best[name] = result
    print(f"{path}, device {policy.model.device}, batch {args.batch}, up to {args.new_tokens} new tokens, greedy, "
          f"best of {args.repeats}")
    print(f"{'engine':<10} {'seconds':>8} {'tokens':>7} {'tok/s':>8}")
    rate = {}
    for name, (seconds, tokens, _) in best.items():
        rate[name] = tokens / seconds
        print(f"{name:<10} {seconds:8.3f} {tokens:7d} {rate[name]:8.1f}")
    gens, plain = best["HFPolicy"][2], best["generate"][2]
    reasons = {r: sum(g.finish_reason == r for g in gens) for r in ("eos", "stop", "length")}
    same = sum(g.completion_ids == p for g, p in zip(gens, plain) if g.finish_reason != "stop")
    print(f"finish reasons: {reasons}; ids identical to generate on {same}/{len(gens) - reasons['stop']} "
          f"rows not cut by a stop string")
    ratio = rate["HFPolicy"] / rate["generate"]
    print(f"HFPolicy vs generate: {ratio:.2f}")
    return ratio


if __name__ == "__main__":
    main()
