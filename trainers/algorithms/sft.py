"""What supervised fine-tuning learns from: filtered successful traces (APEX's execution stage).

Input is what ``ragteam eval`` writes: ``predictions.jsonl`` (one scored record per question,
with the path of its trace) and ``traces/<id>.jsonl`` (that run's transitions). A call is kept
when its run scored at least ``min_f1``, its output parsed, and its role is selected; the
learner trains on the recorded ids (``trainers.learner.sft_update``). Or, for the answer
generator, by evidence instead of score: every call whose documents held each gold answer
learns to give them all (``hindsight_answer_transitions``). Which rule picks which role's calls
is chosen by name (``trainers.algorithms.selectors``); a study's own rules, such as the
PhantomWiki decomposer's, live beside its configs (``examples/research/phantomwiki/phantomwiki_selectors.py``).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Collection, Mapping, Sequence

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
Claim = Callable[[Transition, dict], bool]  # (call, its run's record) -> a selector decides it, not the score


def workflow_reply_ids(tokenizer, reply: Callable[[str], str], workflow: str) -> list[int]:
    """The token ids of the planner ``reply`` asking for ``workflow``."""
    return tokenizer.encode(reply(workflow), add_special_tokens=False)


def planner_fallback_relabel(tokenizer, reply: Callable[[str], str], workflow: str) -> Relabel:
    """Hindsight target for a planner whose reply broke its format: the runtime then executed
    ``workflow`` (``Settings.planning.fallback``), so in a run that scored well that workflow is
    what the planner should have asked for (its ``reply``). Other roles' broken calls stay out."""
    target = workflow_reply_ids(tokenizer, reply, workflow)
    return lambda t: list(target) if t.role == "planner" else None


def call_experience(t: Transition, record: dict, completion: list[int], sampled: bool,
                prompt: list[int] | None = None) -> Experience:
    return Experience(trajectory=t.run_id, group=record["id"], role=t.role, prompt_ids=prompt or t.prompt_ids,
                      completion_ids=completion, old_logprobs=t.logprobs if sampled and not prompt else [],
                      temperature=0.0, reward=record["f1"])


def own_example_prompt(t: Transition, tokenizer) -> list[int] | None:
    """The prompt ids of a serial decomposer's call made with another example chain
    (``Settings.serial.example_steps``: exploration sampling other lengths), rewritten with
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


def prediction_files(root: Path) -> list[Path]:
    """The ``predictions.jsonl`` of each graph an eval folder holds (or of the graph folder itself)."""
    found = sorted(root.glob("*/predictions.jsonl")) or sorted(root.glob("predictions.jsonl"))
    if not found:
        raise FileNotFoundError(f"{root}: no predictions.jsonl (expected a `ragteam eval --out` folder)")
    return found


def run_calls(root: Path, path: Path, record: dict) -> list[Transition]:
    """The calls of the run ``record`` (a line of ``path`` under eval folder ``root``) names."""
    if not isinstance(record.get("trace_path"), str):
        raise ValueError(f"{path}: question {record['id']!r}: no 'trace_path' (a record "
                         "`ragteam eval` writes names its trace file)")
    return read_jsonl(root / record["trace_path"])


def successful_transitions(eval_dirs: Sequence[str | Path], min_f1: float,
                           roles: Collection[str] | None, relabel: Relabel | None = None,
                           claimed: Claim | None = None, tokenizer=None) -> tuple[list[Experience], dict]:
    """Experiences from every graph folder under each eval directory; plus counts for a report.
    A call whose output broke its format is left out, unless ``relabel`` gives it a target; a
    call ``claimed`` holds is left to the selector that claimed it. A decomposition sampled with
    another example chain is taught under the decomposer's own prompt (``own_example_prompt``,
    with ``tokenizer``; without one it is left out)."""
    items, counts = [], Counter()
    for root in map(Path, eval_dirs):
        for path in prediction_files(root):
            for record in read_predictions(path).values():
                counts["runs"] += 1
                if score_of(record, "f1", path) < min_f1:
                    continue
                counts["successful_runs"] += 1
                for t in run_calls(root, path, record):
                    if roles and t.role not in roles or claimed and claimed(t, record):
                        continue
                    completion = t.completion_ids if t.format_ok else relabel(t) if relabel else None
                    if not completion:
                        continue
                    if tokenizer is None and _other_example(t) is not None:  # cannot re-pair it
                        counts["left_out/QDS_without_its_own_example"] += 1
                        continue
                    prompt = own_example_prompt(t, tokenizer) if tokenizer is not None else None
                    items.append(call_experience(t, record, completion, t.format_ok, prompt))
                    counts[f"calls/{t.role}" if t.format_ok else f"relabelled/{t.role}"] += 1
    return items, dict(counts)


@dataclass(frozen=True)
class Exploration:
    """A ``ragteam headroom`` OUT/top<k> folder of the team on training questions, read: its
    candidates (the team as itself, with its planner, and as each fixed workflow) and each
    candidate's records (label → question id → record; a run that failed has none)."""

    root: Path
    candidates: list[Candidate]
    records: dict[str, dict[str, dict]]

    @property
    def free(self) -> Candidate | None:
        """The candidate run with its planner (None: the fixed workflows were explored alone)."""
        return next((c for c in self.candidates if c.workflow is None), None)

    def questions(self) -> list[str]:
        return sorted(set().union(*map(set, self.records.values())))

    def calls(self, candidate: Candidate, qid: str) -> list[Transition]:
        """The calls of ``candidate``'s run on question ``qid`` (none if it has no record)."""
        record = self.records[candidate.label].get(qid)
        return read_jsonl(self.root / record["trace_path"]) if record else []


def read_exploration(root: str | Path) -> Exploration:
    from ragteam.graphs.eval.headroom import read_candidates

    root = Path(root)
    candidates = read_candidates(root)
    free = [c for c in candidates if c.workflow is None]
    if len(free) > 1 or not free and not any(c.workflow for c in candidates):
        raise ValueError(f"{root}: needs at most one candidate run with its planner (`ragteam "
                         f"headroom --graph NAME`) and a fixed workflow or it; found {len(free)} and "
                         f"{len(candidates) - len(free)}")
    return Exploration(root, candidates, {c.label: read_finished(root / c.folder / "predictions.jsonl")
                                          for c in candidates})


# (exploration folder, its candidates, their records) -> question id -> the candidate's label
# the planner learns for it
PlannerTargets = Callable[[Path, "Sequence[Candidate]", "Mapping[str, Mapping[str, dict]]"], "dict[str, str]"]


def best_workflow_transitions(explore_dirs: Sequence[str | Path], min_f1: float,
                              roles: Collection[str] | None, tokenizer,
                              claimed: Claim | None = None) -> tuple[list[Experience], dict]:
    """Group-relative selection across workflows, from ``ragteam headroom`` runs of the team on
    training questions (``Exploration``).

    Per question the candidates are ranked as the headroom oracle ranks them (best F1, ties to the
    cheaper). The planner learns only the winner, and only when it scored at least ``min_f1``
    (``planner_workflow_transitions`` with ``planner_targets``). The other roles learn from every
    candidate run that scored at least ``min_f1``, so the executors also practise the
    decompositions that worked (a decomposition sampled with another example chain under the
    role's own prompt, ``own_example_prompt``). Workflows are never relabelled from broken
    replies, so a fallback cannot crowd out the mix. A call ``claimed`` holds is left to the
    selector that claimed it (``trainers.algorithms.selectors``), the planner's calls too.
    """
    items, counts = [], Counter()
    for root in map(Path, explore_dirs):
        explored = read_exploration(root)
        for qid in explored.questions():  # a run that failed is no candidate
            counts["questions"] += 1
            for candidate in explored.candidates:
                record = explored.records[candidate.label].get(qid)
                if record is None or score_of(record, "f1", root / candidate.folder) < min_f1:
                    continue
                counts["successful_runs"] += 1
                for t in explored.calls(candidate, qid):
                    if (t.role == "planner" or not t.format_ok or roles and t.role not in roles
                            or claimed and claimed(t, record)):
                        continue
                    items.append(call_experience(t, record, t.completion_ids, True, own_example_prompt(t, tokenizer)))
                    counts[f"calls/{t.role}"] += 1
    if not roles or "planner" in roles:
        oracle = lambda root, candidates, records: planner_targets(root, candidates, records, min_f1)  # noqa: E731
        found, planner_counts = planner_workflow_transitions(explore_dirs, tokenizer, oracle, claimed)
        items += found
        counts.update(planner_counts)
    return items, dict(counts)


def planner_workflow_transitions(explore_dirs: Sequence[str | Path], tokenizer, targets: PlannerTargets,
                                 claimed: Claim | None = None) -> tuple[list[Experience], dict]:
    """The planner's calls from explorations, per question the workflow ``targets`` picks for it:
    a fixed workflow's pick becomes a reply asking for that workflow, given the prompt the
    planner saw for that question in the team's own run, written as the team's method writes one
    (``planner_reply``), and the picked run's sub-question plans as that run made them; the team's
    own run, when picked, keeps its valid planner calls."""
    from ragteam.graphs.eval.headroom import FIXED_WORKFLOW_METHOD

    items, counts = [], Counter()
    for root in map(Path, explore_dirs):
        explored = read_exploration(root)
        reply = planner_reply([explored.free.label if explored.free else FIXED_WORKFLOW_METHOD])
        for qid, winner in sorted(targets(root, explored.candidates, explored.records).items()):
            record = explored.records[winner].get(qid)
            picked = next(c for c in explored.candidates if c.label == winner)
            workflow = picked.workflow
            # the planner's prompt for the whole question is the same in every run of it: the
            # team's own run when there is one, else the picked run's (its plan written)
            own_calls = explored.calls(explored.free or picked, qid)
            if record is None:
                continue
            counts[f"planner_target/{winner}"] += 1
            if workflow is None:
                chosen = [(t, t.completion_ids, True) for t in own_calls if t.role == "planner" and t.format_ok]
            else:
                root_plan = next((t for t in own_calls if t.role == "planner" and t.task_id == "0"), None)
                chosen = [(root_plan, workflow_reply_ids(tokenizer, reply, workflow), False)] if root_plan else []
                # and the picked run's sub-question plans as it ran them (a fixed workflow writes
                # them): a planner taught only the root plan improvises every sub-question's
                chosen += [(t, t.completion_ids, False) for t in explored.calls(picked, qid)
                           if t.role == "planner" and t.task_id != "0" and t.format_ok]
            for t, completion, sampled in chosen:
                if not (claimed and claimed(t, record)):
                    items.append(call_experience(t, record, completion, sampled))
                    counts["calls/planner" if t.task_id == "0" else "calls/planner_subplans"] += 1
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


def names_all(text: str, answers: Sequence[str]) -> bool:
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
    """``t`` is an answer generator's call on the run's own question, not on a sub-question: the
    calls ``hindsight_answer_transitions`` selects by evidence (the ``hindsight-answers``
    selector's claim, so that the score rule teaches none of them twice)."""
    return _final_answer_evidence(t, record, summaries=False) is not None


def gives_an_answer(t: Transition, record: dict) -> bool:
    """``t`` gives an answer (AG, AS), to the whole question or to a sub-question: the calls that
    ``hindsight_answer_transitions(..., summaries=True)`` alone selects (the
    ``hindsight-answers-only`` claim), so that no answer a run chose by score — a reader naming
    one person where the gold holds several — is taught beside the lists evidence teaches."""
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
        for path in prediction_files(root):
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
                for t in run_calls(root, path, record):
                    evidence = _final_answer_evidence(t, record, summaries)
                    if evidence is None or roles and t.role not in roles:
                        continue
                    if not names_all(evidence, golds):
                        counts["calls_without_evidence"] += 1
                        continue
                    items.append(call_experience(t, record, list(target), False))
                    counts[f"calls/{t.role}"] += 1
                    counts["targets_listing_several"] += len(golds) > 1
                    counts["targets_already_given"] += given
    return items, dict(counts)
