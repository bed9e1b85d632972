"""Control flow of every method graph on scripted policies."""

import json

import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage

from ragteam.graphs.methods.apex import build_apex_graph
from ragteam.graphs.methods.m_ask import build_m_ask_graph
from ragteam.graphs.methods.mao_arag import build_mao_arag_graph, mao_arag_team
from ragteam.nodes.roles import plumbing_policy
from ragteam.graphs.methods import build_graph, methods
from ragteam.graphs.run import run
from ragteam.graphs.methods.search_loop import build_qagent_graph, build_search_r1_graph
from ragteam.nodes.policies.chat import ChatModelPolicy
from ragteam.nodes.context import RunContext, Settings
from ragteam.nodes.policies.scripted import ScriptedPolicy
from ragteam.nodes.team import Team
from ragteam.stores.documents import Document

QUESTION = "What government position was held by the woman who portrayed Corliss Archer?"


class Numbered:
    """Documents d0, d1, ... in rank order for every query; records the queries."""

    def __init__(self):
        self.queries = []

    def search(self, query, k=5):
        self.queries.append(query)
        return [Document(f"d{i}", f"Title {i}", f"text {i}") for i in range(k)]


# -- M-ASK ---------------------------------------------------------------------------------------
MASK_PLAN = ("<q1>Who played Corliss Archer?</q1><a1>unknown</a1><q2>What post did she hold?</q2>"
             "<a2>unknown</a2><predicted_answer>unknown</predicted_answer>")


def mask_policy(search, update, answers="<predicted_answer>Chief of Protocol</predicted_answer>"):
    return ScriptedPolicy({"m_ask_plan": MASK_PLAN, "m_ask_search": search,
                           "m_ask_summary": ["<evidence>Shirley Temple played her.</evidence>",
                                            "<evidence>She was Chief of Protocol.</evidence>"],
                           "m_ask_update": update, "m_ask_answer": answers})


def test_m_ask_update_rewrites_a_step_and_add_appends_one(make_ctx):
    policy = mask_policy(["<search>Corliss Archer actress</search>", "<search>Shirley Temple post</search>",
                          "<end>"], ["<Update>t1</Update>", "<Add>t3</Add>"])
    result = run(build_m_ask_graph(), QUESTION, make_ctx(policy))
    assert result.answer == "Chief of Protocol" and result.stop_reason == "end"
    final = [t for t in result.transitions if t.role == "m_ask_answer"][-1].observation
    assert "t1: Corliss Archer actress -> Shirley Temple played her." in final  # t1 overwritten
    assert "t2: What post did she hold? -> unknown" in final                     # t2 kept
    assert "t3: Shirley Temple post -> She was Chief of Protocol." in final       # appended
    assert result.costs["retrieval_calls"] == 2 and result.costs["turns"] == 2


def test_m_ask_end_skips_search_and_answers_once(make_ctx):
    result = run(build_m_ask_graph(), QUESTION, make_ctx(mask_policy("<end>", "<Add>t3</Add>")))
    assert [t.role for t in result.transitions] == ["m_ask_plan", "m_ask_search", "m_ask_answer"]
    assert result.costs["retrieval_calls"] == 0


def test_m_ask_turn_budget_and_training_probes(make_ctx):
    policy = mask_policy("<search>again</search>", "<Add>t3</Add>")
    ctx = make_ctx(policy, max_rounds=3)
    result = run(build_m_ask_graph(answer_every_turn=True), QUESTION, ctx)
    assert result.stop_reason == "max_turns" and result.costs["turns"] == 3
    answers = [t for t in result.transitions if t.role == "m_ask_answer"]
    assert len(answers) == 3 + 1  # one probe per turn (for ΔF1) plus the final answer
    assert [t.turn for t in answers] == [1, 2, 3, 4]


def test_m_ask_malformed_search_is_a_violation_that_ends(make_ctx):
    result = run(build_m_ask_graph(), QUESTION, make_ctx(mask_policy("I would search", "<Add>t3</Add>")))
    search = [t for t in result.transitions if t.role == "m_ask_search"][0]
    assert not search.format_ok and result.costs["retrieval_calls"] == 0 and result.answer


def test_m_ask_update_of_a_missing_step_falls_back_to_add(make_ctx):
    policy = mask_policy(["<search>q</search>", "<end>"], "<Update>t9</Update>")
    result = run(build_m_ask_graph(), QUESTION, make_ctx(policy))
    update = [t for t in result.transitions if t.role == "m_ask_update"][0]
    assert not update.format_ok and update.action == {"op": "add"}


# -- APEX ----------------------------------------------------------------------------------------
def apex_policy(queries, decisions="<decision>continue</decision>", check="<decision>retrieve</decision>"):
    return ScriptedPolicy({
        "apex_plan": "<q1>Who portrayed Corliss Archer?</q1><q2>What position did #1 hold?</q2>",
        "apex_query": queries, "apex_continue": decisions, "apex_check": check,
        "apex_answer": ["<answer>Shirley Temple</answer>", "<answer>Chief of Protocol</answer>"],
        "apex_final": "<answer>Chief of Protocol</answer>"})


def test_apex_resolves_placeholders_and_builds_the_knowledge_base(make_ctx):
    policy = apex_policy(["<query>a</query>", "<query>b</query>"], decisions="<decision>stop</decision>")
    result = run(build_apex_graph(), QUESTION, make_ctx(policy, retriever=Numbered()))
    assert result.answer == "Chief of Protocol"
    second = [t for t in result.transitions if t.task_id == "q2"]
    assert "Question: What position did Shirley Temple hold?" in second[0].observation
    final = [t for t in result.transitions if t.role == "apex_final"][0]
    assert "Who portrayed Corliss Archer? -> Shirley Temple" in final.observation


def test_apex_hops_read_only_unseen_documents_and_stop_at_the_hop_limit(make_ctx):
    retriever = Numbered()
    policy = apex_policy(["<query>a</query>", "<query>b</query>", "<query>c</query>",
                          "<query>d</query>", "<query>e</query>", "<query>f</query>"])
    result = run(build_apex_graph(max_hops=3), QUESTION, make_ctx(policy, retriever=retriever, top_k=2))
    answers = [t for t in result.transitions if t.role == "apex_answer"]
    first = answers[0].observation
    # three hops, two new documents each: d0..d5, never a repeat
    assert all(f"[{i}] Title {i}:" in first for i in range(6))
    assert result.costs["retrieval_calls"] == 6  # 3 hops for each of the 2 sub-questions
    second = answers[1].observation  # the second sub-question only sees documents not read before
    assert "Title 0:" not in second and "[0] Title 6:" in second


def test_apex_sufficient_knowledge_skips_retrieval(make_ctx):
    policy = apex_policy(["<query>a</query>"], decisions="<decision>stop</decision>",
                         check="<decision>answer</decision>")
    result = run(build_apex_graph(), QUESTION, make_ctx(policy, retriever=Numbered()))
    assert result.costs["retrieval_calls"] == 1  # only the first sub-question searched
    assert [t.role for t in result.transitions if t.task_id == "q2"] == ["apex_check", "apex_answer"]


def test_apex_failed_plan_solves_the_question_as_one_step(make_ctx):
    policy = ScriptedPolicy({"apex_plan": "no plan", "apex_query": "<query>x</query>",
                             "apex_continue": "<decision>stop</decision>",
                             "apex_answer": "<answer>single</answer>"})
    result = run(build_apex_graph(), QUESTION, make_ctx(policy, retriever=Numbered()))
    assert result.answer == "single" and not result.transitions[0].format_ok
    assert "apex_final" not in [t.role for t in result.transitions]


# -- QAgent / Search-R1 ------------------------------------------------------------------------------
def test_qagent_multi_query_search_then_answer(make_ctx):
    retriever = Numbered()
    policy = ScriptedPolicy({"qagent": [
        "<plan>p</plan><search><query>one</query><query>two</query><query>three</query></search>",
        "<reflection>ok</reflection><answer>Chief of Protocol</answer>"]})
    result = run(build_qagent_graph(), QUESTION, make_ctx(policy, retriever=retriever, top_k=2))
    assert retriever.queries == ["one", "two", "three"] and result.answer == "Chief of Protocol"
    second = result.transitions[1]
    assert "<information>" in second.prompt_text and second.prompt_text.endswith("</information>\n")


def test_qagent_more_than_three_queries_is_a_violation_truncated_to_three(make_ctx):
    retriever = Numbered()
    policy = ScriptedPolicy({"qagent": ["<search>" + "".join(f"<query>q{i}</query>" for i in range(5))
                                        + "</search>", "<answer>x</answer>"]})
    result = run(build_qagent_graph(), QUESTION, make_ctx(policy, retriever=retriever))
    assert retriever.queries == ["q0", "q1", "q2"] and not result.transitions[0].format_ok


def test_qagent_submodule_hands_passages_to_a_frozen_generator(make_ctx):
    frozen = ChatModelPolicy(GenericFakeChatModel(messages=iter([AIMessage(content="<answer>gen</answer>")])),
                             name="frozen")
    agent = ScriptedPolicy({"qagent": ["<search><query>a</query><query>b</query></search>",
                                       "<answer>agent's own</answer>"]})
    ctx = RunContext(Team(agent, bindings={"AG": frozen}), Numbered(), Settings(top_k=3))
    result = run(build_qagent_graph(submodule=True), QUESTION, ctx)
    assert result.answer == "gen"  # the generator's answer counts, not the agent's
    generator = result.transitions[-1]
    assert generator.policy == "frozen" and not generator.trained


def test_search_r1_retries_invalid_steps_and_stops_at_the_budget(make_ctx):
    policy = ScriptedPolicy({"search_r1": ["<think>hmm</think>", "<search>q</search>", "<think>more</think>"]})
    result = run(build_search_r1_graph(), QUESTION, make_ctx(policy, retriever=Numbered(), max_rounds=3))
    # out of actions: one forced call continues inside <answer> and its text is the answer
    assert result.stop_reason == "max_turns" and result.answer == "more"
    assert [t.format_ok for t in result.transitions] == [False, True, False, True]
    forced = result.transitions[-1]
    assert forced.node_path == "search_r1/force_answer" and forced.role == "search_r1"
    assert forced.prompt_text.endswith("<answer>") and forced.turn == 4
    assert "My last step was not a valid action" in result.transitions[1].prompt_text


def test_search_r1_answer_ends_the_loop(make_ctx):
    policy = ScriptedPolicy({"search_r1": ["<search>q</search>", "<answer>done</answer>", "<search>x</search>"]})
    result = run(build_search_r1_graph(), QUESTION, make_ctx(policy, retriever=Numbered()))
    assert result.answer == "done" and result.costs["llm_calls"] == 2


# -- MAO-ARAG and baselines ----------------------------------------------------------------------------
def test_mao_arag_trains_only_the_planner():
    planner = ScriptedPolicy({"planner": "<workflow>QR,RA,AG</workflow>"}, name="planner")
    executors = ScriptedPolicy({"QR": "<query>q</query>", "AG": "<answer>a</answer>"}, name="frozen")
    ctx = RunContext(mao_arag_team(planner, executors), Numbered())
    result = run(build_mao_arag_graph(), QUESTION, ctx)
    assert {(t.role, t.trained) for t in result.transitions} == {("planner", True), ("QR", False),
                                                                 ("AG", False)}


@pytest.mark.parametrize("name,roles,retrievals", [
    ("llm_only", ["AG"], 0), ("vanilla_rag", ["AG"], 1), ("static_pipeline", ["QR", "DS", "AG"], 1)])
def test_fixed_baselines(make_ctx, name, roles, retrievals):
    ctx = make_ctx(plumbing_policy())
    result = run(build_graph(name), QUESTION, ctx)
    assert [t.role for t in result.transitions] == roles
    assert result.costs["retrieval_calls"] == retrievals and result.answer


@pytest.mark.parametrize("name", sorted(methods()))
def test_every_registered_graph_runs_on_the_plumbing_policy(make_ctx, name):
    result = run(build_graph(name), "Who portrayed Corliss Archer in the film Kiss and Tell?",
                 make_ctx(plumbing_policy(), max_rounds=3))
    assert result.answer and result.transitions
    assert result.costs["format_violations"] == 0  # the plumbing rules speak every format


def test_a_new_method_is_one_record_and_every_tool_finds_it(monkeypatch, tmp_path, capsys):
    """Adding a method touches one module (here: this test) plus the registry call."""
    from ragteam.graphs.apps.cli import main
    from ragteam.graphs.methods import registry
    from ragteam.graphs.methods.baselines import build_fixed_workflow_graph

    monkeypatch.setattr(registry, "_METHODS", dict(registry.methods()))
    registry.register(registry.Method(
        "rewrite_then_answer", "QR,RA,AG once", frozen_roles=("QR",),
        build=lambda: build_fixed_workflow_graph("QR,RA,AG", "rewrite_then_answer")))
    assert "rewrite_then_answer" in registry.methods()
    assert main(["run", "--graph", "rewrite_then_answer", "--policy", "scripted", "--json",
                 "Who is Ed Wood?"]) == 0
    assert json.loads(capsys.readouterr().out)["stop_reason"] == "solved"
    assert main(["eval", "--graph", "rewrite_then_answer", "--policy", "scripted", "--limit", "2",
                 "--out", str(tmp_path)]) == 0
    assert (tmp_path / "rewrite_then_answer" / "predictions.jsonl").exists()
    assert registry.make_reward(registry.get_method("rewrite_then_answer").default_reward).name == "jade"
    with pytest.raises(ValueError, match="already registered"):
        registry.register(registry.Method("jade", "another", build=lambda: None))
