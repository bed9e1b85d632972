"""Paired comparison of two evaluations on the same questions.

Two runs of ``ragteam eval`` (say, a trained and an untrained model) are compared question by
question: the mean of the per-question differences (B − A) and a percentile bootstrap interval
over questions. Pairing removes most of the question-to-question spread (easy questions are easy
for both), so it detects differences an unpaired comparison of two means would call noise.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from ragteam.graphs.eval.evaluate import read_predictions

METRICS = ("f1", "em", "acc")


@dataclass(frozen=True)
class PairedDifference:
    metric: str
    questions: int
    mean_a: float
    mean_b: float
    difference: float        # mean of (b − a)
    low: float               # bootstrap interval of the difference
    high: float
    confidence: float
    wins: int                # questions where b scored higher
    losses: int

    @property
    def significant(self) -> bool:
        """The interval excludes zero."""
        return self.low > 0 or self.high < 0


def paired_bootstrap(a: Sequence[float], b: Sequence[float], *, resamples: int = 10_000,
                     confidence: float = 0.95, seed: int = 0, metric: str = "f1") -> PairedDifference:
    """Percentile bootstrap of mean(b − a): resample questions with replacement, keeping each
    question's two scores together."""
    if len(a) != len(b):
        raise ValueError(f"paired scores need equal lengths, got {len(a)} and {len(b)}")
    if not a:
        raise ValueError("no questions to compare")
    diffs = np.asarray(b, dtype=float) - np.asarray(a, dtype=float)
    n = len(diffs)
    picks = np.random.default_rng(seed).integers(0, n, size=(resamples, n))  # (resamples, n)
    means = diffs[picks].mean(axis=1)                                         # (resamples,)
    tail = 100 * (1 - confidence) / 2
    low, high = np.percentile(means, [tail, 100 - tail])
    return PairedDifference(metric, n, sum(a) / n, sum(b) / n, float(diffs.mean()), float(low),
                            float(high), confidence, wins=int((diffs > 0).sum()),
                            losses=int((diffs < 0).sum()))


def predictions_file(path: str | Path) -> Path:
    """Accept a predictions.jsonl or a graph folder holding one (``OUT/jade``)."""
    path = Path(path)
    candidate = path / "predictions.jsonl" if path.is_dir() else path
    if not candidate.is_file():
        raise FileNotFoundError(f"{path}: no predictions.jsonl (give `ragteam eval --out DIR`/GRAPH)")
    return candidate


def read_scores(path: str | Path) -> dict[str, dict]:
    """Question id → record of an eval folder or its predictions file."""
    return read_predictions(predictions_file(path))


def paired_records(path_a: str | Path, path_b: str | Path) -> tuple[dict[str, dict], dict[str, dict], list[str]]:
    """Both runs' records and their question ids, sorted; both must cover the same questions (a
    comparison over different sets would not be paired)."""
    a, b = read_scores(path_a), read_scores(path_b)
    if set(a) != set(b):
        only_a, only_b = len(set(a) - set(b)), len(set(b) - set(a))
        raise ValueError(f"the runs cover different questions ({only_a} only in A, {only_b} only "
                         f"in B); finish both evaluations on the same data first")
    return a, b, sorted(a)


def _paired_metric(path_a: str | Path, path_b: str | Path, a: dict[str, dict], b: dict[str, dict],
                   ids: Sequence[str], metric: str, bootstrap: dict) -> PairedDifference:
    """``paired_bootstrap`` of one metric over the questions ``ids`` of two runs' records."""
    return paired_bootstrap([score_of(a[i], metric, path_a) for i in ids],
                            [score_of(b[i], metric, path_b) for i in ids], metric=metric, **bootstrap)


def compare_runs(path_a: str | Path, path_b: str | Path, metrics: Sequence[str] = METRICS,
                 **bootstrap) -> list[PairedDifference]:
    """Paired differences B − A over the questions both runs answered."""
    a, b, ids = paired_records(path_a, path_b)
    return [_paired_metric(path_a, path_b, a, b, ids, m, bootstrap) for m in metrics]


def compare_by_type(path_a: str | Path, path_b: str | Path, types: Mapping[str, str], metric: str = "f1",
                    **bootstrap) -> dict[str, PairedDifference]:
    """Type → the paired difference B − A in ``metric`` over that type's questions (``types``:
    question id → type, e.g. PhantomWiki's hops-N), each with its own bootstrap. A gain confined
    to one type (3-hop questions) can be real where the overall interval is not."""
    a, b, ids = paired_records(path_a, path_b)
    if untyped := [i for i in ids if i not in types]:
        raise ValueError(f"{len(untyped)} of the compared questions have no type in the data given "
                         f"(first: {untyped[0]!r}); give the QA file the runs were evaluated on"[:300])
    groups: dict[str, list[str]] = {}
    for i in ids:
        groups.setdefault(types[i], []).append(i)
    return {kind: _paired_metric(path_a, path_b, a, b, group, metric, bootstrap)
            for kind, group in sorted(groups.items())}


def score_of(record: dict, metric: str, source) -> float:
    """A record's score: a number in [0, 1], or a ``ValueError`` naming the run and question."""
    value = record.get(metric)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise ValueError(f"{source}: question {record['id']!r}: {metric!r} must be a number in "
                         f"[0, 1], got {value!r}"[:300])
    return float(value)


def _cells(r: PairedDifference) -> str:
    """A table row's A, B, B − A (* when its interval excludes 0), interval and win/loss cells."""
    mark = " *" if r.significant else ""
    return (f"{100 * r.mean_a:.1f} | {100 * r.mean_b:.1f} | {100 * r.difference:+.1f}{mark} | "
            f"[{100 * r.low:+.1f}, {100 * r.high:+.1f}] | {r.wins} / {r.losses} |")


def comparison_markdown(label_a: str, label_b: str, rows: Sequence[PairedDifference]) -> str:
    lines = [f"B = {label_b} vs A = {label_a}, paired over {rows[0].questions} questions",
             "", "| metric | A | B | B − A | 95% interval | B better / worse |",
             "|---|---|---|---|---|---|"]
    lines += [f"| {r.metric} | {_cells(r)}" for r in rows]
    lines += ["", "(points; * = the interval excludes 0)"]
    return "\n".join(lines)


def by_type_markdown(rows: Mapping[str, PairedDifference]) -> str:
    """``compare_by_type``'s rows as a table: one line a question type."""
    metric = next(iter(rows.values())).metric
    lines = [f"{metric} by question type", "", "| type | questions | A | B | B − A | 95% interval | B better / worse |",
             "|---|---|---|---|---|---|---|"]
    lines += [f"| {kind} | {r.questions} | {_cells(r)}" for kind, r in rows.items()]
    return "\n".join(lines)
