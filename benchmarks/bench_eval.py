"""Evaluation throughput: questions/s of `ragteam eval`'s runner at concurrency 1 vs 16.

Same graph, questions, offline model, greedy decoding and seed on both sides; the predictions
must be identical (checked), so the only difference is how many questions run at once and thus
how many model calls share a batched ``generate``. Target ratio >= 4.

    python benchmarks/bench_eval.py [--graph jade] [--questions 53] [--data path/to/hotpotqa-dev53.json]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from ragteam.graphs.eval.evaluate import evaluate_graph
from ragteam.nodes.policies.spec import load_policy
from ragteam.graphs.methods.registry import build_graph
from ragteam.nodes.context import RunContext, Settings
from ragteam.nodes.team import Team
from ragteam.stores.datasets import read_dataset
from ragteam.stores.demo import DEMO_QUESTIONS, demo_retriever

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data" / "hotpotqa-dev53.json"


def main(graph_name: str, n: int, data: Path) -> None:
    examples = read_dataset(data).examples[:n]
    ctx = RunContext(Team(load_policy("offline")), demo_retriever(), Settings(max_rounds=3))
    graph = build_graph(graph_name)
    timings, predictions = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        for concurrency in (1, 16):
            started = time.perf_counter()
            records = asyncio.run(evaluate_graph(graph_name, graph, examples, ctx,
                                                 Path(tmp) / f"c{concurrency}", concurrency, progress=False))
            timings[concurrency] = time.perf_counter() - started
            predictions[concurrency] = [r["prediction"] for r in records]
    same = sum(a == b for a, b in zip(predictions[1], predictions[16]))
    print(f"graph {graph_name}, {len(examples)} questions ({data.name}), offline model, greedy")
    for c in (1, 16):
        print(f"concurrency {c:>2}: {timings[c]:7.1f} s  {len(examples) / timings[c]:.3f} questions/s")
    print(f"identical predictions: {same}/{len(examples)}")
    print(f"ratio 16 / 1: {timings[1] / timings[16]:.2f}x  (target >= 4)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--graph", default="jade", help="the method's graph to evaluate (default jade)")
    parser.add_argument("--questions", type=int, default=53, help="the first N questions of the data (default 53)")
    parser.add_argument("--data", type=Path, default=SHARED if SHARED.exists() else DEMO_QUESTIONS,
                        help="a dataset file (default: ../shared/data/hotpotqa-dev53.json if present, else the "
                             "bundled questions)")
    args = parser.parse_args()
    main(args.graph, args.questions, args.data)
