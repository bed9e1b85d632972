"""Retrieval quality and speed on the HotpotQA dev sample (53 questions, 521 pooled paragraphs).

Gold paragraphs are the supporting-fact titles (2 per question). Reports, for BM25 (bm25s),
dense (chroma + all-MiniLM-L6-v2) and hybrid (RRF of the two):
- recall@2/5/10: mean fraction of a question's gold paragraphs in the top k, and the share of
  questions with *all* gold paragraphs in the top k;
- build time and query latency p50/p95;
- bm25s vs rank-bm25 queries/s on the same tokens, in the same run (the lexical baseline).
Target: hybrid recall@5 >= the better of BM25 and dense.

    python benchmarks/bench_retrieval.py [--data path/to/hotpotqa-dev53.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import bm25s
import Stemmer

from ragteam.stores.corpus import read_hotpot_json
from ragteam.stores.index import build_index, open_index

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data" / "hotpotqa-dev53.json"
KS = (2, 5, 10)


def recall_table(retriever, examples) -> tuple[dict, list[float]]:
    fraction = {k: [] for k in KS}
    complete = {k: [] for k in KS}
    latencies = []
    for example in examples:
        gold = {title for title, _ in example["supporting_facts"]}
        started = time.perf_counter()
        titles = [doc.title for doc in retriever.search(example["question"], max(KS))]
        latencies.append(time.perf_counter() - started)
        for k in KS:
            hit = gold & set(titles[:k])
            fraction[k].append(len(hit) / len(gold))
            complete[k].append(float(hit == gold))
    table = {k: (statistics.mean(fraction[k]), statistics.mean(complete[k])) for k in KS}
    return table, latencies


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def lexical_throughput(documents, questions, repeats: int = 20) -> tuple[float, float]:
    """Queries/s of bm25s and rank-bm25 over identical stemmed, stop-worded tokens."""
    from rank_bm25 import BM25Okapi

    stemmer = Stemmer.Stemmer("english")
    corpus_tokens = bm25s.tokenize([d.as_passage() for d in documents], stopwords="en",
                                   stemmer=stemmer, return_ids=False, show_progress=False)
    query_tokens = bm25s.tokenize(questions, stopwords="en", stemmer=stemmer, return_ids=False,
                                  show_progress=False)
    fast = bm25s.BM25()
    fast.index(bm25s.tokenize([d.as_passage() for d in documents], stopwords="en", stemmer=stemmer,
                              show_progress=False), show_progress=False)
    slow = BM25Okapi(corpus_tokens)
    query_ids = bm25s.tokenize(questions, stopwords="en", stemmer=stemmer, show_progress=False)

    started = time.perf_counter()
    for _ in range(repeats):
        fast.retrieve(query_ids, k=10, show_progress=False, n_threads=1)
    fast_qps = repeats * len(questions) / (time.perf_counter() - started)
    started = time.perf_counter()
    for _ in range(repeats):
        for tokens in query_tokens:
            slow.get_top_n(tokens, documents, n=10)
    slow_qps = repeats * len(questions) / (time.perf_counter() - started)
    return fast_qps, slow_qps


def main(data: Path) -> None:
    examples = json.loads(data.read_text())
    documents = read_hotpot_json(data)
    print(f"data: {data.name}: {len(examples)} questions, {len(documents)} paragraphs\n")
    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "corpus.jsonl"
        corpus.write_text("".join(json.dumps({"id": d.id, "title": d.title, "text": d.text}) + "\n"
                                  for d in documents))
        rows = {}
        for kind in ("bm25", "chroma", "hybrid"):
            manifest = build_index([corpus], kind, Path(tmp) / kind)
            retriever = open_index(Path(tmp) / kind)
            retriever.search("warm up", 5)
            table, latencies = recall_table(retriever, examples)
            rows[kind] = (table, manifest["build_seconds"], latencies)

    names = {"bm25": "BM25 (bm25s)", "chroma": "dense (MiniLM)", "hybrid": "hybrid (RRF)"}
    print(f"{'retriever':<16}" + "".join(f"  R@{k} (all)   " for k in KS) + "  build s   p50 ms   p95 ms")
    for kind, (table, build_s, latencies) in rows.items():
        cells = "".join(f"  {table[k][0]:.3f} ({table[k][1]:.2f})" for k in KS)
        print(f"{names[kind]:<16}{cells}  {build_s:>7.1f}  {percentile(latencies, .5)*1e3:>7.1f}"
              f"  {percentile(latencies, .95)*1e3:>7.1f}")
    best_single = max(rows["bm25"][0][5][0], rows["chroma"][0][5][0])
    print(f"\nhybrid R@5 / best single R@5: {rows['hybrid'][0][5][0]:.3f} / {best_single:.3f} "
          f"= {rows['hybrid'][0][5][0] / best_single:.3f}  (target >= 1.0)")
    fast, slow = lexical_throughput(documents, [e["question"] for e in examples])
    print(f"bm25s {fast:,.0f} q/s vs rank-bm25 {slow:,.0f} q/s: {fast / slow:.1f}x")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=SHARED if SHARED.exists() else None,
                        help="HotpotQA dev questions with their paragraphs (default: "
                             "../shared/data/hotpotqa-dev53.json)")
    path = parser.parse_args().data
    if path is None:
        sys.exit("give the path to hotpotqa-dev53.json (../shared/data/ is not here)")
    main(path)
