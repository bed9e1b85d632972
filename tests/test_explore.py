"""Exploring workflows in the warm start: the team runs every training question as itself and as
each fixed workflow (`ragteam headroom --graph jade`), and SFT learns the best one per question."""

import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from ragteam.graphs.apps.cli import main
from ragteam.graphs.eval.headroom import Candidate, oracle_picks, read_candidates, write_candidates
from ragteam.nodes.roles.jade import SERIAL_EXAMPLES
from ragteam.nodes.tracing import Transition, write_jsonl
from ragteam.nodes.policies.scripted import byte_ids
from ragteam.trainers.algorithms.sft import (answers_whole_question, best_workflow_transitions, gives_an_answer,
                                             hindsight_answer_transitions, own_example_prompt,
                                             successful_transitions)

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples" / "research" / "phantomwiki"))

from phantomwiki_selectors import (decomposes, hindsight_decomposition_transitions,  # noqa: E402
                                   root_decompositions, steps_by_type)


def call(role, completion, ok=True, task="0", prompt=(1, 2)):
    return Transition(run_id="r", turn=1, step=0, role=role, node_path=f"{task}/{role}", task_id=task,
                      observation="", prompt_text="p", completion_text="c", prompt_ids=list(prompt),
                      completion_ids=list(completion), logprobs=[-0.1] * len(completion), action=None,
                      format_ok=ok, violation="" if ok else "broken", policy="x", trained=True,
                      prompt_tokens=len(prompt), completion_tokens=len(completion), latency_s=0.0)


class Tokenizer:
    def encode(self, text, add_special_tokens):
        assert not add_special_tokens
        return {"<workflow>QDS</workflow>": [70, 71], "<workflow>RA,AG</workflow>": [80, 81]}.get(text, [90])


def explored(tmp_path, runs):
    """An OUT/top<k> folder: ``runs`` maps candidate label → {question: (f1, calls, transitions)}."""
    root = tmp_path / "top2"
    candidates = [Candidate(label, "jade" if label == "jade" else f"wf-{label}", None if label == "jade" else label)
                  for label in runs]
    root.mkdir()
    write_candidates(root, candidates)
    for candidate in candidates:
        (root / candidate.folder / "traces").mkdir(parents=True)
        lines = []
        for qid, (f1, llm_calls, transitions) in runs[candidate.label].items():
            trace = f"{candidate.folder}/traces/{qid}.jsonl"
            write_jsonl(transitions, root / trace)
            lines.append(json.dumps({"id": qid, "f1": f1, "llm_calls": llm_calls, "retrieval_calls": 1,
                                     "trace_path": trace}))
        if lines:
            (root / candidate.folder / "predictions.jsonl").write_text("\n".join(lines) + "\n")
    return root


def test_the_planner_learns_each_questions_best_workflow_and_the_executors_every_good_run(tmp_path):
    own_plan = call("planner", [9], prompt=(5, 5, 5))
    root = explored(tmp_path, {
        "jade": {"q1": (0.0, 2, [own_plan, call("AG", [1])]),                       # QDS wins q1
                 "q2": (1.0, 2, [call("planner", [8], prompt=(6,)), call("AG", [2])]),  # its own plan wins q2
                 "q3": (0.6, 2, [call("planner", [7], ok=False), call("AG", [3])])},
        "RA,AG": {"q1": (0.2, 1, [call("AG", [4])]), "q2": (0.8, 1, [call("AG", [5])]),
                  "q3": (0.6, 1, [call("AG", [6])])},                               # the cheapest of the tie on q3
        "QDS": {"q1": (0.9, 3, [call("QDS", [10]), call("AG", [11], task="0.1"), call("AS", [12])])},
    })
    items, counts = best_workflow_transitions([root], 0.5, None, Tokenizer())
    planner = [(e.group, e.prompt_ids, e.completion_ids, e.old_logprobs) for e in items if e.role == "planner"]
    # q1: the reply asking for QDS, on the prompt the planner saw for q1 (not sampled: no log-probs);
    # q2: the team's own valid plan, as recorded; q3: RA,AG won the tie, but the team's q3 plan is broken
    assert planner == [("q1", [5, 5, 5], [70, 71], []), ("q2", [6], [8], [-0.1]), ("q3", [1, 2], [80, 81], [])]
    executors = sorted((e.group, e.role, e.completion_ids[0]) for e in items if e.role != "planner")
    # every run scoring ≥ 0.5 teaches its executors, the QDS decomposition included; q1's 0.0 and 0.2 runs do not
    assert executors == [("q1", "AG", 11), ("q1", "AS", 12), ("q1", "QDS", 10), ("q2", "AG", 2), ("q2", "AG", 5),
                         ("q3", "AG", 3), ("q3", "AG", 6)]
    assert counts["planner_target/QDS"] == 1 and counts["planner_target/jade"] == 1
    assert counts["planner_target/RA,AG"] == 1 and counts["questions"] == 3
    # a question whose best run is below min_f1 teaches nothing; a role filter holds for planner targets
    items, counts = best_workflow_transitions([root], 0.95, {"AG"}, Tokenizer())
    assert [(e.group, e.role) for e in items] == [("q2", "AG")]


def test_planner_targets_by_type_ask_every_question_of_a_type_for_the_workflow_best_on_it(tmp_path):
    """Per question, a 3-hop question where every run failed goes to the cheapest (RA,AG) or to
    nothing; by type, each question asks for the fixed workflow with the best mean F1 on its type,
    whatever its own run scored, and the executors are selected as before."""
    plan = {q: call("planner", [9], prompt=(n,)) for n, q in enumerate(["a", "b", "c", "d"], 1)}
    root = explored(tmp_path, {
        "jade": {q: (0.0, 2, [plan[q], call("AG", [1])]) for q in plan},
        "RA,AG": {"a": (1.0, 1, [call("AG", [2])]), "b": (0.6, 1, [call("AG", [3])]),
                  "c": (0.4, 1, [call("AG", [4])]), "d": (0.0, 1, [call("AG", [5])])},
        "QDS": {"a": (0.8, 3, [call("QDS", [6])]), "b": (0.9, 3, [call("QDS", [7])]),
                "c": (0.0, 3, [call("QDS", [8])]), "d": (0.0, 3, [call("QDS", [9])])},
    })
    types = {"a": "hops-1", "b": "hops-1", "c": "hops-3", "d": "hops-3"}
    _, per_question = best_workflow_transitions([root], 0.5, None, Tokenizer())
    # per question: a → RA,AG, b → QDS; c and d teach the planner nothing (no run reached 0.5)
    assert per_question["planner_target/RA,AG"] == 1 and per_question["planner_target/QDS"] == 1
    data = tmp_path / "questions.jsonl"
    data.write_text("".join(json.dumps({"id": q, "question": f"{q}?", "answer": "x", "type": t}) + "\n"
                            for q, t in types.items()))
    items, counts = select([root], [f"planner-by-type={data}"], 0.5)
    planner = [(e.group, e.completion_ids) for e in items if e.role == "planner"]
    # hops-1: QDS's mean 0.85 beats RA,AG's 0.8, so a asks for QDS too; hops-3: RA,AG's 0.2
    # beats QDS's 0.0, so c and d ask for RA,AG though neither of their runs reached 0.5
    assert planner == [("a", [70, 71]), ("b", [70, 71]), ("c", [80, 81]), ("d", [80, 81])]
    assert counts["planner-by-type/planner_target/QDS"] == 2 and counts["planner-by-type/planner_target/RA,AG"] == 2
    executors = sorted((e.group, e.role, e.completion_ids[0]) for e in items if e.role != "planner")
    assert executors == [("a", "AG", 2), ("a", "QDS", 6), ("b", "AG", 3), ("b", "QDS", 7)]
    data.write_text("".join(json.dumps({"id": q, "question": f"{q}?", "answer": "x", "type": types[q]}) + "\n"
                            for q in "abc"))
    with pytest.raises(ValueError, match="question d has no type"):
        select([root], [f"planner-by-type={data}"], 0.5)


def test_without_the_team_the_planner_learns_by_type_on_the_fixed_runs_written_plan_prompts(tmp_path):
    """``explore_team: false``: only fixed workflows explored. Each run's root plan was written
    (traced with the prompt the planner sees for the question), so the planner learns its type's
    workflow on the picked run's prompt, and the run's sub-question plans as written; per
    question (no team run to keep) it learns the same way."""
    written = lambda q, n: call("planner", [60], prompt=(n, n))  # noqa: E731
    root = explored(tmp_path, {
        "RA,AG": {"a": (1.0, 1, [written("a", 1), call("AG", [2])]), "c": (0.4, 1, [written("c", 3), call("AG", [4])])},
        "QDS": {"a": (0.8, 3, [written("a", 1), call("QDS", [6])]),
                "c": (0.9, 3, [written("c", 3), call("QDS", [8]), call("planner", [61], task="0.1", prompt=(4,))])},
    })
    data = tmp_path / "questions.jsonl"
    data.write_text("".join(json.dumps({"id": q, "question": f"{q}?", "answer": "x", "type": t}) + "\n"
                            for q, t in (("a", "hops-1"), ("c", "hops-3"))))
    items, counts = select([root], [f"planner-by-type={data}"], 0.5)
    planner = [(e.group, e.prompt_ids, e.completion_ids) for e in items if e.role == "planner"]
    # c's QDS run also planned its sub-question (written RA,AG, here [61]): the planner learns that
    # plan as the run made it, so it does not improvise the sub-questions' workflows
    assert planner == [("a", [1, 1], [80, 81]), ("c", [3, 3], [70, 71]), ("c", [4], [61])]
    assert counts["planner-by-type/calls/planner"] == 2 and counts["planner-by-type/calls/planner_subplans"] == 1
    # per question: a → RA,AG (1.0), c → QDS (0.9), each on its own run's written plan prompts
    items, counts = best_workflow_transitions([root], 0.5, None, Tokenizer())
    assert [(e.group, e.prompt_ids, e.completion_ids) for e in items if e.role == "planner"] == planner
    assert counts["planner_target/RA,AG"] == counts["planner_target/QDS"] == 1


def select(folders, specs, min_f1, roles=None, tokenizer=None):
    """What ``sft_graph.py --explore ... --select SPEC`` learns: the selectors' calls, then every
    other call the score rule keeps."""
    from ragteam.trainers.algorithms.selectors import Selection, checked_selectors, run_selectors

    tokenizer = tokenizer or Tokenizer()
    chosen = run_selectors(checked_selectors(specs, explored=True),
                           Selection(tuple(folders), True, roles and frozenset(roles), tokenizer, min_f1))
    items, counts = best_workflow_transitions(folders, min_f1, roles, tokenizer, chosen.claims)
    return chosen.items + items, {**counts, **chosen.counts}


def test_hindsight_answers_in_an_exploring_round_take_the_whole_question_answers_from_every_run(tmp_path):
    """With ``--select hindsight-answers`` the answer to the whole question is taught by evidence from
    every candidate's run, whatever it scored; the score selection keeps every other call (the
    planner's pick, the decomposition, answers to sub-questions) and no whole-question answer."""
    question = "Who is the friend of Ann Lee?"
    held = f"Documents:\n[0] Ann Lee: Her friends are Bo Dee and Cy Fox.\n\nQuestion: {question}"
    missing = f"Documents:\n[0] Ann Lee: Her friend is Bo Dee.\n\nQuestion: {question}"
    step = "Documents:\n[0] Bo Dee\n\nQuestion: Who is the friend of #1?"

    def answer(observation, completion, task="0"):
        return replace(call("AG", completion, task=task), observation=observation)

    root = explored(tmp_path, {
        "jade": {"q1": (1.0, 2, [call("planner", [9]), answer(held, [1])])},
        "RA,AG": {"q1": (0.0, 1, [answer(missing, [4])])},
        "QDS": {"q1": (0.6, 3, [call("QDS", [10]), answer(step, [11], task="0.1"), answer(held, [12])])},
    })
    for folder in ("jade", "wf-RA,AG", "wf-QDS"):  # the questions and gold sets ragteam eval records
        path = root / folder / "predictions.jsonl"
        record = {**json.loads(path.read_text()), "question": question, "golds": ["Bo Dee", "Cy Fox"]}
        path.write_text(json.dumps(record) + "\n")
    items, _ = best_workflow_transitions([root], 0.5, None, Tokenizer(), answers_whole_question)
    assert sorted((e.role, e.completion_ids) for e in items) == [("AG", [11]), ("QDS", [10]), ("planner", [9])]
    taught, counts = hindsight_answer_transitions([root], Tokenizer())
    assert [(e.role, e.completion_ids, e.prompt_ids) for e in taught] == [("AG", [90], [1, 2])] * 2
    assert counts["calls/AG"] == 2 and counts["calls_without_evidence"] == 1


def test_only_hindsight_answers_teach_no_answer_chosen_by_score_and_the_summarizer_by_evidence(tmp_path):
    """``--select hindsight-answers-only``: the score selection keeps the planner's pick and the
    decomposition but no answer at all (the one-name answer to a sub-question included); by
    evidence, the answer generator on the whole question and the summarizer whose findings name
    every gold answer learn the list; a summarizer missing one name, and an answer to a
    sub-question, learn nothing."""
    question = "Who is the friend of Ann Lee?"
    held = f"Documents:\n[0] Ann Lee: Her friends are Bo Dee and Cy Fox.\n\nQuestion: {question}"
    step = "Documents:\n[0] Bo Dee\n\nQuestion: Who is the friend of #1?"
    findings = "Findings for its sub-questions:\n1. Who is the friend of Ann Lee? -> {}\n\nOriginal question: " + question

    def seen(role, observation, completion, task="0"):
        return replace(call(role, completion, task=task), observation=observation)

    root = explored(tmp_path, {
        "jade": {"q1": (0.5, 2, [call("planner", [9]), seen("AG", held, [1])])},
        "QDS": {"q1": (0.6, 3, [call("QDS", [10]), seen("AG", step, [11], task="0.1"),
                                seen("AS", findings.format("Bo Dee, Cy Fox"), [12])])},
        "RA,AG": {"q1": (0.5, 1, [seen("AS", findings.format("Bo Dee"), [13])])},
    })
    for folder in ("jade", "wf-RA,AG", "wf-QDS"):
        path = root / folder / "predictions.jsonl"
        record = {**json.loads(path.read_text()), "question": question, "golds": ["Bo Dee", "Cy Fox"]}
        path.write_text(json.dumps(record) + "\n")
    items, _ = best_workflow_transitions([root], 0.5, None, Tokenizer(), gives_an_answer)
    assert sorted((e.role, e.completion_ids) for e in items) == [("QDS", [10]), ("planner", [70, 71])]
    taught, counts = hindsight_answer_transitions([root], Tokenizer(), summaries=True)
    assert sorted((e.group, e.role, e.completion_ids) for e in taught) == [("q1", "AG", [90]), ("q1", "AS", [90])]
    assert counts["calls/AG"] == 1 and counts["calls/AS"] == 1 and counts["calls_without_evidence"] == 1
    taught, _ = hindsight_answer_transitions([root], Tokenizer(), summaries=True, roles={"AS"})
    assert [e.role for e in taught] == ["AS"]
    assert [e.role for e in hindsight_answer_transitions([root], Tokenizer())[0]] == ["AG"]  # summaries off


def test_a_candidate_that_failed_a_question_is_no_candidate_for_it(tmp_path):
    assert oracle_picks({"a": {"q1": {"f1": 0.1, "llm_calls": 1, "retrieval_calls": 1}},
                         "b": {}}, every=False) == {"q1": "a"}
    assert oracle_picks({"a": {"q1": {"f1": 0.1, "llm_calls": 1, "retrieval_calls": 1}}, "b": {}}) == {}
    root = explored(tmp_path, {"jade": {"q1": (0.0, 2, [call("planner", [9]), call("AG", [1])])},
                               "QDS": {}})  # every QDS run failed: no predictions file at all
    items, counts = best_workflow_transitions([root], 0.0, None, Tokenizer())
    assert counts["planner_target/jade"] == 1 and len(items) == 2


def test_exploring_needs_a_headroom_folder_with_at_most_one_team_run(tmp_path):
    with pytest.raises(FileNotFoundError, match="candidates.json"):
        best_workflow_transitions([tmp_path], 0.5, None, Tokenizer())
    root = explored(tmp_path, {"jade": {}, "QDS": {"q1": (1.0, 3, [call("QDS", [1])])}})
    write_candidates(root, [*read_candidates(root), Candidate("mao_arag", "mao_arag", None)])
    with pytest.raises(ValueError, match="at most one candidate run with its planner"):
        best_workflow_transitions([root], 0.5, None, Tokenizer())
    (root / "candidates.json").write_text("[1]")
    with pytest.raises(ValueError, match="not a candidates list"):
        read_candidates(root)


def test_headroom_names_its_candidates_for_training(tmp_path):
    out = tmp_path / "hr"
    assert main(["headroom", "--policy", "scripted", "--workflow", "QR,RA,AG", "--graph", "jade", "--top-k", "2",
                 "--limit", "2", "--out", str(out), "--quiet"]) == 0
    assert read_candidates(out / "top2") == [Candidate("QR,RA,AG", "wf-QR-RA-AG", "QR,RA,AG"),
                                              Candidate("jade", "jade", None)]
    # the scripted team's own plans and the forced workflow, selected per question
    items, counts = best_workflow_transitions([out / "top2"], 0.0, None, Tokenizer())
    assert counts["questions"] == 2 and sum(v for k, v in counts.items() if k.startswith("planner_target/")) == 2


class ByteTokenizer:
    """Encodes as the scripted policy records its prompts: one id per UTF-8 byte."""

    def encode(self, text, add_special_tokens):
        assert not add_special_tokens
        return byte_ids(text)


def test_a_decomposition_sampled_with_another_example_is_taught_under_the_decomposers_own_prompt(tmp_path, capsys):
    """``--decomposer-example-steps 3`` runs QDS again with a 3-step example chain in its prompt;
    the fine-tune pairs those decompositions with the prompt the decomposer sees with its own
    example — exactly the plain QDS run's prompt on the same question."""
    out = tmp_path / "hr"
    assert main(["headroom", "--policy", "scripted", "--workflow", "QDS", "--decomposer-example-steps", "3",
                 "--graph", "jade", "--top-k", "2", "--limit", "2", "--out", str(out), "--quiet"]) == 0
    variant = Candidate("QDS, 3-step example", "wf-QDS-example3", "QDS", {"serial": {"example_steps": 3}})
    assert read_candidates(out / "top2") == [Candidate("QDS", "wf-QDS", "QDS"), variant, Candidate("jade", "jade", None)]

    def root_decompositions(folder):
        found = {}
        for trace in sorted((out / "top2" / folder / "traces").glob("*.jsonl")):
            lines = [Transition(**json.loads(line)) for line in trace.read_text().splitlines()]
            found[trace.name.split("-")[0]] = next(t for t in lines if t.role == "QDS" and t.task_id == "0")
        return found

    own, sampled = root_decompositions("wf-QDS"), root_decompositions("wf-QDS-example3")
    assert own.keys() == sampled.keys() and len(own) == 2
    for qid, t in sampled.items():
        three_steps = SERIAL_EXAMPLES[3][1]
        assert three_steps in t.prompt_text and three_steps not in own[qid].prompt_text
        assert own_example_prompt(t, ByteTokenizer()) == own[qid].prompt_ids != t.prompt_ids
        assert own_example_prompt(own[qid], ByteTokenizer()) is None  # its own example: as recorded
    items, _ = best_workflow_transitions([out / "top2"], 0.0, {"QDS"}, ByteTokenizer())
    prompts = {tuple(e.prompt_ids) for e in items}
    assert prompts == {tuple(t.prompt_ids) for t in own.values()} and len(items) >= 4
    # the score selection over plain eval folders does the same, or leaves such calls out
    items, _ = successful_transitions([out / "top2"], 0.0, {"QDS"}, tokenizer=ByteTokenizer())
    assert {tuple(e.prompt_ids) for e in items} == {tuple(t.prompt_ids) for t in own.values()}
    items, counts = successful_transitions([out / "top2"], 0.0, {"QDS"})
    assert counts["left_out/QDS_without_its_own_example"] == 2 and len(items) >= 2

    # the example script's table: a row per candidate, each on the same two questions
    sys.path.insert(0, str(ROOT / "examples" / "research" / "phantomwiki"))
    from phantomwiki_decomposition_lengths import main as lengths

    capsys.readouterr()
    assert lengths([str(out / "top2"), "--questions", str(ROOT / "stores/data/hotpotqa_dev53_questions.jsonl"),
                    "--limit", "2"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| QDS")]
    assert len(rows) == 2 and all("| 2 |" in row and "{'bridge': {2: 1}, 'comparison': {2: 1}}" in row
                                  for row in rows)
    assert all(row.endswith("| 1 / 1 |") for row in rows)  # the scripted second step asks about #1
    from phantomwiki_decomposition_lengths import hops_along

    assert hops_along(["Who sang Bohemian Rhapsody?", "Which band did #1 sing in?", "Who managed #2?"])
    # a chain that restates the nested phrase retrieves the same articles again: it does not hop
    assert not hops_along(["Who is the husband of Ann?", "Who is the friend of the husband of Ann?"])
    assert not hops_along(["Who is the friend of Ann?"])


def test_hindsight_decompositions_teach_the_one_that_reached_the_most_gold_names(tmp_path):
    """Per question, of every run's root decomposition, the one whose answer generators' documents
    named the most gold names (an established answer or the question naming one is no evidence);
    ties go to fewer sub-questions; a question no run reached, or whose gold is a count, teaches
    nothing."""
    def decomposition(n, completion):
        return replace(call("QDS", completion), action=[f"sub-question {i}" for i in range(n)])

    def read(documents, task, known=""):
        return replace(call("AG", [1], task=task),
                       observation=f"{known}Documents:\n[0] {documents}\n\nQuestion: Who is #1?")

    established = "Already established:\n- Who is the friend of Ann? -> Cy Fox\n\n"
    root = explored(tmp_path, {
        "jade": {"q1": (0.0, 2, [call("planner", [9]), read("Ann: a friend of Bo", "0")]),
                 "q2": (0.0, 2, [call("planner", [9]), read("nobody", "0")])},
        "QDS": {"q1": (0.0, 3, [decomposition(2, [20]), read("Bo Dee's sister is Cy Fox", "0.2")]),
                "q2": (0.5, 3, [decomposition(2, [21]), read("nobody", "0.2", known=established)]),
                "q3": (0.0, 3, [decomposition(2, [22]), read("Ann has 3 friends", "0.2")])},
        "QDS3": {"q1": (0.0, 4, [decomposition(3, [30]), read("Cy Fox and Di Gee", "0.3")])},
        "QDS4": {"q1": (1.0, 5, [decomposition(4, [40]), read("Cy Fox and Di Gee", "0.4")])},
    })
    golds = {"q1": ["Cy Fox", "Di Gee"], "q2": ["Cy Fox"], "q3": ["3"]}
    for path in root.glob("*/predictions.jsonl"):
        records = [json.loads(line) for line in path.read_text().splitlines()]
        path.write_text("".join(json.dumps({**r, "question": "Who?", "golds": golds[r["id"]]}) + "\n"
                                for r in records))
    items, counts = hindsight_decomposition_transitions([root], ByteTokenizer())
    # q1: the 3- and 4-step runs named both names (the 2-step one only Cy Fox): the shorter wins,
    # though the 4-step run scored better
    assert [(e.group, e.role, e.completion_ids) for e in items] == [("q1", "QDS", [30])]
    assert counts["questions_taught"] == 1 and counts["steps/3"] == 1 and counts["decompositions"] == 4
    # the score selection then leaves every decomposition to it
    scored, _ = best_workflow_transitions([root], 0.0, None, Tokenizer(), decomposes)
    assert scored and not [e for e in scored if e.role == "QDS"]


def test_by_type_the_decomposer_learns_the_length_that_reached_most_on_the_type(tmp_path):
    """Per question, ties go to fewer steps; by type, each question learns its best decomposition
    of the length whose decompositions reached the largest mean share of gold names on its type
    (ties to fewer steps). A length decomposed fewer than ten times on a type is no evidence: such
    a type keeps the per-question choice."""
    def decomposition(n, completion):
        return replace(call("QDS", completion), action=[f"sub-question {i}" for i in range(n)])

    def run(n, qid, reached):
        documents = "Cy Fox" if reached else "nobody"
        ag = replace(call("AG", [1], task=f"0.{n}"), observation=f"Documents:\n[0] {documents}\n\nQuestion: Who?")
        return (0.0, n + 1, [decomposition(n, [n, int(qid[1:])]), ag])

    questions = {f"q{i}": "hops-3" for i in range(12)} | {f"q{i}": "hops-1" for i in range(12, 24)}
    questions |= {"q24": "hops-2", "q25": "hops-2"}
    # hops-3: three steps reach the gold on every question, two steps on every other one;
    # hops-1: both always reach it (a tie: two steps); hops-2: too few decompositions to choose
    two = {q: run(2, q, kind != "hops-3" or int(q[1:]) % 2 == 0) for q, kind in questions.items()}
    three = {q: run(3, q, True) for q, kind in questions.items() if kind != "hops-2" or q == "q25"}
    root = explored(tmp_path, {"QDS": two, "QDS3": three})
    for path in root.glob("*/predictions.jsonl"):
        records = [json.loads(line) for line in path.read_text().splitlines()]
        path.write_text("".join(json.dumps({**r, "question": "Who?", "golds": ["Cy Fox"]}) + "\n" for r in records))

    def taught(types=None):
        items, counts = hindsight_decomposition_transitions([root], ByteTokenizer(), types)
        return {e.group: e.completion_ids[0] for e in items}, counts

    per_question, _ = taught()
    assert [q for q, steps in per_question.items() if steps == 3] == [f"q{i}" for i in range(1, 12, 2)]
    by_type, counts = taught(questions)
    assert {q: steps for q, steps in by_type.items()} == {**{f"q{i}": 3 for i in range(12)},
                                                          **{f"q{i}": 2 for i in range(12, 26)}}
    assert counts["steps_by_type/hops-3"] == 3 and counts["steps_by_type/hops-1"] == 2
    assert "steps_by_type/hops-2" not in counts and counts["questions_taught"] == 26
    assert steps_by_type(root_decompositions([root]), questions, min_count=2)["hops-2"] == 2
    with pytest.raises(ValueError, match="question q0 has no type"):
        taught({q: kind for q, kind in questions.items() if q != "q0"})


@pytest.mark.parametrize("round_, message", [
    ({"explore": ["RA,AG"], "decomposer_examples": [3]}, "decomposer_examples: vary"),
    ({"explore": []}, "at least one workflow"),
    ({"explore": ["RA,XX"]}, "is not a workflow"),
    ({"explore": ["RA,AG"], "samples": 2}, "explore: samples and relabel_fallback"),
    ({"planner_targets": "type"}, "planner_targets: type chooses among explored workflows"),
    ({"explore": ["RA,AG"], "explore_team": False}, "explore_team: false needs planner_targets: type"),
    ({"explore": ["RA,AG"], "planner_targets": "hops"}, "planner_targets"),
    ({"decomposition_targets": "chains.jsonl", "hindsight_decompositions": True}, "choose one source"),
    ({"decomposition_targets": "/nonexistent/chains.jsonl"}, "round 1: decomposition_targets: /nonexistent"),
])
def test_the_recipe_checks_its_exploring_rounds(tmp_path, round_, message):
    import yaml

    sys.path.insert(0, str(ROOT / "examples"))
    from recipe_config import load_recipe

    data = ROOT / "stores" / "data" / "hotpotqa_dev53_questions.jsonl"
    config = {"graph": "jade", "train_data": str(data), "eval_data": str(data),
              "corpus": str(ROOT / "stores" / "data" / "hotpotqa_dev53_corpus.jsonl"),
              "rounds": [{"questions": 2, "temperature": 0.7, "min_f1": 0.5, "epochs": 1, "lr": 1e-5, **round_}]}
    (tmp_path / "r.yaml").write_text(yaml.safe_dump(config))
    with pytest.raises(ValueError, match=message):
        load_recipe(tmp_path / "r.yaml", ROOT)
    (tmp_path / "r.yaml").write_text(yaml.safe_dump({**config, "rounds": [], "graph": "vanilla_rag",
                                                     "fixed_workflows": ["RA,AG"]}))
    with pytest.raises(ValueError, match="is not JADE"):
        load_recipe(tmp_path / "r.yaml", ROOT)
