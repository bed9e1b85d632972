"""`ragteam eval`: several graphs on the same questions, policy and seed → per-question records,
a summary table and plots.

Output directory layout::

    OUT/<graph>/predictions.jsonl    one record per finished question (appended as it finishes)
    OUT/<graph>/traces/<id>.jsonl    that question's transitions
    OUT/summary.md                   methods × dataset: EM / F1 / acc and mean costs
    OUT/f1_vs_cost.png, OUT/topologies.png

Resumable: a rerun with the same OUT skips questions already in predictions.jsonl, so a killed
run loses only the questions that were in flight (a half-written last line is ignored).
Questions run as concurrent graph executions (``concurrency``); their model calls are batched.
"""

from __future__ import annotations

import asyncio
import json
import statistics
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from graphs.metrics import is_yes_no, score
from graphs.run import arun
from nodes.context import RunContext
from nodes.tracing import write_jsonl
from stores.datasets import QAExample

COST_KEYS = ("rounds", "llm_calls", "retrieval_calls", "prompt_tokens", "completion_tokens",
             "format_violations", "wall_time_s")


def read_finished(path: Path) -> dict[str, dict]:
    """Records already written; a line cut short by a kill is ignored (that question reruns)."""
    finished = {}
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            finished[record["id"]] = record
    return finished


async def evaluate_graph(name: str, graph, examples: Sequence[QAExample], ctx: RunContext,
                         out: Path, concurrency: int = 8, progress: bool = True) -> list[dict]:
    """Run ``graph`` on every example not yet finished under ``out/name``; return all records
    in dataset order."""
    from tqdm.auto import tqdm

    folder = out / name
    (folder / "traces").mkdir(parents=True, exist_ok=True)
    predictions = folder / "predictions.jsonl"
    finished = read_finished(predictions)
    pending = [e for e in examples if e.id not in finished]
    gate = asyncio.Semaphore(max(1, concurrency))
    bar = tqdm(total=len(examples), initial=len(examples) - len(pending), desc=name, unit="q",
               disable=not progress)
    f1s = [r["f1"] for r in finished.values()]

    async def one(example: QAExample) -> None:
        async with gate:
            result = await arun(graph, example.question, ctx, run_id=example.id)
        trace_path = folder / "traces" / f"{_safe(example.id)}.jsonl"
        write_jsonl(result.transitions, trace_path)
        record = {"id": example.id, "question": example.question, "golds": list(example.golds),
                  "prediction": result.answer, **score(result.answer, example.golds),
                  "yes_no": is_yes_no(example.golds), **{k: result.costs.get(k, 0) for k in COST_KEYS},
                  # rounds whose planner output was unusable ran the fallback: keep them apart
                  "topologies": [r["workflow"] + ("" if r.get("planner_ok", True) else " (fallback)")
                                 for r in result.rounds],
                  "stop_reason": result.stop_reason,
                  "trace_path": str(trace_path.relative_to(out))}
        with open(predictions, "a", encoding="utf-8") as handle:  # one line per finished question
            handle.write(json.dumps(record, ensure_ascii=False) + "\n")
        finished[example.id] = record
        f1s.append(record["f1"])
        bar.set_postfix(f1=f"{statistics.mean(f1s):.3f}")
        bar.update()

    await asyncio.gather(*(one(e) for e in pending))
    bar.close()
    return [finished[e.id] for e in examples]


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)


@dataclass
class SummaryRow:
    method: str
    dataset: str
    n: int
    em: float
    f1: float
    acc: float
    f1_no_yesno: float
    costs: dict[str, float]


def summarize(method: str, dataset: str, records: list[dict]) -> SummaryRow:
    mean = lambda key, rows=records: statistics.mean(r[key] for r in rows) if rows else 0.0  # noqa: E731
    others = [r for r in records if not r["yes_no"]]
    return SummaryRow(method, dataset, len(records), mean("em"), mean("f1"), mean("acc"),
                      mean("f1", others), {k: mean(k) for k in COST_KEYS})


def summary_markdown(rows: list[SummaryRow]) -> str:
    head = ("| method | dataset | n | EM | F1 | acc | F1 w/o yes-no | rounds | LLM calls | retrievals "
            "| prompt tok | completion tok | format viol. | wall s |")
    lines = [head, "|" + "---|" * 14]
    for r in rows:
        c = r.costs
        lines.append(f"| {r.method} | {r.dataset} | {r.n} | {100 * r.em:.1f} | {100 * r.f1:.1f} | "
                     f"{100 * r.acc:.1f} | {100 * r.f1_no_yesno:.1f} | {c['rounds']:.2f} | "
                     f"{c['llm_calls']:.2f} | {c['retrieval_calls']:.2f} | {c['prompt_tokens']:.0f} | "
                     f"{c['completion_tokens']:.0f} | {c['format_violations']:.2f} | {c['wall_time_s']:.1f} |")
    note = ("\nScores in %, costs are means per question. F1 scores yes/no/no-answer golds by exact "
            "match (HotpotQA rule); *F1 w/o yes-no* averages the other questions only.\n")
    return "\n".join(lines) + "\n" + note


def plot_summary(rows: list[SummaryRow], records: dict[str, list[dict]], out: Path) -> list[Path]:
    """F1 against cost per method (MAO-ARAG Fig. 3 view) and the topologies each planner chose
    (JADE Fig. 4 view)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    figure, axes = plt.subplots(1, 3, figsize=(13, 4))
    for axis, key, label in zip(axes, ("llm_calls", "retrieval_calls", "prompt_tokens"),
                                ("LLM calls / question", "retrievals / question", "prompt tokens / question")):
        for r in rows:
            axis.scatter(r.costs[key], 100 * r.f1, s=40)
            axis.annotate(r.method, (r.costs[key], 100 * r.f1), textcoords="offset points", xytext=(4, 4),
                          fontsize=8)
        axis.set_xlabel(label)
        axis.set_ylabel("F1 (%)")
        axis.grid(alpha=.3)
    figure.suptitle("F1 vs cost")
    figure.tight_layout()
    written.append(out / "f1_vs_cost.png")
    figure.savefig(written[-1], dpi=110)
    plt.close(figure)

    chosen = {m: Counter(t for r in rs for t in r["topologies"]) for m, rs in records.items()}
    chosen = {m: c for m, c in chosen.items() if c}
    if chosen:
        figure, axes = plt.subplots(1, len(chosen), figsize=(5 * len(chosen), 3.5), squeeze=False)
        for axis, (method, counts) in zip(axes[0], chosen.items()):
            top = counts.most_common(8)
            axis.barh([t for t, _ in top][::-1], [n for _, n in top][::-1], color="#7b6fd0")
            axis.set_title(f"{method}: topologies chosen")
            axis.set_xlabel("rounds")
        figure.tight_layout()
        written.append(out / "topologies.png")
        figure.savefig(written[-1], dpi=110)
        plt.close(figure)
    return written
