"""Planner calls with their shared instruction computed once vs in every call (the path before
this change), in one run, on the offline model (SmolLM2-135M-Instruct, float32, CPU).

Every planner prompt is the same ~245 tokens of instruction and demonstrations followed by ~25
of question. Two halves, each timed both ways on the same model and calls:

- **generation**: ``--calls`` greedy planner replies to distinct questions in one batch. Before:
  transformers' SDPA (which copies each grouped KV head under a mask) and every row computing its
  whole prompt. After: SDPA over the grouped heads in place (``nodes/policies/grouped_attention``)
  and the batch's common prefix computed once (``nodes/policies/hf.py``). The replies must match.
- **update**: one forward + backward over the warm start's calls (each question's prompt with
  ``AG``, ``RA,AG`` and ``QDS`` as completions). Before: each prompt computed once (shared
  prompts). After: also the prompts' common prefix once per row (``trainers/learner/batches.py``).

    python benchmarks/bench_planner_prompts.py [--calls 32]

Last lines: ``planner generation speedup: X`` and ``planner update speedup: Y``.
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

from ragteam.graphs.apps.progress import quiet_libraries

quiet_libraries("lines")

import ragteam.nodes.policies.hf as hf
import ragteam.trainers.learner.batches as batches
from ragteam.nodes.policies.grouped_attention import use_grouped_sdpa
from ragteam.nodes.policies.offline_model import ensure_offline_model
from ragteam.nodes.roles.base import Observation
from ragteam.nodes.roles.jade import PLANNER
from ragteam.stores.datasets import QAExample
from ragteam.trainers.learn_check import planner_requests
from ragteam.trainers.learner.model import PolicyValueModel, load_lm
from ragteam.trainers.learner.ppo_update import forward_items


def questions(n: int) -> list[str]:
    relations = ("mother", "father")
    return [f"Who is the {' of the '.join(relations[(i >> k) & 1] for k in range(1 + i % 3))} of "
            f"Person{i} Name{i}?" for i in range(n)]


def time_generation(policy, requests, before: bool) -> tuple[float, list]:
    policy.model.set_attn_implementation("sdpa") if before else use_grouped_sdpa(policy.model)
    hf.MIN_CACHED_PREFIX = 10 ** 9 if before else 32
    started = time.perf_counter()
    out = policy.generate_batch(requests)
    return time.perf_counter() - started, [g.completion_ids for g in out]


def time_update(model, items, pad_id: int, before: bool) -> tuple[float, int]:
    batches.MIN_SHARED_PREFIX = 10 ** 9 if before else 16
    model.zero_grad(set_to_none=True)
    started = time.perf_counter()
    batch, logprobs, _ = forward_items(model, items, pad_id)
    (-(logprobs * batch.completion_mask).sum()).backward()
    return time.perf_counter() - started, batch.real_tokens


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--calls", type=int, default=32)
    p.add_argument("--update-questions", type=int, default=16)
    args = p.parse_args()
    torch.manual_seed(0)
    lm, tokenizer = load_lm(str(ensure_offline_model()))
    policy = hf.HFPolicy(lm, tokenizer, name="bench")
    requests = [PLANNER.request(Observation(query=q)) for q in questions(args.calls)]
    time_generation(policy, requests[:2], before=False)  # warm up (the stop-token index)
    before_s, before_ids = time_generation(policy, requests, before=True)
    after_s, after_ids = time_generation(policy, requests, before=False)
    assert before_ids == after_ids, "the replies differ"
    print(f"generation, {args.calls} greedy planner replies: before {before_s:.2f} s, after {after_s:.2f} s")

    examples = [QAExample(f"q{i}", q, ("x",)) for i, q in enumerate(questions(args.update_questions))]
    items = planner_requests(examples, policy, few_shot=True)
    model = PolicyValueModel(lm).train()
    time_update(model, items[:3], tokenizer.pad_token_id, before=False)  # warm up
    old_s, old_tokens = time_update(model, items, tokenizer.pad_token_id, before=True)
    new_s, new_tokens = time_update(model, items, tokenizer.pad_token_id, before=False)
    print(f"update, {len(items)} planner calls (forward + backward): before {old_s:.2f} s ({old_tokens} tokens "
          f"computed), after {new_s:.2f} s ({new_tokens} tokens)")
    print(f"planner generation speedup: {before_s / after_s:.2f}")
    print(f"planner update speedup: {old_s / new_s:.2f}")


if __name__ == "__main__":
    main()
