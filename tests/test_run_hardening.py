"""Runs, evals and the CLI under hostile input (reliability sweep items 2, 3, 6, 11, 13, 16, 17)."""

import asyncio
import json

import pytest

from graphs.apps.cli import main, printable
from graphs.eval.evaluate import evaluate_graph, read_failures, read_finished, trace_name
from graphs.methods import build_graph, methods
from graphs.methods.search_loop import build_qagent_graph
from graphs.run import run
from nodes.context import RunContext, Settings
from nodes.policies.scripted import ScriptedPolicy
from nodes.roles import plumbing_policy
from nodes.team import Team
from stores.datasets import QAExample
from stores.demo import demo_retriever

SIMPLE = {"planner": "<workflow>RA,AG</workflow>", "AG": "<answer>yes</answer>"}


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
    monkeypatch.setattr("nodes.policies.spec.load_policy", lambda spec, engine="hf": hostile)
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
                        Settings(fallback_workflow=""))
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
