"""What supervised fine-tuning learns from: filtered successful traces (APEX's execution stage).

Input is what ``ragteam eval`` writes: ``predictions.jsonl`` (one scored record per question,
with the path of its trace) and ``traces/<id>.jsonl`` (that run's transitions). A call is kept
when its run scored at least ``min_f1``, its output parsed, and its role is selected; the
learner trains on the recorded ids (``trainers.learner.sft_update``). Or, for the answer
generator, by evidence instead of score: every call whose documents held each gold answer
learns to give them all (``hindsight_answer_transitions``); and for the serial decomposer, per
question the decomposition whose run put the most gold names before its answer generator
(``hindsight_decomposition_transitions``), or decompositions given from outside, such as a
dataset's gold chains (``given_decomposition_transitions``).
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Collection, Mapping, NamedTuple, Sequence

from ragteam.graphs.eval.compare import score_of
from ragteam.graphs.eval.evaluate import read_finished, read_predictions
from ragteam.nodes.tracing import Transition, read_jsonl
from ragteam.trainers.experience import Experience

if TYPE_CHECKING:
    from ragteam.graphs.eval.headroom import Candidate


def traced_methods(eval_dirs: Sequence[str | Path]) -> set[str]:
    """The graphs ``ragteam eval`` traced under these directories (one folder each)."""
    return {p.parent.name for root in map(Path, eval_dirs) for p in root.glob("*/predictions.jsonl")}


def default_roles(eval_dirs: Sequence[str | Path]) -> set[str] | None:
    """The roles the traced methods name for SFT (APEX: its execution agent); None = all roles,
    when a traced method names none."""
    from ragteam.graphs.methods import methods

    known = methods()
    roles = [known[name].sft_roles if name in known else () for name in traced_methods(eval_dirs)]
    return set().union(*roles) if roles and all(roles) else None


def planner_reply(method_names: Collection[str]) -> Callable[[str], str]:
    """How the planner of the traced methods asks for a workflow (their ``WorkflowChoice``);
    a ``ValueError`` unless exactly one such planner is among ``method_names``."""
    from ragteam.graphs.methods import get_method

    choices = set()
    for name in method_names:
        try:
            choice = get_method(name).workflow_choice
        except ValueError:  # a folder that names no method
            continue
        if choice is not None:
            choices.add(choice)
    if len(choices) != 1:
        raise ValueError(f"workflow targets need one method whose planner picks workflows (as JADE's "
                         f"does) among the traced ones; found {len(choices)} in {sorted(method_names)}")
    return choices.pop().reply


Relabel = Callable[[Transition], "list[int] | None"]
Selected = Callable[[Transition, dict], bool]  # (call, its run's record) -> claimed elsewhere


def workflow_reply_ids(tokenizer, reply: Callable[[str], str], workflow: str) -> list[int]:
    """The token ids of the planner ``reply`` asking for ``workflow``."""
    return tokenizer.encode(reply(workflow), add_special_tokens=False)


def planner_fallback_relabel(tokenizer, reply: Callable[[str], str], workflow: str) -> Relabel:
    """Hindsight target for a planner whose reply broke its format: the runtime then executed
    ``workflow`` (``Settings.fallback_workflow``), so in a run that scored well that workflow is
    what the planner should have asked for (its ``reply``). Other roles' broken calls stay out."""
    target = workflow_reply_ids(tokenizer, reply, workflow)
    return lambda t: list(target) if t.role == "planner" else None


def _experience(t: Transition, record: dict, completion: list[int], sampled: bool,
                prompt: list[int] | None = None) -> Experience:
    return Experience(trajectory=t.run_id, group=record["id"], role=t.role, prompt_ids=prompt or t.prompt_ids,
                      completion_ids=completion, old_logprobs=t.logprobs if sampled and not prompt else [],
                      temperature=0.0, reward=record["f1"])


def own_example_prompt(t: Transition, tokenizer) -> list[int] | None:
    """The prompt ids of a serial decomposer's call made with another example chain
    (``Settings.decomposer_example_steps``: exploration sampling other lengths), rewritten with
    the role's own example: the prompt the trained decomposer will see, so that the fine-tune
    teaches the decomposition and not the example it was copied from. None for any other call
    (its recorded prompt is the one to learn under). The ids are exact: the chat template holds
    each example verbatim, and ``encode_prompt`` encodes the whole text without special tokens."""
    from ragteam.nodes.roles.jade import OWN_SERIAL_STEPS, SERIAL_EXAMPLES

    example = _other_example(t)
    if example is None:
        return None
    own_question, own_reply = SERIAL_EXAMPLES[OWN_SERIAL_STEPS]
    text = t.prompt_text.replace(example[0], own_question, 1).replace(example[1], own_reply, 1)
    return tokenizer.encode(text, add_special_tokens=False)


def _other_example(t: Transition) -> tuple[str, str] | None:
    """The example chain a serial decomposer's call was shown instead of its own, if any."""
    from ragteam.nodes.roles.jade import OWN_SERIAL_STEPS, SERIAL_EXAMPLES

    if t.role != "QDS":
        return None
    return next(((question, reply) for steps, (question, reply) in SERIAL_EXAMPLES.items()
                 if steps != OWN_SERIAL_STEPS and question in t.prompt_text and reply in t.prompt_text), None)


def _prediction_files(root: Path) -> list[Path]:
    """The ``predictions.jsonl`` of each graph an eval folder holds (or of the graph folder itself)."""
    found = sorted(root.glob("*/predictions.jsonl")) or sorted(root.glob("predictions.jsonl"))
    if not found:
        raise FileNotFoundError(f"{root}: no predictions.jsonl (expected a `ragteam eval --out` folder)")
    return found


def _trace(root: Path, path: Path, record: dict) -> list[Transition]:
    """The calls of the run ``record`` (a line of ``path`` under eval folder ``root``) names."""
    if not isinstance(record.get("trace_path"), str):
        raise ValueError(f"{path}: question {record['id']!r}: no 'trace_path' (a record "
                         "`ragteam eval` writes names its trace file)")
    return read_jsonl(root / record["trace_path"])


def successful_transitions(eval_dirs: Sequence[str | Path], min_f1: float,
                           roles: Collection[str] | None, relabel: Relabel | None = None,
                           by_evidence: Selected | None = None, tokenizer=None) -> tuple[list[Experience], dict]:
    """Experiences from every graph folder under each eval directory; plus counts for a report.
    A call whose output broke its format is left out, unless ``relabel`` gives it a target; a
    call ``by_evidence`` claims is left to the hindsight selections. A decomposition sampled with
    another example chain is taught under the decomposer's own prompt (``own_example_prompt``,
    with ``tokenizer``; without one it is left out)."""
    items, counts = [], Counter()
    for root in map(Path, eval_dirs):
        for path in _prediction_files(root):
            for record in read_predictions(path).values():
                counts["runs"] += 1
                if score_of(record, "f1", path) < min_f1:
                    continue
                counts["successful_runs"] += 1
                for t in _trace(root, path, record):
                    if roles and t.role not in roles or by_evidence and by_evidence(t, record):
                        continue
                    completion = t.completion_ids if t.format_ok else relabel(t) if relabel else None
                    if not completion:
                        continue
                    if tokenizer is None and _other_example(t) is not None:  # cannot re-pair it
                        counts["left_out/QDS_without_its_own_example"] += 1
                        continue
                    prompt = own_example_prompt(t, tokenizer) if tokenizer is not None else None
                    items.append(_experience(t, record, completion, t.format_ok, prompt))
                    counts[f"calls/{t.role}" if t.format_ok else f"relabelled/{t.role}"] += 1
    return items, dict(counts)


def best_workflow_transitions(explore_dirs: Sequence[str | Path], min_f1: float,
                              roles: Collection[str] | None, tokenizer,
                              by_evidence: Selected | None = None,
                              types: Mapping[str, str] | None = None) -> tuple[list[Experience], dict]:
    """Group-relative selection across workflows, from ``ragteam headroom`` runs of the team on
    training questions (each an OUT/top<k> folder: the team as itself, with its planner, and as
    each fixed workflow).

    Per question the candidates are ranked as the headroom oracle ranks them (best F1, ties to the
    cheaper). The planner learns only the winner, and only when it scored at least ``min_f1``: a
    fixed workflow's win becomes a reply asking for that workflow, given the prompt the planner
    saw for that question in the team's own run, written as the team's method writes one
    (``planner_reply``); the team's own run keeps its valid planner calls when it won. The other
    roles learn from every candidate run that scored at least ``min_f1``, so the executors also
    practise the decompositions that worked (a decomposition sampled with another example chain
    under the role's own prompt, ``own_example_prompt``). Workflows are never relabelled
    from broken replies, so a fallback cannot crowd out the mix. A call ``by_evidence`` claims is
    left to ``hindsight_answer_transitions``.

    With ``types`` (question id → type, e.g. PhantomWiki's ``hops-N``) the planner learns per
    type instead: every question of a type asks for the fixed workflow with the best mean F1 on
    that type's questions (``planner_targets_by_type``), whatever this question's run scored.
    The executors are selected as without it.
    """
    from ragteam.graphs.eval.headroom import read_candidates

    items, counts = [], Counter()
    for root in map(Path, explore_dirs):
        candidates = read_candidates(root)
        free = [c for c in candidates if c.workflow is None]
        if len(free) != 1:
            raise ValueError(f"{root}: needs exactly one candidate run with its planner (`ragteam "
                             f"headroom --graph NAME`); found {len(free)}")
        reply = planner_reply([free[0].label])
        records = {c.label: read_finished(root / c.folder / "predictions.jsonl") for c in candidates}
        targets = planner_targets(root, candidates, records, min_f1, types)
        for qid in sorted(set().union(*map(set, records.values()))):  # a run that failed is no candidate
            counts["questions"] += 1
            winner = targets.get(qid)
            own = records[free[0].label].get(qid)
            own_calls = read_jsonl(root / own["trace_path"]) if own else []
            for candidate in candidates:
                record = records[candidate.label].get(qid)
                if record is None or score_of(record, "f1", root / candidate.folder) < min_f1:
                    continue
                counts["successful_runs"] += 1
                calls = own_calls if candidate is free[0] else read_jsonl(root / record["trace_path"])
                for t in calls:
                    keep = (t.format_ok and (not roles or t.role in roles)
                            and not (by_evidence and by_evidence(t, record)))
                    if keep and (t.role != "planner" or candidate.label == winner):
                        items.append(_experience(t, record, t.completion_ids, True,
                                                 own_example_prompt(t, tokenizer)))
                        counts[f"calls/{t.role}"] += 1
            if winner is None:
                continue
            counts[f"planner_target/{winner}"] += 1
            winning = next(c for c in candidates if c.label == winner)
            root_plan = next((t for t in own_calls if t.role == "planner" and t.task_id == "0"), None)
            if winning.workflow and root_plan is not None and (not roles or "planner" in roles):
                items.append(_experience(root_plan, records[winner][qid],
                                         workflow_reply_ids(tokenizer, reply, winning.workflow), False))
                counts["calls/planner"] += 1
    return items, dict(counts)


def planner_targets(root: Path, candidates: Sequence[Candidate], records: Mapping[str, Mapping[str, dict]],
                    min_f1: float, types: Mapping[str, str] | None = None) -> dict[str, str]:
    """Question id → the candidate the planner learns for it: per question the oracle's pick
    (best F1, ties to the cheaper) where it scored at least ``min_f1``, or with ``types`` the
    fixed workflow best on the question's type (``planner_targets_by_type``)."""
    from ragteam.graphs.eval.headroom import oracle_picks

    if types is not None:
        return planner_targets_by_type(root, candidates, records, types)
    picks = oracle_picks(records, every=False)  # a run that failed is no candidate
    return {qid: pick for qid, pick in picks.items() if records[pick][qid]["f1"] >= min_f1}


def planner_targets_by_type(root: Path, candidates: Sequence[Candidate], records: Mapping[str, Mapping[str, dict]],
                            types: Mapping[str, str]) -> dict[str, str]:
    """Question id → the fixed workflow the planner learns for it: the one with the best mean F1
    on its type's questions (ties: fewer LLM calls), over the questions every fixed workflow
    answered. One sampled run per question and workflow is a noisy score: where every candidate
    fails, the cheapest wins the tie, and at 3-4 hops that taught the planner one retrieval
    although chains of three steps paid more on the type (docs/results/phantomwiki.md). A
    planner that sees only the question can at best learn what pays on questions of its shape."""
    from ragteam.graphs.eval.headroom import type_picks

    fixed = {c.label: records[c.label] for c in candidates if c.workflow}
    if not fixed:
        raise ValueError(f"{root}: planner targets by type need fixed workflow candidates")
    unknown = sorted(set().union(*map(set, fixed.values())) - set(types))
    if unknown:
        raise ValueError(f"{root}: question {unknown[0]} has no type in the questions given "
                         f"({len(unknown)} without one)")
    answered = sorted(set.intersection(*map(set, fixed.values())))
    best = type_picks(fixed, types, answered)
    return {qid: best[types[qid]] for qid in set().union(*map(set, records.values()))
            if types.get(qid) in best}


def gold_names(record: dict) -> list[str]:
    """The names a run's record gives as its gold answers; none when there are none or the gold
    is a count (a number is computed, not read off the documents)."""
    golds = [g for g in record.get("golds", []) if isinstance(g, str) and g.strip()]
    return [] if any(g.strip().isdigit() for g in golds) else golds


def _names_all(text: str, answers: Sequence[str]) -> bool:
    """Every answer occurs in ``text`` as whole words (case-insensitive)."""
    return all(re.search(rf"(?<!\w){re.escape(a)}(?!\w)", text, re.IGNORECASE) for a in answers)


def _final_answer_evidence(t: Transition, record: dict, summaries: bool) -> str | None:
    """What ``t`` read when it answered the run's own question: an answer generator's documents
    (its prompt ends with the question), or with ``summaries`` an answer summarizer's findings
    (it always answers the original question); None for any other call, such as an answer to a
    sub-question. The question's own words are cut off: they are no evidence."""
    question = record.get("question")
    if not isinstance(question, str) or t.role not in ("AG", "AS") or (t.role == "AS" and not summaries):
        return None
    # how the roles' prompts end (nodes/roles/jade.py: AG's documents, AS's findings)
    asked = ("Question: " if t.role == "AG" else "Original question: ") + question
    prompt = t.observation.rstrip()
    return prompt.removesuffix(asked) if prompt.endswith(asked) else None


def answers_whole_question(t: Transition, record: dict) -> bool:
    """``t`` is an answer generator's call on the run's own question, not on a sub-question:
    the calls ``hindsight_answer_transitions`` selects by evidence (pass it as ``by_evidence``
    to the score selections so that no call is taught twice)."""
    return _final_answer_evidence(t, record, summaries=False) is not None


def gives_an_answer(t: Transition, record: dict) -> bool:
    """``t`` gives an answer (AG, AS), to the whole question or to a sub-question: the calls that
    ``hindsight_answer_transitions(..., summaries=True)`` alone selects (``by_evidence``), so that
    no answer a run chose by score — a reader naming one person where the gold holds several —
    is taught beside the lists evidence teaches."""
    return t.role in ("AG", "AS")


def hindsight_answer_transitions(eval_dirs: Sequence[str | Path], tokenizer, summaries: bool = False,
                                 roles: Collection[str] | None = None) -> tuple[list[Experience], dict]:
    """Hindsight targets for the answer generator from training runs, whatever they scored: a
    call on the run's own question whose prompt held every gold answer learns to reply with all
    of them (``answer_reply``), the call's prompt unchanged. A reader that names one person of
    five scores low however good its documents were, so score-filtered runs never show it a
    list; its documents say whether the answer was there to read. With ``summaries`` the answer
    summarizer (AS) too, whose findings are its evidence; of these, ``roles`` only. Questions
    whose gold is a count are left out: a number is computed, not read off the documents. Calls
    on a sub-question are left out too (the gold answers the whole question)."""
    from ragteam.nodes.roles.jade import answer_reply

    items, counts = [], Counter()
    for root in map(Path, eval_dirs):
        for path in _prediction_files(root):
            for record in read_predictions(path).values():
                counts["runs"] += 1
                golds = gold_names(record)
                if not golds:
                    counts["runs_without_names"] += 1
                    continue
                if not isinstance(record.get("question"), str):
                    raise ValueError(f"{path}: question {record['id']!r}: no 'question' text")
                given = score_of(record, "f1", path) >= 1.0
                target = tokenizer.encode(answer_reply(golds), add_special_tokens=False)
                for t in _trace(root, path, record):
                    evidence = _final_answer_evidence(t, record, summaries)
                    if evidence is None or roles and t.role not in roles:
                        continue
                    if not _names_all(evidence, golds):
                        counts["calls_without_evidence"] += 1
                        continue
                    items.append(_experience(t, record, list(target), False))
                    counts[f"calls/{t.role}"] += 1
                    counts["targets_listing_several"] += len(golds) > 1
                    counts["targets_already_given"] += given
    return items, dict(counts)


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
    return sum(_names_all(read, [gold]) for gold in golds)


def root_decomposition(calls: Sequence[Transition], well_formed: bool = True) -> Transition | None:
    """A run's first serial decomposition of its whole question (task ``0``); with
    ``well_formed``, the first whose reply kept the decomposer's format."""
    return next((t for t in calls if t.role == "QDS" and t.task_id == "0" and (t.format_ok or not well_formed)),
                None)


def decomposes(t: Transition, record: dict) -> bool:
    """``t`` is a serial decomposer's call: the calls ``hindsight_decomposition_transitions``
    selects (pass it as ``by_evidence`` to the score selections so that none is taught twice)."""
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
        for path in _prediction_files(root):
            for record in read_predictions(path).values():
                golds = gold_names(record)
                if not golds:
                    continue
                calls = _trace(root, path, record)
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
        items.append(_experience(d.plan, d.record, d.plan.completion_ids, True, own_example_prompt(d.plan, tokenizer)))
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
        for path in _prediction_files(root):
            for record in read_predictions(path).values():
                qid = record["id"]
                explored.add(qid)
                if qid not in targets or qid in taught:
                    continue
                plan = root_decomposition(_trace(root, path, record), well_formed=False)
                if plan is None:
                    continue
                taught.add(qid)
                reply = tokenizer.encode(subquestions_reply(targets[qid]), add_special_tokens=False)
                items.append(_experience(plan, record, reply, False, own_example_prompt(plan, tokenizer)))
                counts[f"steps/{len(targets[qid])}"] += 1
    counts["questions_taught"] = len(taught)
    counts["targeted_questions_never_decomposed"] = len(explored & set(targets) - taught)
    return items, dict(counts)
