"""Format compliance of the untrained offline model, per role, with and without demonstrations.

Runs JADE, M-ASK and APEX (or the graphs named) on N bundled questions with SmolLM2-135M-Instruct, greedy, first with
each role's demonstration turns (``Settings.few_shot=True``, the default) and then with the
instructions alone, and prints the share of each role's calls whose output parsed. This is the
baseline the PPO trainer starts from: format violations are its first learning signal.

    python benchmarks/bench_format.py [--questions 24] [--graphs jade m_ask apex]
"""

from __future__ import annotations

import argparse
import asyncio
import os
from collections import Counter

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from ragteam.nodes.policies.spec import load_policy
from ragteam.graphs.methods.registry import build_graph
from ragteam.graphs.run import arun_many
from ragteam.nodes.context import RunContext, Settings
from ragteam.nodes.team import Team
from ragteam.stores.demo import demo_questions, demo_retriever


def compliance(results) -> dict[str, tuple[int, int]]:
    calls, good = Counter(), Counter()
    for result in results:
        for t in result.transitions:
            calls[t.role] += 1
            good[t.role] += t.format_ok
    return {role: (good[role], calls[role]) for role in sorted(calls)}


def main(n: int, graphs: list[str]) -> None:
    policy = load_policy("offline")
    questions = [q["question"] for q in demo_questions()[:n]]
    for graph_name in graphs:
        graph = build_graph(graph_name)
        table = {}
        for few_shot in (True, False):
            ctx = RunContext(Team(policy), demo_retriever(), Settings(max_rounds=3, few_shot=few_shot))
            table[few_shot] = compliance(asyncio.run(arun_many(graph, questions, ctx)))
        print(f"\n{graph_name}: parsed / calls per role ({n} questions, greedy)")
        print(f"{'role':<14}{'with demonstrations':>22}{'instructions only':>20}")
        for role in sorted(set(table[True]) | set(table[False])):
            cells = []
            for few_shot in (True, False):
                ok, total = table[few_shot].get(role, (0, 0))
                cells.append(f"{ok}/{total} ({ok / total:.0%})" if total else "-")
            print(f"{role:<14}{cells[0]:>22}{cells[1]:>20}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--questions", type=int, default=24, help="bundled questions per graph (default 24)")
    parser.add_argument("--graphs", nargs="+", default=["jade", "m_ask", "apex"], metavar="GRAPH",
                        help="the graphs to run (default: jade m_ask apex)")
    args = parser.parse_args()
    main(args.questions, args.graphs)
