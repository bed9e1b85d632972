"""`ragteam eval`: several graphs on the same questions, policy and seed → per-question records,
a summary table and plots.

Output directory layout::

    OUT/<graph>/graph.json           what produced these records (reference, structure hash)
    OUT/<graph>/predictions.jsonl    one record per finished question (appended as it finishes)
    OUT/<graph>/failures.jsonl       questions whose run failed (id, error, node, role, traceback);
                                     retried on resume
    OUT/<graph>/traces/<id>-<hash>.jsonl  that question's transitions
    OUT/summary.md                   methods × dataset: EM / F1 / acc and mean costs
    OUT/f1_vs_cost.png, OUT/topologies.png

Resumable: a rerun with the same OUT skips questions already in predictions.jsonl, so a killed
run loses only the questions that were in flight; only the graph that wrote a folder resumes it
(``graph.json``: another graph under the same name is refused, never credited with its records) (a half-written last line is cut off before
anything is appended).
Questions run as concurrent graph executions (``concurrency``); their model calls are batched.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import statistics
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from ragteam.graphs.eval.metrics import is_yes_no, score
from ragteam.graphs.run import RunFailed, arun
from ragteam.nodes.context import RunContext
from ragteam.nodes.policies.protocol import EngineError
from ragteam.nodes.tracing import write_jsonl
from ragteam.stores.atomic import save_figure
from ragteam.stores.datasets import QAExample
from ragteam.stores.jsonl import (append_records, is_complete, read_lines, read_records, repair_tail,
                          write_records)
from ragteam.stores.folder_lock import exclusive
from ragteam.stores.owned import EVAL, check_label, claim, own_file, own_subdir, write_text

COST_KEYS = ("turns", "llm_calls", "retrieval_calls", "prompt_tokens", "completion_tokens",
             "format_violations", "wall_time_s")


def read_predictions(path: Path) -> dict[str, dict]:
    """The one reader of ``predictions.jsonl`` (eval resume, ``ragteam compare``, SFT selection):
    question id → record. Lines are read by ``stores.jsonl`` (split on ``\n`` only; a torn last
    line is not a record); a line that is not a record with a string ``id``, or a second record
    of one question, is a ``ValueError`` naming the file and line."""
    records, lines = {}, {}
    for line_no, record in read_lines(path).records:
        if not isinstance(record, dict) or not isinstance(record.get("id"), str):
            raise ValueError(f"{path}:{line_no}: not a prediction record (an object with a string "
                             "'id')")
        if record["id"] in records:
            raise ValueError(f"{path}:{line_no}: a second record of question {record['id']!r} "
                             f"(first at line {lines[record['id']]})")
        records[record["id"]], lines[record["id"]] = record, line_no
    return records


def read_finished(path: Path) -> dict[str, dict]:
    """The questions finished under an eval folder: records whose trace file is whole (a trace
    cut short means the question runs again). None when there is no file yet."""
    if not path.exists():
        return {}
    out = path.parent.parent
    return {qid: record for qid, record in read_predictions(path).items()
            if "trace_path" not in record or is_complete(out / record["trace_path"])}


def unfinished_graphs(out: Path, names: Sequence[str], examples: Sequence[QAExample]) -> list[str]:
    """The graphs under ``out`` that still lack a record for one of ``examples``."""
    ids = {e.id for e in examples}
    return [name for name in names if not ids <= read_finished(out / name / "predictions.jsonl").keys()]


def trace_name(question_id: str) -> str:
    """A file name for a question's trace: readable, safe as a path, and distinct for distinct
    ids (``a/b`` and ``a_b`` sanitize alike, so a hash of the exact id is appended)."""
    digest = hashlib.sha256(question_id.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    readable = "".join(c if c.isalnum() or c in "-_." else "_" for c in question_id)[:60]
    return f"{readable}-{digest}.jsonl"


IDENTITY = "graph.json"


def graph_identity(compiled, /, **about) -> dict:
    """What a graph folder's records come from: ``about`` (the graph's name, its source, a forced
    workflow…) plus a hash of the compiled graph's nodes and edges."""
    drawable = compiled.get_graph()
    shape = json.dumps([sorted(map(str, drawable.nodes)),
                        sorted((str(e.source), str(e.target)) for e in drawable.edges)])
    return {**about, "structure": hashlib.sha256(shape.encode()).hexdigest()[:16]}


def check_identity(folder: Path, identity: dict) -> None:
    """Refuse (before any work) a graph folder that another graph's run wrote. Writes nothing."""
    path = folder / IDENTITY
    if not path.exists() and not path.is_symlink():
        return
    try:
        found = json.loads(own_file(path).read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError):
        found = None
    if found != identity:
        raise ValueError(f"{folder} holds the results of another graph ({_describe(found)}, not "
                         f"{_describe(identity)}); choose another --out or graph name")


def record_identity(folder: Path, identity: dict) -> None:
    """``check_identity``, then record ``identity`` in a folder that has none yet (a new one, or
    one written before identities were recorded)."""
    check_identity(folder, identity)
    if not (folder / IDENTITY).exists():
        write_text(own_file(folder / IDENTITY), json.dumps(identity, sort_keys=True) + "\n")


def _describe(identity) -> str:
    if not isinstance(identity, dict):
        return "an unreadable graph.json"
    return ", ".join(f"{k} {v}" for k, v in identity.items())


async def evaluate_graph(name: str, graph, examples: Sequence[QAExample], ctx: RunContext,
                         out: Path, concurrency: int = 8, progress: str | bool = "lines",
                         identity: dict | None = None) -> list[dict]:
    """Run ``graph`` on every example not yet finished under ``out/name``; return all records
    in dataset order. ``progress``: bar | lines | off (``graphs.apps.progress``; True = bar).
    ``identity`` (default: the name and the graph's structure, ``graph_identity``) must match
    what an earlier run recorded in ``out/name/graph.json`` for its records to be reused."""
    check_label(name)  # a label, never a path: OUT/<name> stays inside OUT
    claim(out, EVAL)
    folder = own_subdir(out / name)
    with exclusive(folder, f"evaluation of {name}"):  # two writers would interleave its records
        return await _evaluate_into(folder, name, graph, examples, ctx, out, concurrency, progress, identity)


async def _evaluate_into(folder: Path, name: str, graph, examples: Sequence[QAExample], ctx: RunContext,
                         out: Path, concurrency: int, progress: str | bool, identity: dict | None) -> list[dict]:
    """``evaluate_graph``'s work, with ``folder`` (``out/name``) held."""
    from ragteam.graphs.apps.progress import Progress

    record_identity(folder, identity or graph_identity(graph, graph=name))
    traces = own_subdir(folder / "traces")
    predictions, failures = own_file(folder / "predictions.jsonl"), own_file(folder / "failures.jsonl")
    repair_tail(predictions)
    finished = read_finished(predictions)
    if predictions.exists() and len(finished) < len(read_predictions(predictions)):
        write_records(predictions, finished.values())  # a question whose trace broke runs again
    failures.unlink(missing_ok=True)  # failed questions rerun; this run writes its own
    pending = [e for e in examples if e.id not in finished]
    gate = asyncio.Semaphore(max(1, concurrency))
    mode = progress if isinstance(progress, str) else ("bar" if progress else "off")
    bar = Progress(len(examples), f"eval {name}", "q", mode, initial=len(examples) - len(pending))
    f1s = [r["f1"] for r in finished.values()]

    async def one(example: QAExample) -> None:
        async with gate:
            try:
                result = await arun(graph, example.question, ctx, run_id=example.id)
            except EngineError:  # the engine is gone: stop; a rerun resumes
                raise
            except Exception as error:  # one bad question must not end the evaluation
                append_records(failures, [failure_record(example.id, error)])
                bar.update()
                return
        trace_path = own_file(traces / trace_name(example.id))
        write_jsonl(result.transitions, trace_path)  # whole or absent: written, then renamed
        record = {"id": example.id, "question": result.question, "golds": list(example.golds),
                  "prediction": result.answer, "empty_answer": not result.answer.strip(),
                  **score(result.answer, example.golds, example.metric), "metric": example.metric,
                  "yes_no": is_yes_no(example.golds), **{k: result.costs.get(k, 0) for k in COST_KEYS},
                  # rounds whose planner output was unusable ran the fallback: keep them apart
                  "topologies": [r.label for r in result.rounds],
                  "stop_reason": result.stop_reason,
                  "trace_path": str(trace_path.relative_to(out)),
                  **({"outputs": result.outputs} if result.outputs else {})}
        append_records(predictions, [record])
        finished[example.id] = record
        f1s.append(record["f1"])
        bar.update(f1=f"{statistics.mean(f1s):.3f}")

    await asyncio.gather(*(one(e) for e in pending))
    bar.close()
    return [finished[e.id] for e in examples if e.id in finished]


def failure_record(question_id: str, error: Exception) -> dict:
    """A failed question's line in ``failures.jsonl``: the original error, the node (and role)
    that raised it when the run knows (``RunFailed``), and its traceback."""
    if not isinstance(error, RunFailed):  # raised before the graph ran
        error = RunFailed("", error)
    return {"id": question_id, "error": error.reason, "node": error.node, "role": error.role,
            "traceback": error.traceback}


def evaluate(graph, examples: Sequence[QAExample], ctx: RunContext, out: str | Path,
             name: str | None = None, concurrency: int = 8) -> "SummaryRow":
    """Run ``graph`` on ``examples`` (e.g. ``read_dataset(path).examples``) from synchronous code,
    writing ``out/<name>`` like ``ragteam eval`` (records, traces; a rerun resumes), and return
    its summary row (EM, F1, accuracy, mean costs). ``name`` defaults to the graph's own."""
    name = name or getattr(graph, "name", None) or "graph"
    records = asyncio.run(evaluate_graph(name, graph, examples, ctx, Path(out), concurrency, progress=False))
    return summarize(name, "", records)


def read_failures(out: Path, name: str) -> list[dict]:
    path = out / name / "failures.jsonl"
    return read_records(path) if path.exists() else []


@dataclass
class SummaryRow:
    """One method's line of the summary: scores (fractions) and mean costs per question."""

    method: str
    dataset: str
    n: int
    em: float
    f1: float
    acc: float
    f1_no_yesno: float
    costs: dict[str, float]


def summarize(method: str, dataset: str, records: list[dict]) -> SummaryRow:
    """The summary row of a method's records (as ``evaluate_graph`` returns them)."""
    mean = lambda key, rows=records: statistics.mean(r[key] for r in rows) if rows else 0.0  # noqa: E731
    others = [r for r in records if not r["yes_no"]]
    return SummaryRow(method, dataset, len(records), mean("em"), mean("f1"), mean("acc"),
                      mean("f1", others), {k: mean(k) for k in COST_KEYS})


def summary_markdown(rows: list[SummaryRow]) -> str:
    head = ("| method | dataset | n | EM | F1 | acc | F1 w/o yes-no | turns | LLM calls | retrievals "
            "| prompt tok | completion tok | format viol. | wall s |")
    lines = [head, "|" + "---|" * 14]
    for r in rows:
        c = r.costs
        lines.append(f"| {r.method} | {r.dataset} | {r.n} | {100 * r.em:.1f} | {100 * r.f1:.1f} | "
                     f"{100 * r.acc:.1f} | {100 * r.f1_no_yesno:.1f} | {c['turns']:.2f} | "
                     f"{c['llm_calls']:.2f} | {c['retrieval_calls']:.2f} | {c['prompt_tokens']:.0f} | "
                     f"{c['completion_tokens']:.0f} | {c['format_violations']:.2f} | {c['wall_time_s']:.1f} |")
    note = ("\nScores in %, costs are means per question. F1 scores yes/no/no-answer golds by exact "
            "match (HotpotQA rule); *F1 w/o yes-no* averages the other questions only. *turns*: each\n"
            "method's loop count (JADE rounds, M-ASK search turns, APEX sub-questions, search-loop "
            "actions; 1 for a fixed workflow).\n")
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
    written.append(own_file(out / "f1_vs_cost.png"))
    save_figure(figure, written[-1], dpi=110)
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
        written.append(own_file(out / "topologies.png"))
        save_figure(figure, written[-1], dpi=110)
        plt.close(figure)
    return written
