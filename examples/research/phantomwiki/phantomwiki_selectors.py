"""The PhantomWiki study's SFT selectors for the serial decomposer (``QDS``), registered when this
file is imported: ``sft_graph.py --selectors examples/research/phantomwiki/phantomwiki_selectors.py --select
NAME[=ARG]`` (the study's recipes add both for their rounds).

- ``hindsight-decompositions[=DATA]``: per question, of every run's root decomposition, the one
  whose run put the most gold names in its answer generator's documents (ties: fewer
  sub-questions), whatever it scored; with DATA (the questions explored), the number of
  sub-questions is chosen per question type first.
- ``given-decompositions=FILE``: the decomposer learns given chains (``nodes/decompositions.py``'s
  JSON Lines, e.g. ``phantomwiki_chains.py``'s), each under the prompt of a run that decomposed
  the question.

They read what PhantomWiki's gold answers are (sets of names) and how its questions chain, which
is why they live beside the study rather than in the library (``trainers.algorithms.selectors``).
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path
from typing import Mapping, NamedTuple, Sequence

_CHECKOUT = Path(__file__).resolve().parents[3]
if (_CHECKOUT / "ragteam" / "__init__.py").is_file() and str(_CHECKOUT) not in sys.path:
    sys.path.insert(0, str(_CHECKOUT))  # run from a checkout: its own ragteam, not an installed one

from ragteam.graphs.eval.compare import score_of  # noqa: E402
from ragteam.graphs.eval.evaluate import read_predictions  # noqa: E402
from ragteam.nodes.tracing import Transition  # noqa: E402
from ragteam.trainers.algorithms import sft  # noqa: E402
from ragteam.trainers.algorithms.selectors import Selected, Selection, register_selector  # noqa: E402
from ragteam.trainers.experience import Experience  # noqa: E402


def _documents_read(t: Transition) -> str:
    """The documents an answer generator's call read (nodes/roles/jade.py renders them between
    any established answers and the question); "" for any other call."""
    if t.role != "AG":
        return ""
    start, end = t.observation.find("Documents:\n"), t.observation.rfind("Question: ")
    return t.observation[start:end] if 0 <= start < end else ""


def names_reached(calls: Sequence[Transition], golds: Sequence[str]) -> int:
    """How many of ``golds`` a run's answer generators had in their documents (an established
    answer or a question naming one is no evidence)."""
    read = "\n".join(map(_documents_read, calls))
    return sum(sft.names_all(read, [gold]) for gold in golds)


def root_decomposition(calls: Sequence[Transition], well_formed: bool = True) -> Transition | None:
    """A run's first serial decomposition of its whole question (task ``0``); with
    ``well_formed``, the first whose reply kept the decomposer's format."""
    return next((t for t in calls if t.role == "QDS" and t.task_id == "0" and (t.format_ok or not well_formed)),
                None)


def decomposes(t: Transition, record: dict) -> bool:
    """``t`` is a serial decomposer's call: the calls both selectors here claim (the score rule
    then leaves them, so none is taught twice)."""
    return t.role == "QDS"


class Decomposition(NamedTuple):
    """A run's root decomposition and how far its run got: the share of the gold names its
    answer generators read (``names_reached``) and the run's F1."""
    reached: float
    plan: Transition
    record: dict
    f1: float

    @property
    def steps(self) -> int:
        return len(self.plan.action or ())


def root_decompositions(eval_dirs: Sequence[str | Path]) -> list[Decomposition]:
    """Every run's root decomposition (``root_decomposition``) under these eval folders, on the
    questions whose gold are names (a count is computed, not read off the documents)."""
    found = []
    for root in map(Path, eval_dirs):
        for path in sft.prediction_files(root):
            for record in read_predictions(path).values():
                golds = sft.gold_names(record)
                if not golds:
                    continue
                calls = sft.run_calls(root, path, record)
                plan = root_decomposition(calls)
                if plan is not None:
                    found.append(Decomposition(names_reached(calls, golds) / len(golds), plan, record,
                                               score_of(record, "f1", path)))
    return found


def best_decompositions(eval_dirs: Sequence[str | Path]) -> tuple[dict[str, tuple[float, Transition, dict]], int]:
    """Per question, of every run's root decomposition under these eval folders, the one whose
    run put the most of the gold names in its answer generator's documents — a chain the reader
    then fails to finish still shows how to reach the evidence — ties to fewer sub-questions, then
    to the better score: {question id: (share of the gold names reached, the decomposer's call,
    its run's record)}, with no entry where no run reached a gold name or the gold is a count; and
    how many decompositions were compared."""
    found = root_decompositions(eval_dirs)
    return {qid: (d.reached, d.plan, d.record) for qid, d in _best_per_question(found).items()}, len(found)


def _best_per_question(found: Sequence[Decomposition]) -> dict[str, Decomposition]:
    """Question id → its decomposition that reached the most gold names (ties: fewer steps, then
    the better F1); none where no decomposition reached one."""
    def rank(d: Decomposition) -> tuple:
        return d.reached, -d.steps, d.f1

    best: dict[str, Decomposition] = {}
    for d in found:
        qid = d.record["id"]
        if d.reached and (qid not in best or rank(d) > rank(best[qid])):
            best[qid] = d
    return best


# A length sampled only a few times on a type is no evidence of what pays there.
MIN_DECOMPOSITIONS_PER_LENGTH = 10


def steps_by_type(found: Sequence[Decomposition], types: Mapping[str, str],
                  min_count: int = MIN_DECOMPOSITIONS_PER_LENGTH) -> dict[str, int]:
    """Question type → the number of sub-questions whose root decompositions reached the largest
    mean share of gold names on that type's questions (ties: fewer steps), among the lengths
    decomposed at least ``min_count`` times on the type; a type with no such length is absent."""
    shares: dict[str, dict[int, list[float]]] = {}
    for d in found:
        qid = d.record["id"]
        if qid not in types:
            raise ValueError(f"question {qid} has no type in the questions given")
        shares.setdefault(types[qid], {}).setdefault(d.steps, []).append(d.reached)
    return {kind: max(sampled, key=lambda n: (sum(sampled[n]) / len(sampled[n]), -n))
            for kind, by_steps in shares.items()
            if (sampled := {n: s for n, s in by_steps.items() if len(s) >= min_count})}


def hindsight_decomposition_transitions(eval_dirs: Sequence[str | Path], tokenizer,
                                        types: Mapping[str, str] | None = None) -> tuple[list[Experience], dict]:
    """Hindsight targets for the serial decomposer, from training runs whatever they scored: per
    question the decomposition that reached the most gold names (``best_decompositions``), taught
    under the role's own prompt (``own_example_prompt``), so runs that sampled other lengths
    (``ragteam headroom --decomposer-example-steps``) compete with its own. Questions whose gold
    is a count are left out, as in ``hindsight_answer_transitions``.

    With ``types`` (question id → type) the length is chosen per type (``steps_by_type``) and each
    question of the type learns its best decomposition of that length. Per question, ties go to
    fewer steps and most questions tie: at 3-4 hops that taught two steps although three-step
    chains reached more gold names on the type (docs/results/phantomwiki.md)."""
    found = root_decompositions(eval_dirs)
    counts = Counter(decompositions=len(found))
    if types is not None:
        lengths = steps_by_type(found, types)
        counts.update({f"steps_by_type/{kind}": n for kind, n in lengths.items()})
        found = [d for d in found if lengths.get(types[d.record["id"]], d.steps) == d.steps]
    items = []
    for d in _best_per_question(found).values():
        items.append(sft.call_experience(d.plan, d.record, d.plan.completion_ids, True, sft.own_example_prompt(d.plan, tokenizer)))
        counts[f"steps/{d.steps}"] += 1
        counts["targets_reaching_every_name"] += d.reached >= 1.0
    counts["questions_taught"] = len(items)
    return items, dict(counts)


def given_decomposition_transitions(eval_dirs: Sequence[str | Path], tokenizer,
                                    targets: Mapping[str, Sequence[str]]) -> tuple[list[Experience], dict]:
    """The serial decomposer learns given decompositions (``targets``: question id → sub-questions,
    from ``nodes.decompositions``, e.g. the chains a dataset's question templates spell out;
    training questions only): each question with a target that some run under these eval folders
    decomposed learns the target as its reply, once, under that run's root decomposer prompt with
    the role's own example (``own_example_prompt``). Hindsight can only pick among the decompositions a model samples;
    a small model that never writes the chain a question needs never samples it."""
    from ragteam.nodes.roles.jade import subquestions_reply

    items, counts, explored, taught = [], Counter(), set(), set()
    for root in map(Path, eval_dirs):
        for path in sft.prediction_files(root):
            for record in read_predictions(path).values():
                qid = record["id"]
                explored.add(qid)
                if qid not in targets or qid in taught:
                    continue
                plan = root_decomposition(sft.run_calls(root, path, record), well_formed=False)
                if plan is None:
                    continue
                taught.add(qid)
                reply = tokenizer.encode(subquestions_reply(targets[qid]), add_special_tokens=False)
                items.append(sft.call_experience(plan, record, reply, False, sft.own_example_prompt(plan, tokenizer)))
                counts[f"steps/{len(targets[qid])}"] += 1
    counts["questions_taught"] = len(taught)
    counts["targeted_questions_never_decomposed"] = len(explored & set(targets) - taught)
    return items, dict(counts)


@register_selector("hindsight-decompositions", roles={"QDS"}, argument="DATA")
def hindsight_decompositions(selection: Selection) -> Selected:
    """The serial decomposer's calls by evidence: per question the decomposition whose run reached
    the most gold names (with DATA, of the length best on the question's type), under the role's
    own prompt. Training questions only."""
    if not selection.trains({"QDS"}):
        return Selected(claims=decomposes)
    types = None
    if selection.argument:
        from ragteam.graphs.eval.headroom import question_types
        from ragteam.stores.datasets import read_dataset

        types = question_types(read_dataset(selection.argument).examples)
    items, counts = hindsight_decomposition_transitions(selection.folders, selection.tokenizer, types)
    return Selected(items, counts, decomposes)


@register_selector("given-decompositions", roles={"QDS"}, argument="FILE", required=True)
def given_decompositions(selection: Selection) -> Selected:
    """The serial decomposer learns the decompositions in FILE (JSON Lines of question id and
    sub-questions), each question's under the prompt of a run that decomposed it; no QDS call is
    selected by score. Training questions only."""
    from ragteam.nodes.decompositions import read_decompositions

    if not selection.trains({"QDS"}):
        return Selected(claims=decomposes)
    given = {d.id: d.sub_questions for d in read_decompositions(selection.argument)}
    items, counts = given_decomposition_transitions(selection.folders, selection.tokenizer, given)
    return Selected(items, counts, decomposes)
