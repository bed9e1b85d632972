import asyncio

import pytest

from ragteam.graphs.methods.jade import build_jade_graph
from ragteam.graphs.run import arun, arun_many, run
from ragteam.nodes.policies.scripted import ScriptedPolicy, user_content
from ragteam.nodes.written import WrittenReplies
from tests.test_compiler import BarrierRetriever

QUESTION = "What government position was held by the woman who portrayed Corliss Archer in the film Kiss and Tell?"


@pytest.fixture(scope="module")
def jade():
    return build_jade_graph()


def planner_by_question(table, default="<workflow>RA,AG</workflow>"):
    def respond(request):
        content = user_content(request)
        return next((reply for key, reply in table.items() if key in content), default)
    return respond


def test_simple_question_is_solved_in_one_round_without_summarizer(jade, make_ctx):
    ctx = make_ctx({"planner": "<workflow>R,DS,AG</workflow>", "DS": "<id>0</id>",
                    "AG": "<answer>Shirley Temple</answer>"})
    result = run(jade, "Who portrayed Corliss Archer in Kiss and Tell?", ctx)
    assert result.answer == "Shirley Temple"
    assert result.stop_reason == "solved"
    assert result.topologies == ["RA,DS,AG"]
    assert [t.role for t in result.transitions] == ["planner", "DS", "AG"]
    assert result.costs["turns"] == 1 and result.costs["retrieval_calls"] == 1
    assert result.costs["llm_calls"] == 3


def test_serial_decomposition_resolves_references_and_shares_earlier_answers(jade, make_ctx):
    policy = ScriptedPolicy({
        "planner": planner_by_question({"government position was held": "<workflow>QDS</workflow>"}),
        "QDS": "<q1>Who portrayed Corliss Archer in Kiss and Tell?</q1>\n<q2>What government position did #1 hold?</q2>",
        "AG": ["<answer>Shirley Temple</answer>", "<answer>Chief of Protocol</answer>"],
        "AS": "<answer>Chief of Protocol</answer>",
    })
    result = run(jade, QUESTION, make_ctx(policy))
    assert result.answer == "Chief of Protocol"
    assert [n["id"] for n in result.tasks] == ["0", "0.1", "0.2"]
    assert result.tasks[2]["resolved"] == "What government position did Shirley Temple hold?"
    assert result.tasks[0]["status"] == "decomposed"
    # the second child's answer generator saw the first child's answer (Select(s_t))
    second_ag = [t for t in result.transitions if t.role == "AG"][1]
    assert "Already established" in second_ag.observation and "Shirley Temple" in second_ag.observation
    summary = [t for t in result.transitions if t.role == "AS"]
    assert len(summary) == 1 and "Chief of Protocol" in summary[0].observation
    assert [r.round for r in result.rounds] == [1, 2, 3]
    assert result.costs["turns"] == 3


def test_parallel_children_fan_out_in_one_round(jade, make_ctx):
    policy = ScriptedPolicy({
        "planner": planner_by_question({"same nationality": "<workflow>QDP</workflow>"}),
        "QDP": "<q1>What is Scott Derrickson's nationality?</q1><q2>What is Ed Wood's nationality?</q2>",
        "AG": "<answer>American</answer>", "AS": "<answer>yes</answer>",
    })
    retriever = BarrierRetriever(parties=2)  # both children must retrieve at the same time
    result = run(jade, "Were Scott Derrickson and Ed Wood of the same nationality?",
                 make_ctx(policy, retriever=retriever))
    assert result.answer == "yes"
    assert result.costs["turns"] == 2
    assert sorted(r.task_id for r in result.rounds if r.round == 2) == ["0.1", "0.2"]
    assert {n["kind"] for n in result.tasks[1:]} == {"parallel"}


def test_round_budget_ends_the_run_and_summarizes_what_is_known(jade, make_ctx):
    policy = ScriptedPolicy({
        "planner": planner_by_question({"government position was held": "<workflow>QDS</workflow>"}),
        "QDS": "<q1>first?</q1><q2>second #1?</q2><q3>third #2?</q3>",
        "AG": ["<answer>one</answer>", "<answer>two</answer>"], "AS": "<answer>partial</answer>",
    })
    result = run(jade, QUESTION, make_ctx(policy, max_rounds=2))
    assert result.stop_reason == "round_budget"
    assert result.costs["turns"] == 2
    assert [n["status"] for n in result.tasks] == ["decomposed", "solved", "pending", "pending"]
    summary = [t for t in result.transitions if t.role == "AS"][0]
    assert "first? -> one" in summary.observation and "second" not in summary.observation
    assert result.answer == "partial"


@pytest.mark.parametrize("reply,reason", [
    ("I think we should search.", "no <workflow> tag"),
    ("<workflow>DS,AG</workflow>", "DS needs RA before it"),
    ("<workflow>QDS,AG</workflow>", "must stand alone"),
])
def test_planner_format_violation_falls_back_to_the_safe_workflow(jade, make_ctx, reply, reason):
    ctx = make_ctx({"planner": reply, "AG": "<answer>x</answer>"})
    result = run(jade, "Who is Shirley Temple?", ctx)
    assert result.topologies == ["RA,AG"]  # Settings.planning.fallback
    planner = result.transitions[0]
    assert planner.role == "planner" and not planner.format_ok and reason in planner.violation
    assert result.rounds[0].planner_ok is False
    assert result.costs["format_violations"] == 1 and result.answer == "x"


def test_without_a_fallback_an_unusable_plan_answers_nothing(jade, make_ctx):
    ctx = make_ctx({"planner": "<workflow>DS,AG</workflow>", "QDS": "no idea", "AG": "<answer>x</answer>"},
                   planning={"fallback": ""})
    result = run(jade, "Who is Shirley Temple?", ctx)
    assert [t.role for t in result.transitions] == ["planner"]  # nothing executed
    assert result.answer == "" and result.stop_reason == "solved" and result.topologies == ["(none)"]
    decomposing = make_ctx({"planner": "<workflow>QDS</workflow>", "QDS": "no idea"}, planning={"fallback": ""})
    failed = run(jade, QUESTION, decomposing)
    assert [t.role for t in failed.transitions] == ["planner", "QDS"] and failed.answer == ""


def test_decomposition_beyond_max_depth_is_a_violation(jade, make_ctx):
    policy = ScriptedPolicy({"planner": "<workflow>QDS</workflow>",
                             "QDS": "<q1>a?</q1><q2>b?</q2>", "AG": "<answer>x</answer>",
                             "AS": "<answer>done</answer>"})
    result = run(jade, QUESTION, make_ctx(policy, max_depth=1))
    child_plans = [t for t in result.transitions if t.role == "planner" and t.task_id != "0"]
    assert len(child_plans) == 2
    assert all(not t.format_ok and "not allowed at this depth" in t.violation for t in child_plans)
    assert result.stop_reason == "solved" and result.answer == "done"


def test_failed_decomposition_solves_the_node_directly(jade, make_ctx):
    ctx = make_ctx({"planner": "<workflow>QDS</workflow>", "QDS": "no idea",
                    "AG": "<answer>direct</answer>"})
    result = run(jade, QUESTION, ctx)
    assert result.answer == "direct" and result.costs["turns"] == 1
    assert result.rounds[0].fallback == "RA,AG"
    qds = [t for t in result.transitions if t.role == "QDS"][0]
    assert not qds.format_ok


def test_nested_decomposition_composes_the_intermediate_answer(jade, make_ctx):
    policy = ScriptedPolicy({
        "planner": planner_by_question({"government position was held": "<workflow>QDS</workflow>",
                                        "Who portrayed": "<workflow>QDP</workflow>"}),
        "QDS": "<q1>Who portrayed Corliss Archer?</q1><q2>What post did #1 hold?</q2>",
        "QDP": "<q1>Who starred in Kiss and Tell?</q1><q2>Who played Corliss Archer on radio?</q2>",
        "AG": "<answer>Shirley Temple</answer>",
        "AS": ["<answer>Shirley Temple</answer>", "<answer>Chief of Protocol</answer>"],
    })
    result = run(jade, QUESTION, make_ctx(policy, max_depth=2))
    ids = [n["id"] for n in result.tasks]
    assert ids == ["0", "0.1", "0.1.1", "0.1.2", "0.2"]
    composed = next(n for n in result.tasks if n["id"] == "0.1")
    assert composed["status"] == "solved" and composed["answer"] == "Shirley Temple"
    assert next(n for n in result.tasks if n["id"] == "0.2")["resolved"] == "What post did Shirley Temple hold?"
    assert result.answer == "Chief of Protocol"


def test_concurrent_runs_keep_separate_traces(jade, make_ctx):
    ctx = make_ctx({"planner": "<workflow>RA,AG</workflow>", "AG": "<answer>x</answer>"})
    questions = [f"question number {i}?" for i in range(8)]
    results = asyncio.run(arun_many(jade, questions, ctx))
    assert [r.question for r in results] == questions
    assert len({r.run_id for r in results}) == 8
    for r in results:
        assert len(r.transitions) == 2 and {t.run_id for t in r.transitions} == {r.run_id}
        assert r.question in r.transitions[0].observation


def test_every_llm_call_is_a_transition_with_consistent_steps(jade, make_ctx):
    policy = ScriptedPolicy({
        "planner": planner_by_question({"government position was held": "<workflow>QDS</workflow>"},
                                       default="<workflow>QR,RA,DS,AG</workflow>"),
        "QDS": "<q1>a?</q1><q2>b #1?</q2>", "QR": "<query>q</query>", "DS": "<id>0</id>",
        "AG": "<answer>x</answer>", "AS": "<answer>y</answer>"})
    result = asyncio.run(arun(jade, QUESTION, make_ctx(policy)))
    assert len(result.transitions) == len(policy.requests) == result.costs["llm_calls"]
    for round_ in {t.turn for t in result.transitions}:
        steps = [t.step for t in result.transitions if t.turn == round_]
        assert steps == list(range(len(steps)))


def test_a_sub_question_naming_a_listed_answer_retrieves_once_per_name_when_it_fans_out(jade, make_ctx):
    """Settings.serial.fan_out: "Who is the sister of #1?" with #1 = "Bo Dee, Cy Fox and Di Ray" searches
    each name alone (at most fan_out of them), the rankings interleaved by rank and each search
    counted; the answer generator still reads the question with every name; without fan_out (the
    default) one search holds the names joined."""
    from ragteam.stores.documents import Document

    def policy():
        return ScriptedPolicy({"QDS": "<q1>Who is the friend of Ann Lee?</q1>\n<q2>Who is the sister of #1?</q2>",
                               "AG": ["<answer>Bo Dee, Cy Fox and Di Ray</answer>", "<answer>Eve Dee</answer>"],
                               "AS": "<answer>Eve Dee</answer>"})

    class Recorder:
        def __init__(self):
            self.queries = []

        def search(self, query, k=5):
            self.queries.append(query)
            name = query.removeprefix("Who is the ").rstrip("?")
            return [Document(id=f"{name}/{rank}", title=name, text=f"{name} {rank}") for rank in range(k)]

    fanned = Recorder()
    result = run(jade, "Who is the sister of the friend of Ann Lee?",
                 make_ctx(policy(), retriever=fanned, written=WrittenReplies.fixed("QDS", "RA,AG"), top_k=2,
                          serial={"fan_out": 2}))
    assert result.answer == "Eve Dee"
    assert fanned.queries == ["Who is the friend of Ann Lee?", "Who is the sister of Bo Dee?",
                              "Who is the sister of Cy Fox?"]  # two names of three: fan_out=2
    assert result.costs["retrieval_calls"] == 3
    second_ag = [t for t in result.transitions if t.role == "AG"][1]
    assert "Who is the sister of Bo Dee, Cy Fox and Di Ray?" in second_ag.observation
    order = ("sister of Bo Dee 0", "sister of Cy Fox 0", "sister of Bo Dee 1", "sister of Cy Fox 1")
    positions = [second_ag.observation.find(text) for text in order]
    assert -1 not in positions and positions == sorted(positions)  # rank by rank across the names

    joined = Recorder()
    run(jade, "Who is the sister of the friend of Ann Lee?",
        make_ctx(policy(), retriever=joined, written=WrittenReplies.fixed("QDS", "RA,AG"), top_k=2))
    assert joined.queries == ["Who is the friend of Ann Lee?", "Who is the sister of Bo Dee, Cy Fox and Di Ray?"]


def test_a_scripted_policy_keeps_only_its_latest_requests():
    """A long run through the scripted stand-in does not keep every prompt it was asked."""
    import asyncio

    from ragteam.nodes.policies.protocol import GenerationRequest, SamplingParams
    from ragteam.nodes.policies.scripted import KEPT_REQUESTS, ScriptedPolicy

    policy = ScriptedPolicy({}, default=lambda request: "ok")
    asks = [GenerationRequest(({"role": "user", "content": f"q{i}"},), SamplingParams(4, 0.0, ()), role="AG")
            for i in range(KEPT_REQUESTS + 10)]
    asyncio.run(policy.generate(asks))
    assert len(policy.requests) == KEPT_REQUESTS and policy.requests[-1] is asks[-1]
