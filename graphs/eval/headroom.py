"""Which workflow would have been best for each question: the headroom a planner could win.

The same team runs every candidate on the same questions — a JADE workflow run without its
planner (its plans written: ``WrittenReplies.fixed``), or any graph — at one or more retrieval budgets (top-k).
Per candidate: F1 overall and by question type (HotpotQA's bridge / comparison), and its cost.
The **oracle** picks, per question, the candidate that scored best (ties: the cheapest, by LLM
calls then retrievals); oracle − best single candidate is what choosing per question could add.
That maximum over several noisy runs of each question is optimistic: nothing in a question need
predict which candidate wins it. The **type-level planner** gives every question of a type the one
candidate with the best mean F1 on that type: what a planner that reads only the question's type
could win (chosen on the same questions, so still optimistic by the choice of one candidate per
type; choose on one set and score on another for a held-out figure).

    ragteam headroom --workflow RA,AG --workflow QDS --top-k 5 --top-k 2 --data FILE --out DIR
"""

from __future__ import annotations

import json
import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

from ragteam.stores.datasets import QAExample

CANDIDATES = "candidates.json"  # in each OUT/top<k>: label → folder and workflow, for training

DEFAULT_WORKFLOWS = ("RA,AG", "QR,RA,AG", "RA,DS,AG", "QDS", "QDP", "[RA|QR,RA],DS,AG")


def folder_name(candidate: str) -> str:
    """A readable folder name for a workflow (``[RA|QR,RA],DS,AG`` → ``RA_QR-RA_-DS-AG``)."""
    return "wf-" + "".join(c if c.isalnum() else {",": "-", "|": "_"}.get(c, "") for c in candidate)


@dataclass(frozen=True)
class Candidate:
    """One candidate of a headroom run: its label, the eval folder under OUT/top<k>, the
    workflow it was fixed to (None: a graph run as it is, e.g. JADE with its planner), and the
    nested ``Settings`` options it runs with besides (``{"serial": {"example_steps": 3}}``: the
    same workflow sampling decompositions of another length; ``{"written": {"decompositions":
    FILE}}``: its decomposer's replies written)."""

    label: str
    folder: str
    workflow: str | None
    settings: dict = field(default_factory=dict)


def workflow_candidates(workflows: Sequence[str], example_steps: Sequence[int] = (),
                        given_decompositions: str | None = None) -> list[Candidate]:
    """Each workflow as a candidate, and each one that decomposes serially once more per entry of
    ``example_steps``, its decomposer shown an example chain of that many steps, and once more
    with ``given_decompositions`` (a file) written as its decomposer's replies."""
    candidates = []
    for workflow in workflows:
        candidates.append(Candidate(workflow, folder_name(workflow), workflow))
        if "QDS" in workflow:
            candidates += [Candidate(f"{workflow}, {n}-step example", f"{folder_name(workflow)}-example{n}",
                                     workflow, {"serial": {"example_steps": n}}) for n in example_steps]
            if given_decompositions:
                candidates.append(Candidate(f"{workflow}, given chains", f"{folder_name(workflow)}-given",
                                            workflow, {"written": {"decompositions": given_decompositions}}))
    return candidates


# a workflow candidate is this method's team with every plan written (candidate_settings)
FIXED_WORKFLOW_METHOD = "jade"


def candidate_settings(settings, candidate: Candidate, top_k: int):
    """The run settings of ``candidate`` at retrieval budget ``top_k``: a workflow candidate is
    JADE's team with every plan written (``WrittenReplies.fixed``), and then its own options."""
    from ragteam.nodes.written import WrittenReplies

    settings = settings.updated(top_k=top_k)
    if candidate.workflow:
        settings = settings.updated(written=WrittenReplies.fixed(candidate.workflow, settings.planning.fallback))
    return settings.updated(**candidate.settings)


def write_candidates(budget_dir: Path, candidates: Sequence[Candidate]) -> None:
    from ragteam.stores.owned import own_file, write_text

    write_text(own_file(budget_dir / CANDIDATES), json.dumps([c.__dict__ for c in candidates], indent=1))


def read_candidates(budget_dir: Path) -> list[Candidate]:
    """The candidates a headroom run wrote under ``budget_dir`` (an OUT/top<k> folder)."""
    path = Path(budget_dir) / CANDIDATES
    if not path.is_file():
        raise FileNotFoundError(f"{budget_dir}: no {CANDIDATES} (expected a `ragteam headroom` "
                                "OUT/top<k> folder)")
    try:
        return [Candidate(str(c["label"]), str(c["folder"]), c["workflow"], dict(c.get("settings") or {}))
                for c in json.loads(path.read_text())]
    except (ValueError, KeyError, TypeError) as error:
        raise ValueError(f"{path}: not a candidates list ({error})") from None


@dataclass(frozen=True)
class CandidateRow:
    candidate: str
    n: int
    f1: float
    f1_by_type: dict[str, float]
    llm_calls: float
    retrievals: float
    prompt_tokens: float
    best_for: int          # questions where it is the oracle's pick


def question_types(examples: Sequence[QAExample]) -> dict[str, str]:
    """Question id → its type (``metadata.type``; "all" when the data has none)."""
    return {e.id: str(e.metadata.get("type", "all")) for e in examples}


def oracle_picks(records: Mapping[str, Mapping[str, dict]], every: bool = True) -> dict[str, str]:
    """Question id → the candidate with the best F1 (ties: fewest LLM calls, then retrievals,
    then the order given), over the questions every candidate answered (``every=False``: over
    each question's candidates that answered it, e.g. for training, where a failed run simply
    is no candidate)."""
    answered = [set(r) for r in records.values()]
    questions = (set.intersection if every else set.union)(*answered) if answered else set()
    picks = {}
    for qid in questions:
        names = [n for n in records if qid in records[n]]
        picks[qid] = min(names, key=lambda n: (-records[n][qid]["f1"], records[n][qid]["llm_calls"],
                                               records[n][qid]["retrieval_calls"], names.index(n)))
    return picks


def best_on(records: Mapping[str, Mapping[str, dict]], qids: Sequence[str]) -> str:
    """The candidate with the best mean F1 over ``qids`` (ties: fewer mean LLM calls, then the
    order given; no questions: the first candidate)."""
    names = list(records)
    if not qids:
        return names[0]
    mean = lambda name, key: statistics.mean(records[name][q][key] for q in qids)  # noqa: E731
    return min(names, key=lambda n: (-mean(n, "f1"), mean(n, "llm_calls"), names.index(n)))


def type_picks(records: Mapping[str, Mapping[str, dict]], types: Mapping[str, str], ids: Sequence[str]
               ) -> dict[str, str]:
    """Question type → the candidate best on that type's questions among ``ids``."""
    by_type = defaultdict(list)
    for qid in ids:
        by_type[types.get(qid, "all")].append(qid)
    return {t: best_on(records, qids) for t, qids in by_type.items()}


def headroom_rows(records: Mapping[str, Mapping[str, dict]], types: Mapping[str, str]
                  ) -> tuple[list[CandidateRow], list[CandidateRow]]:
    """One row per candidate, and the choosers' rows (their costs are those of their picks): the
    per-question oracle and the type-level planner (its label names each type's pick)."""
    picks = oracle_picks(records)
    ids = sorted(picks)
    wins = Counter(picks.values())

    def row(name: str, chosen: Mapping[str, dict], best_for: int) -> CandidateRow:
        by_type = defaultdict(list)
        for qid in ids:
            by_type[types.get(qid, "all")].append(chosen[qid]["f1"])
        mean = lambda key: statistics.mean(chosen[q][key] for q in ids) if ids else 0.0  # noqa: E731
        return CandidateRow(name, len(ids), mean("f1"), {t: statistics.mean(v) for t, v in sorted(by_type.items())},
                            mean("llm_calls"), mean("retrieval_calls"), mean("prompt_tokens"), best_for)

    rows = [row(name, per_question, wins[name]) for name, per_question in records.items()]
    choosers = [row("oracle (best per question)", {q: records[picks[q]][q] for q in ids}, len(ids))]
    if ids:
        by_type = type_picks(records, types, ids)
        named = ", ".join(f"{name} for {t}" for t, name in sorted(by_type.items()))
        choosers.append(row(f"best per type ({named})",
                            {q: records[by_type[types.get(q, "all")]][q] for q in ids}, len(ids)))
    return rows, choosers


def headroom_markdown(title: str, rows: Sequence[CandidateRow], choosers: Sequence[CandidateRow]) -> str:
    types = sorted({t for r in rows for t in r.f1_by_type})
    lines = [f"### {title}", "", "| candidate | n | F1 | " + " | ".join(f"F1 {t}" for t in types)
             + " | LLM calls | retrievals | prompt tok | best for |", "|---" * (7 + len(types)) + "|"]
    for r in [*rows, *choosers]:
        lines.append(f"| {r.candidate.replace('|', chr(92) + '|')} | {r.n} | {100 * r.f1:.1f} | "
                     + " | ".join(f"{100 * r.f1_by_type.get(t, 0.0):.1f}" for t in types)
                     + f" | {r.llm_calls:.2f} | {r.retrievals:.2f} | {r.prompt_tokens:.0f} | {r.best_for} |")
    best, oracle = max(rows, key=lambda r: r.f1), choosers[0]
    lines += ["", f"Best single candidate: {best.candidate} ({100 * best.f1:.1f} F1); the per-question oracle "
              f"adds {100 * (oracle.f1 - best.f1):+.1f} points"
              + "".join(f", the {c.candidate.split(' (')[0]} {100 * (c.f1 - best.f1):+.1f}" for c in choosers[1:])
              + ". *best for*: questions where the candidate is the oracle's pick (ties go to the cheaper one); "
              "the type-level rows give every question of a type the one candidate best on that type."]
    return "\n".join(lines)
