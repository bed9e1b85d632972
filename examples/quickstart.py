"""Quickstart: JADE on a few bundled HotpotQA questions with the offline model and BM25 store.

    make quickstart          # or: python examples/quickstart.py [N]

Runs N questions concurrently (their model calls are batched together), prints each answer
against the gold one with the topology the planner chose per round and the run's costs, shows
the full trace tree of the first run, and writes every transition to runs/quickstart.jsonl.
The untrained 135M model often breaks the role output formats; the runtime records those as
format violations and falls back, which is exactly the signal the PPO trainer learns from.
"""

import asyncio
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from graphs.methods.jade import build_jade_graph
from nodes.policies.spec import load_policy
from graphs.run import arun_many
from nodes.context import RunContext, Settings
from nodes.team import Team
from nodes.tracing import render_tree, write_jsonl
from stores.demo import demo_questions, demo_retriever


def main(n: int = 4) -> None:
    examples = demo_questions()[:n]
    policy = load_policy("offline")                       # SmolLM2-135M-Instruct, CPU
    ctx = RunContext(Team(policy), demo_retriever(), Settings(max_rounds=4))
    results = asyncio.run(arun_many(build_jade_graph(), [e["question"] for e in examples], ctx))

    for example, result in zip(examples, results):
        print(f"\nQ: {result.question}\n   gold: {example['answer']}\n   pred: {result.answer}")
        print(f"   topologies: {' | '.join(result.topologies)}   stop: {result.stop_reason}")
        costs = result.costs
        print(f"   costs: turns={costs['turns']} llm_calls={costs.get('llm_calls', 0)} "
              f"retrievals={costs.get('retrieval_calls', 0)} format_violations={costs.get('format_violations', 0)} "
              f"tokens={costs.get('prompt_tokens', 0)}+{costs.get('completion_tokens', 0)} "
              f"wall={costs['wall_time_s']:.1f}s")
    print("\nTrace of the first run:\n" + render_tree(results[0].transitions))
    out = Path("runs") / "quickstart.jsonl"
    out.parent.mkdir(exist_ok=True)
    write_jsonl([t for r in results for t in r.transitions], out)
    print(f"\n{sum(len(r.transitions) for r in results)} transitions written to {out}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 4)
