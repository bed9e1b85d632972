"""The ``ragteam`` command line."""

from __future__ import annotations

import argparse
import json
import os
import random
import sys

from nodes.tracing import render_tree, write_jsonl


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ragteam", description="Agentic RAG graphs on LangGraph.")
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="answer one question with a method graph")
    run.add_argument("question")
    run.add_argument("--graph", default="jade")
    run.add_argument("--policy", default="offline", help="offline | scripted | hf:PATH")
    run.add_argument("--trace-out", help="write the run's transitions as JSON lines")
    run.add_argument("--seed", type=int, default=0)
    run.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    run.add_argument("--max-rounds", type=int, default=None)
    run.add_argument("--top-k", type=int, default=None)
    run.add_argument("--json", action="store_true", help="print the result as JSON")
    return parser


def seed_everything(seed: int) -> None:
    random.seed(seed)
    try:
        import torch
        torch.manual_seed(seed)
    except ImportError:
        pass


def run_command(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from graphs.policies import load_policy
    from graphs.registry import build_graph
    from graphs.run import run
    from nodes.context import RunContext, Settings
    from nodes.team import Team
    from stores.demo import demo_retriever

    seed_everything(args.seed)
    overrides = {k: v for k, v in {"max_rounds": args.max_rounds, "top_k": args.top_k,
                                   "temperature": args.temperature}.items() if v is not None}
    ctx = RunContext(Team(load_policy(args.policy)), demo_retriever(), replace(Settings(), **overrides))
    result = run(build_graph(args.graph), args.question, ctx)
    if args.trace_out:
        write_jsonl(result.transitions, args.trace_out)
    if args.json:
        print(json.dumps({"answer": result.answer, "topologies": result.topologies,
                          "costs": result.costs, "stop_reason": result.stop_reason}))
        return 0
    print(f"Question : {result.question}")
    print(f"Answer   : {result.answer}")
    print(f"Stopped  : {result.stop_reason}")
    for record in result.rounds:
        flag = "" if record["planner_ok"] else f"  (planner format violation -> fallback: {record['planner_violation']})"
        print(f"Round {record['round']} [{record['task_id']}] {record['workflow']}: {record['question']}{flag}")
    costs = result.costs
    print("Costs    : " + ", ".join(f"{k}={v:.2f}" if isinstance(v, float) else f"{k}={v}"
                                   for k, v in sorted(costs.items())))
    print("\nTrace\n" + render_tree(result.transitions))
    if args.trace_out:
        print(f"\n{len(result.transitions)} transitions written to {args.trace_out}")
    return 0


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # ragteam never reaches a model hub at run time
    args = _parser().parse_args(argv)
    if args.command == "run":
        return run_command(args)
    return 2


if __name__ == "__main__":
    sys.exit(main())
