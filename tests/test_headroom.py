"""`ragteam headroom`: fixed workflows (JADE without its planner) and graphs on the same questions,
the best candidate per question and what choosing per question could add."""

import pytest

from ragteam.graphs.apps.cli import main
from ragteam.graphs.eval.headroom import headroom_rows, oracle_picks, type_picks
from ragteam.graphs.methods import build_graph
from ragteam.graphs.run import run
from ragteam.nodes.context import RunContext, Settings
from ragteam.nodes.policies.scripted import ScriptedPolicy
from ragteam.nodes.team import Team
from ragteam.nodes.written import WrittenReplies
from ragteam.stores.demo import demo_retriever


def rec(f1, calls=1, retrievals=1):
    return {"f1": f1, "llm_calls": calls, "retrieval_calls": retrievals, "prompt_tokens": 100 * calls}


def test_the_oracle_takes_the_best_candidate_per_question_and_the_cheaper_on_ties():
    records = {"RA,AG": {"q1": rec(1.0), "q2": rec(0.0), "q3": rec(0.5)},
               "QDS": {"q1": rec(1.0, 4, 2), "q2": rec(0.8, 4, 2), "q3": rec(0.2, 4, 2)}}
    assert oracle_picks(records) == {"q1": "RA,AG", "q2": "QDS", "q3": "RA,AG"}
    rows, [oracle, *_] = headroom_rows(records, {"q1": "bridge", "q2": "bridge", "q3": "comparison"})
    assert [r.best_for for r in rows] == [2, 1]
    assert oracle.f1 == pytest.approx((1.0 + 0.8 + 0.5) / 3)
    assert oracle.f1_by_type == pytest.approx({"bridge": 0.9, "comparison": 0.5})
    assert oracle.llm_calls == pytest.approx((1 + 4 + 1) / 3)


def test_the_type_level_planner_gives_each_type_the_candidate_best_on_it():
    types = {"b1": "bridge", "b2": "bridge", "c1": "comparison", "c2": "comparison", "c3": "comparison"}
    records = {"RA,AG": {"b1": rec(0.6), "b2": rec(0.4), "c1": rec(0.0), "c2": rec(0.2), "c3": rec(0.6)},
               "QDS": {"b1": rec(0.6, 4), "b2": rec(0.0, 4), "c1": rec(0.5, 4), "c2": rec(0.5, 4),
                       "c3": rec(0.0, 4)}}
    assert type_picks(records, types, sorted(types)) == {"bridge": "RA,AG", "comparison": "QDS"}
    # a tie on a type goes to the candidate with fewer calls
    assert type_picks(records, types, ["b1"]) == {"bridge": "RA,AG"}
    rows, [oracle, by_type] = headroom_rows(records, types)
    assert by_type.candidate == "best per type (RA,AG for bridge, QDS for comparison)"
    assert by_type.f1_by_type == pytest.approx({"bridge": 0.5, "comparison": 1.0 / 3})
    assert by_type.llm_calls == pytest.approx((1 + 1 + 4 + 4 + 4) / 5)
    assert oracle.f1 >= by_type.f1 >= max(r.f1 for r in rows)


def test_a_fixed_workflow_writes_every_plan_the_question_its_workflow_and_subquestions_the_fallback():
    """The planner never samples (its rules would say AG): each plan is written and marked so."""
    policy = ScriptedPolicy({"planner": "<workflow>AG</workflow>",
                             "QDS": "<q1>Who directed Ed Wood?</q1><q2>Who is Tim Burton?</q2>",
                             "AG": "<answer>Tim Burton</answer>", "AS": "<answer>Tim Burton</answer>"})
    ctx = RunContext(Team(policy), demo_retriever(), Settings(written=WrittenReplies.fixed("QDS", "RA,AG")))
    result = run(build_graph("jade"), "Who directed the film Ed Wood?", ctx)
    plans = [t for t in result.transitions if t.role == "planner"]
    assert len(plans) == 3 and all(t.written for t in plans)
    assert result.transitions[1].role == "QDS"
    assert result.topologies == ["QDS", "RA,AG", "RA,AG"]


def test_a_written_plan_reaches_a_policy_that_records_no_ids():
    """A chat model behind an API (no ids, never trained) runs a fixed workflow too: the written
    plan is recorded as text."""
    policy = ScriptedPolicy({"AG": "<answer>Tim Burton</answer>"}, exact_ids=False)
    policy.encode_reply = None
    ctx = RunContext(Team(policy), demo_retriever(), Settings(written=WrittenReplies.fixed("RA,AG", "RA,AG")))
    result = run(build_graph("jade"), "Who directed the film Ed Wood?", ctx)
    [plan] = [t for t in result.transitions if t.role == "planner"]
    assert plan.written and plan.completion_text == "<workflow>RA,AG</workflow>" and not plan.prompt_ids
    assert result.answer == "Tim Burton"


def test_headroom_command_writes_one_eval_per_candidate_and_budget(tmp_path, capsys):
    out = tmp_path / "hr"
    assert main(["headroom", "--policy", "scripted", "--workflow", "RA,AG", "--workflow", "[RA|QR,RA],DS,AG",
                 "--graph", "llm_only", "--top-k", "5", "--top-k", "1", "--limit", "3", "--out", str(out),
                 "--quiet"]) == 0
    printed = capsys.readouterr().out
    assert printed.count("oracle (best per question) | 3 |") == 2 and r"[RA\|QR,RA],DS,AG" in printed
    assert printed.count("best per type (") == 2
    for k in (5, 1):
        assert {p.name for p in (out / f"top{k}").iterdir() if p.is_dir()} == {"wf-RA-AG", "wf-RA_QR-RA-DS-AG", "llm_only"}
    assert main(["headroom", "--policy", "scripted", "--workflow", "XX", "--out", str(tmp_path / "bad")]) == 2
