"""Runs, evals and the CLI under hostile input: trace files and their names, torn lines and
records holding any line separator, a resumed eval that appends nothing, questions whose runs
break, terminal output, stop reasons."""

import asyncio
import json

import pytest

from ragteam.graphs.apps.cli import main, printable
from ragteam.graphs.eval.evaluate import evaluate_graph, read_failures, read_finished, read_predictions, trace_name
from ragteam.graphs.methods import build_graph, methods
from ragteam.graphs.methods.search_loop import build_qagent_graph
from ragteam.graphs.run import run
from ragteam.nodes.context import RunContext, Settings
from ragteam.nodes.policies.scripted import ScriptedPolicy
from ragteam.nodes.roles import plumbing_policy
from ragteam.nodes.team import Team
from ragteam.stores.datasets import QAExample
from ragteam.stores.demo import demo_retriever
from ragteam.stores.jsonl import append_records, dumps_line, read_lines, read_records, write_records
from tests.conftest import SIMPLE


def examples(*pairs):
    return [QAExample(id=i, question=q, golds=("yes",)) for i, q in pairs]


def evaluate(out, items, policy=None, settings=Settings()):
    ctx = RunContext(Team(policy or ScriptedPolicy(SIMPLE)), demo_retriever(), settings)
    return asyncio.run(evaluate_graph("jade", build_graph("jade"), items, ctx, out, concurrency=2,
                                      progress=False))


def test_trace_files_of_ids_that_sanitize_alike_do_not_collide(tmp_path):
    records = evaluate(tmp_path, examples(("a/b", "Who is Ed Wood?"), ("a_b", "Who is Ed Wood?"),
                                          ("../x", "Who is Ed Wood?")))
    paths = {r["trace_path"] for r in records}
    assert len(paths) == 3 and all((tmp_path / p).exists() for p in paths)
    assert all((tmp_path / p).resolve().parent == (tmp_path / "jade" / "traces").resolve() for p in paths)
    assert trace_name("a/b") != trace_name("a_b")


def test_a_torn_last_line_is_cut_before_resuming(tmp_path):
    items = examples(("1", "Who is Ed Wood?"), ("2", "Who is Scott Derrickson?"))
    evaluate(tmp_path, items[:1])
    predictions = tmp_path / "jade" / "predictions.jsonl"
    with open(predictions, "a") as handle:
        handle.write('{"id": "2", "questi')  # a write cut by a kill
    evaluate(tmp_path, items)
    lines = predictions.read_text().splitlines()
    assert [json.loads(line)["id"] for line in lines] == ["1", "2"]  # every line parses


def _breaks_on_boom(request):
    if "BOOM" in request.messages[-1]["content"]:
        raise RuntimeError("this run broke")
    return "<workflow>RA,AG</workflow>"


def test_a_question_that_breaks_its_run_is_a_failed_record_not_a_dead_eval(tmp_path):
    policy = ScriptedPolicy({**SIMPLE, "planner": _breaks_on_boom})
    items = examples(("ok", "Who is Ed Wood?"), ("bad", "Who is BOOM?"), ("ok2", "Who is Ed Wood?"))
    records = evaluate(tmp_path, items, policy)
    assert [r["id"] for r in records] == ["ok", "ok2"]
    [failure] = read_failures(tmp_path, "jade")
    assert failure["id"] == "bad" and "this run broke" in failure["error"]


def test_a_lone_surrogate_in_a_question_is_cleaned_where_it_enters(tmp_path):
    [record] = evaluate(tmp_path, examples(("odd", "Who is \ud800?")))
    assert record["question"] == "Who is \ufffd?" and record["prediction"] == "yes"


def test_eval_cli_reports_failures_and_exits_nonzero(tmp_path, capsys, boom_breaks_runs):
    data = tmp_path / "qa.jsonl"
    data.write_text(json.dumps({"question": "Who is Ed Wood?", "answer": "yes"}) + "\n"
                    + '{"question": "Who is BOOM?", "answer": "yes"}\n')
    code = main(["eval", "--graph", "llm_only", "--policy", "scripted", "--data", str(data),
                 "--out", str(tmp_path / "out")])
    assert code == 1 and "1 question(s) failed" in capsys.readouterr().err
    assert len(read_finished(tmp_path / "out" / "llm_only" / "predictions.jsonl")) == 1


@pytest.mark.parametrize("limit", ["0", "-1"])
def test_eval_limit_must_be_positive(limit, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["eval", "--graph", "llm_only", "--policy", "scripted", "--limit", limit,
              "--out", str(tmp_path)])
    assert exit_.value.code == 2 and "must be at least 1" in capsys.readouterr().err


def test_terminal_output_carries_no_control_sequences(monkeypatch, capsys):
    hostile = ScriptedPolicy({"planner": "<workflow>RA,AG</workflow>",
                              "AG": "<answer>\x1b[2J\x1b]0;owned\x07gone\x9b31m</answer>"})
    monkeypatch.setattr("ragteam.nodes.policies.spec.load_policy", lambda spec, sampler="hf": hostile)
    assert main(["run", "Who is Ed Wood?"]) == 0
    out = capsys.readouterr().out
    assert "gone" in out and not any(c in out for c in "\x1b\x07\x9b")
    assert printable("a\tb\nc\x1bd") == "a\tb\ncd"


@pytest.mark.parametrize("name", sorted(methods()))
def test_every_graph_ends_with_a_stop_reason(name):
    ctx = RunContext(Team(plumbing_policy()), demo_retriever(), Settings(max_rounds=2))
    result = run(build_graph(name), "Who is Ed Wood?", ctx)
    assert result.stop_reason and result.costs["turns"] >= 1


def test_an_empty_answer_is_recorded_as_such(tmp_path):
    # a broken plan with no fallback workflow answers nothing
    policy = ScriptedPolicy({"planner": "no plan"})
    [record] = evaluate(tmp_path, examples(("1", "Who is Ed Wood?")), policy,
                        Settings(planning={"fallback": ""}))
    assert record["prediction"] == "" and record["empty_answer"] is True
    [other] = evaluate(tmp_path / "b", examples(("1", "Who is Ed Wood?")))
    assert other["empty_answer"] is False


def test_a_loop_out_of_turns_answers_from_what_it_gathered():
    agent = ScriptedPolicy({"qagent": ["<search><query>Ed Wood</query></search>",
                                       "<search><query>Ed Wood films</query></search>",
                                       "Plan 9 from Outer Space</answer>"]})
    result = run(build_qagent_graph(), "Which film did Ed Wood direct?",
                 RunContext(Team(agent), demo_retriever(), Settings(max_rounds=2)))
    assert result.stop_reason == "max_turns" and result.answer == "Plan 9 from Outer Space"
    forced = result.transitions[-1]
    assert forced.node_path == "qagent/force_answer" and forced.format_ok
    assert "<information>" in forced.prompt_text  # it saw what the searches found


# -- records holding any line separator, a missing final newline, a torn trace ----------------
SEPARATORS = ["\r", "\r\n", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"]


def run_eval(out, items, policy=None):
    ctx = RunContext(Team(policy or ScriptedPolicy(SIMPLE)), demo_retriever(), Settings())
    return asyncio.run(evaluate_graph("jade", build_graph("jade"), items, ctx, out, concurrency=2,
                                      progress="off"))


def no_model_policy():
    def refuse(request):
        raise AssertionError("a finished eval must not call the model")
    return ScriptedPolicy({"planner": refuse, "AG": refuse})


@pytest.mark.parametrize("separator", SEPARATORS)
def test_a_record_holding_a_line_separator_is_one_line_and_reads_back(separator, tmp_path):
    record = {"id": f"q{separator}1", "question": f"a{separator}b", "answer": f"{separator}"}
    path = tmp_path / "r.jsonl"
    write_records(path, [record, {"id": "2"}])
    assert path.read_text(encoding="utf-8").count("\n") == 2
    assert len(path.read_text(encoding="utf-8").splitlines()) == 2  # even for splitlines readers
    assert read_records(path) == [record, {"id": "2"}]


def test_lone_surrogates_are_escaped_and_read_back(tmp_path):
    line = dumps_line({"t": "x\ud800y"})
    line.encode("utf-8")  # writable as UTF-8
    assert json.loads(line) == {"t": "x\ud800y"}


def test_a_resumed_eval_with_separator_ids_appends_nothing(tmp_path):
    items = [QAExample(id=f"q{sep}", question=f"Who is Ed Wood?{sep}", golds=("yes",)) for sep in SEPARATORS[-3:]]
    run_eval(tmp_path, items)
    predictions = tmp_path / "jade" / "predictions.jsonl"
    first = predictions.read_bytes()
    for _ in range(2):
        run_eval(tmp_path, items, no_model_policy())
    assert predictions.read_bytes() == first and len(read_predictions(predictions)) == 3


def test_compare_accepts_its_own_files_with_separator_ids(tmp_path, capsys):
    data = tmp_path / "qa.jsonl"
    write_records(data, [{"id": f"q{sep}", "question": "Who is Ed Wood?", "answer": "yes"}
                         for sep in SEPARATORS[-3:]])
    assert main(["eval", "--graph", "llm_only", "--policy", "scripted", "--data", str(data), "--out",
                 str(tmp_path / "out"), "--quiet"]) == 0
    run = str(tmp_path / "out" / "llm_only")
    assert main(["compare", run, run]) == 0 and "paired over 3 questions" in capsys.readouterr().out


def test_a_failed_question_with_a_nel_id_still_gets_its_summary(tmp_path, capsys, boom_breaks_runs):
    data = tmp_path / "qa.jsonl"
    write_records(data, [{"id": "ok", "question": "Who is Ed Wood?", "answer": "yes"},
                         {"id": "bad\x85", "question": "Who is BOOM?", "answer": "yes"}])
    code = main(["eval", "--graph", "llm_only", "--policy", "scripted", "--data", str(data), "--out",
                 str(tmp_path / "out"), "--quiet"])
    assert code == 1 and (tmp_path / "out" / "summary.md").exists()
    assert "'bad\\x85'" in capsys.readouterr().err


def test_a_complete_last_record_without_its_newline_is_kept(tmp_path):
    items = [QAExample(id="1", question="Who is Ed Wood?", golds=("yes",)),
             QAExample(id="2", question="Who is Scott Derrickson?", golds=("yes",))]
    run_eval(tmp_path, items)
    predictions = tmp_path / "jade" / "predictions.jsonl"
    predictions.write_bytes(predictions.read_bytes().rstrip(b"\n"))
    records = run_eval(tmp_path, items, no_model_policy())  # loads no model: nothing to do
    assert [r["id"] for r in records] == ["1", "2"]
    append_records(predictions, [])
    assert predictions.read_bytes().endswith(b"}\n") and len(read_lines(predictions).records) == 2


def test_a_torn_trace_file_makes_its_question_run_again(tmp_path):
    items = [QAExample(id="1", question="Who is Ed Wood?", golds=("yes",))]
    [record] = run_eval(tmp_path, items)
    trace = tmp_path / record["trace_path"]
    trace.write_bytes(trace.read_bytes()[:-40])
    assert read_finished(tmp_path / "jade" / "predictions.jsonl") == {}
    [again] = run_eval(tmp_path, items)
    assert again["id"] == "1" and len(read_predictions(tmp_path / "jade" / "predictions.jsonl")) == 1
    assert read_lines(trace).torn_tail is False

