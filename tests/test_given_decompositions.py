"""Given decompositions (nodes/decompositions.py): written as the serial decomposer's reply in a
run (``ragteam headroom --given-decompositions``), and taught to it by the fine-tune
(the PhantomWiki study's ``given-decompositions`` selector); and the PhantomWiki chains that fill
such a file."""

import json
import sys
from pathlib import Path

import pytest

from ragteam.graphs.apps.cli import main
from ragteam.graphs.eval.headroom import Candidate, read_candidates
from ragteam.nodes.decompositions import read_decompositions
from ragteam.nodes.policies.scripted import byte_ids
from ragteam.nodes.roles.jade import subquestions_reply
from ragteam.nodes.tracing import read_jsonl
from ragteam.stores.datasets import read_dataset

ROOT = Path(__file__).resolve().parents[1]
QUESTIONS = ROOT / "stores" / "data" / "hotpotqa_dev53_questions.jsonl"
STUDY = ROOT / "examples" / "research" / "phantomwiki"
sys.path.insert(0, str(STUDY))

from phantomwiki_chains import chain, main as chains_main  # noqa: E402
from phantomwiki_selectors import given_decomposition_transitions  # noqa: E402


class ByteTokenizer:
    def encode(self, text, add_special_tokens):
        assert not add_special_tokens
        return byte_ids(text)


def test_a_given_chain_is_written_as_the_decomposers_reply_and_taught_under_its_prompt(tmp_path, capsys):
    first, second = read_dataset(QUESTIONS).examples[:2]
    steps = ["Who is the first person?", "What did #1 do?", "Where did #2 happen?"]
    given = tmp_path / "chains.jsonl"
    given.write_text(json.dumps({"id": first.id, "question": first.question, "sub_questions": steps}) + "\n")
    out = tmp_path / "hr"
    assert main(["headroom", "--policy", "scripted", "--workflow", "QDS", "--given-decompositions", str(given),
                 "--top-k", "2", "--limit", "2", "--out", str(out), "--quiet"]) == 0
    assert read_candidates(out / "top2") == [
        Candidate("QDS", "wf-QDS", "QDS"),
        Candidate("QDS, given chains", "wf-QDS-given", "QDS", {"written": {"decompositions": str(given.resolve())}})]
    roots = {}
    for trace in (out / "top2" / "wf-QDS-given" / "traces").glob("*.jsonl"):
        roots[trace.name] = next(t for t in read_jsonl(trace) if t.role == "QDS" and t.task_id == "0")
    written = {name: t for name, t in roots.items() if t.written}
    # the question with a chain runs it (three sub-questions, each then planned and answered);
    # the other question's decomposer answers as itself
    assert len(roots) == 2 and len(written) == 1
    (plan,) = written.values()
    assert plan.action == steps and plan.completion_text == subquestions_reply(steps) and plan.format_ok
    assert next(iter(written)).startswith(first.id)
    sampled = next(t for t in roots.values() if not t.written)
    assert sampled.action != steps

    # the fine-tune: once per question, under the prompt of a run that decomposed it, whatever it scored
    items, counts = given_decomposition_transitions([out / "top2"], ByteTokenizer(), {first.id: steps})
    assert [(e.group, e.role, e.completion_ids) for e in items] == \
        [(first.id, "QDS", byte_ids(subquestions_reply(steps)))]
    assert items[0].prompt_ids == plan.prompt_ids and not items[0].old_logprobs
    assert counts == {"steps/3": 1, "questions_taught": 1, "targeted_questions_never_decomposed": 0}

    # a bad file stops the command before anything runs
    given.write_text(json.dumps({"id": "q", "question": "Q?", "sub_questions": ["Who is #2?", "Why?"]}) + "\n")
    assert main(["headroom", "--policy", "scripted", "--workflow", "QDS", "--given-decompositions", str(given),
                 "--out", str(tmp_path / "hr2"), "--quiet"]) == 2
    assert f"{given}:1: sub-question 1 names an answer that is not an earlier one" in capsys.readouterr().err
    assert not (tmp_path / "hr2").exists()


@pytest.mark.parametrize("line, message", [
    ({"id": "q", "sub_questions": ["A?", "B?"]}, "string 'id' and 'question'"),
    ({"id": "q", "question": "Q?", "sub_questions": ["A?"]}, "at least two non-empty"),
    ({"id": "q", "question": "Q?", "sub_questions": ["A?", "Who is #3?"]}, "sub-question 2 names an answer"),
    ([1, 2], "not a given decomposition"),
])
def test_a_bad_given_decomposition_names_file_and_line(tmp_path, line, message):
    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps({"id": "p", "question": "P?", "sub_questions": ["A?", "B of #1?"]}) + "\n"
                    + json.dumps(line) + "\n")
    with pytest.raises(ValueError, match=f"{path}:2: .*{message}"):
        read_decompositions(path)
    path.write_text(json.dumps({"id": "p", "question": "P?", "sub_questions": ["A?", "B of #1?"]}) + "\n" * 2 +
                    json.dumps({"id": "p", "question": "P?", "sub_questions": ["C?", "D?"]}) + "\n")
    with pytest.raises(ValueError, match=f"{path}:3: a second decomposition of question 'p' \\(first at line 1\\)"):
        read_decompositions(path)


def test_given_decompositions_are_a_file_path():
    from ragteam.nodes.context import Settings

    with pytest.raises(ValueError, match="written.decompositions must be a string"):
        Settings(written={"decompositions": ["Who?", "What of #1?"]})


def test_sft_takes_given_or_hindsight_decompositions_not_both(tmp_path, capsys):
    from ragteam.trainers import sft_graph

    assert sft_graph.main(["--traces", str(tmp_path), "--selectors", str(STUDY / "phantomwiki_selectors.py"),
                           "--select", "hindsight-decompositions", "--select", "given-decompositions=d.jsonl",
                           "--out", str(tmp_path / "sft")]) == 2
    assert ("hindsight-decompositions and given-decompositions both choose the calls of QDS; choose one"
            in capsys.readouterr().err)


@pytest.mark.parametrize("question, steps", [
    ("Who is the sister of the brother of the friend of Ann Lee?",
     ["Who is the friend of Ann Lee?", "Who is the brother of #1?", "Who is the sister of #2?"]),
    ("Who is the mother of the person whose date of birth is 0185-08-28?",
     ["Who is the person whose date of birth is 0185-08-28?", "Who is the mother of #1?"]),
    ("What is the date of birth of the son of Bo Dee?",
     ["Who is the son of Bo Dee?", "What is the date of birth of #1?"]),
    ("What is the hobby of the person whose occupation is director of photography?",
     ["Who is the person whose occupation is director of photography?", "What is the hobby of #1?"]),
    ("How many brothers does the sibling of Tamara Moten have?",
     ["Who is the sibling of Tamara Moten?", "How many brothers does #1 have?"]),
    ("How many sisters does Miguel Eads have?", ["How many sisters does Miguel Eads have?"]),
    ("Who is the person whose hobby is microscopy?", ["Who is the person whose hobby is microscopy?"]),
])
def test_a_phantomwiki_question_reads_as_its_chain_innermost_hop_first(question, steps):
    assert chain(question) == steps


def test_the_chains_file_leaves_out_one_hop_questions_and_refuses_what_no_template_fits(tmp_path, capsys):
    def questions(*rows):
        path = tmp_path / "q.jsonl"
        path.write_text("".join(json.dumps({"id": qid, "question": q, "golden_answers": ["x"],
                                            "metadata": {"hops": hops}}) + "\n" for qid, q, hops in rows))
        return str(path)

    data = questions(("a", "Who is the friend of the son of Bo Dee?", 2), ("b", "Who is the son of Bo Dee?", 1))
    out = tmp_path / "chains.jsonl"
    assert chains_main(["--questions", data, "--out", str(out)]) == 0
    (only,) = read_decompositions(out)
    assert (only.id, only.sub_questions) == ("a", ("Who is the son of Bo Dee?", "Who is the friend of #1?"))
    assert chains_main(["--questions", data, "--out", str(out)]) == 2  # never overwritten
    assert "exists" in capsys.readouterr().err
    for row, message in ((("c", "Who is the son of Bo Dee?", 2), "1 steps for a question of 2 hops"),
                         (("d", "Where was Bo Dee born?", 1), "no PhantomWiki template fits")):
        assert chains_main(["--questions", questions(row), "--out", str(tmp_path / "new.jsonl")]) == 2
        assert message in capsys.readouterr().err and not (tmp_path / "new.jsonl").exists()


def test_written_decompositions_are_compared_with_the_chains_by_hops(tmp_path, capsys):
    rows = [("a", "Who is the friend of the son of Bo Dee?", 2), ("b", "Who is the sister of the son of the friend of Al Roe?", 3)]
    data = tmp_path / "q.jsonl"
    data.write_text("".join(json.dumps({"id": qid, "question": q, "golden_answers": ["x"],
                                        "metadata": {"type": f"hops-{hops}", "hops": hops}}) + "\n"
                            for qid, q, hops in rows))
    given = tmp_path / "chains.jsonl"
    assert chains_main(["--questions", str(data), "--out", str(given)]) == 0
    only_a = tmp_path / "a.jsonl"  # question b's decomposer answers as itself: two scripted steps
    only_a.write_text(given.read_text().splitlines()[0] + "\n")
    out = tmp_path / "hr"
    assert main(["headroom", "--policy", "scripted", "--workflow", "QDS", "--given-decompositions", str(only_a),
                 "--data", str(data), "--top-k", "2", "--out", str(out), "--quiet"]) == 0
    capsys.readouterr()
    assert chains_main(["--questions", str(data), "--written", str(out / "top2" / "wf-QDS-given")]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[2:] == ["| 2 | 1 | 1 | 1 |", "| 3 | 1 | 0 | 0 |", "| all | 2 | 1 | 1 |"]
    assert chains_main(["--questions", str(data), "--written", str(tmp_path / "nothing")]) == 2
    assert "predictions.jsonl" in capsys.readouterr().err


@pytest.mark.parametrize("text,message", [
    ("", "no given decompositions"),
    ('{"id": "q1", "question": "Who?", "sub_questions": ["A?", "B #1?"]}\n'
     '{"id": "q2", "question": "Why?", "sub_questions": ["C?", "D #1?"]', "last line is not JSON"),  # a typo
    ('\ufeff{"id": "q1", "question": "Who?", "sub_questions": ["A?", "B #1?"]}', "last line is not JSON"),
    ('{"id": "q1", "question": "Who?", "sub_questions": ["A?", "B #1?"]}\n'
     '{"id": "q2", "question": "Who? ", "sub_questions": ["C?", "D #1?"]}\n', "second decomposition"),
])
def test_a_hand_written_file_that_gives_no_usable_chain_is_refused(text, message, tmp_path):
    path = tmp_path / "chains.jsonl"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ValueError, match=message):
        read_decompositions(path)
