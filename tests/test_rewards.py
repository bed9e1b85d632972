"""Reward schemes on constructed traces."""

import pytest

from ragteam.graphs.run import RunResult
from ragteam.nodes.tracing import Transition
from ragteam.stores.datasets import QAExample
from ragteam.trainers.experience import to_experiences
from ragteam.graphs.methods.apex import SeprReward, sepr, sentence_similarity
from ragteam.graphs.methods.jade import JadeReward
from ragteam.graphs.methods.m_ask import MAskReward
from ragteam.graphs.methods.mao_arag import MaoAragReward, turn_cost
from ragteam.graphs.methods.search_loop import QAgentReward
from ragteam.nodes.topology import parse_topology


def mao_turn_cost(workflow: str, n_subquestions: int) -> float:
    return turn_cost(parse_topology(workflow), n_subquestions)

EXAMPLE = QAExample(id="q1", question="Who wrote Dracula?", golds=("Bram Stoker",))


def call(role, round_, step, action=None, ok=True, prompt="", trained=True, task="0"):
    return Transition(
        run_id="r", turn=round_, step=step, role=role, node_path=f"{task}/{role}", task_id=task,
        observation="", prompt_text=prompt, completion_text="x", prompt_ids=[1, 2], completion_ids=[3],
        logprobs=[-0.5], action=action, format_ok=ok, violation="" if ok else "bad", policy="p",
        trained=trained, prompt_tokens=2, completion_tokens=1, latency_s=0.0)


def result(transitions, answer, rounds=1, retrievals=1):
    return RunResult(question=EXAMPLE.question, answer=answer, stop_reason="answered", rounds=[],
                     tasks=[], costs={"turns": rounds, "retrieval_calls": retrievals},
                     transitions=transitions)


def test_jade_global_reward_on_terminal_step_and_penalty_on_the_offender_only():
    calls = [call("planner", 1, 0, ok=False), call("AG", 1, 1, "Stoker"), call("AS", 2, 0, "Bram Stoker")]
    outcome = JadeReward(alpha=0.3, beta=0.6)(result(calls, "Bram Stoker", rounds=2, retrievals=6), EXAMPLE)
    # F1 1 - (0.3*2/3 + 0.6*min(6/3, 1)) = 1 - 0.2 - 0.6 = 0.2 on the last call (shared);
    # -1 on the planner only, as its own local reward
    assert outcome.rewards == pytest.approx([0.0, 0.0, 0.2])
    assert outcome.local == [-1.0, 0.0, 0.0]
    assert outcome.total == pytest.approx(-0.8)
    assert outcome.scores["f1"] == 1.0


def test_jade_terminal_is_the_last_round_and_step_not_the_last_recorded():
    calls = [call("AG", 2, 0, "x"), call("planner", 1, 0)]  # recorded out of order (parallel siblings)
    outcome = JadeReward(alpha=0, beta=0)(result(calls, "Bram Stoker"), EXAMPLE)
    assert outcome.rewards == [1.0, 0.0]


def test_mao_arag_turn_costs_follow_the_papers_scaling():
    assert mao_turn_cost("QR,RA,DS,AG", 0) == pytest.approx((0.88 + 2.08 + 1.58) / 6.02 + 0 + 1)
    assert mao_turn_cost("QDS", 3) == pytest.approx(0.91 / 6.02 + 0.75)
    assert mao_turn_cost("QDP", 3) == pytest.approx(1.00 / 6.02 + 0.25)
    assert mao_turn_cost("AG", 0) == pytest.approx(1.58 / 6.02)


def test_mao_arag_rewards_planner_turns_only():
    calls = [call("planner", 1, 0, "QDS"), call("QDS", 1, 1, ["a", "b"], trained=False),
             call("planner", 2, 0, "RA,AG", task="0.1"), call("AG", 2, 1, "Bram Stoker", trained=False),
             call("planner", 3, 0, None, ok=False, task="0.2")]
    outcome = MaoAragReward(alpha=0.1)(result(calls, "Bram Stoker"), EXAMPLE)
    assert outcome.rewards[1] == outcome.rewards[3] == 0.0
    assert outcome.rewards[0] == pytest.approx(1 - 0.1 * (0.91 / 6.02 + 0.5))
    assert outcome.rewards[2] == pytest.approx(1 - 0.1 * ((1.58) / 6.02 + 1))
    assert outcome.rewards[4] == pytest.approx(1 - 1.0)


def test_mask_turn_level_delta_f1_sequence():
    calls = [call("m_ask_plan", 0, 0, {"predicted": "Oscar Wilde"}),
             call("m_ask_search", 1, 0, {"search": "Dracula author"}), call("m_ask_summary", 1, 1, "ev"),
             call("m_ask_update", 1, 2, {"op": "add"}), call("m_ask_answer", 1, 3, "Stoker"),
             call("m_ask_search", 2, 0, {"search": "Stoker first name"}), call("m_ask_summary", 2, 1, "ev"),
             call("m_ask_update", 2, 2, {"op": "add"}), call("m_ask_answer", 2, 3, "Bram Stoker"),
             call("m_ask_search", 3, 0, {"end": True}), call("m_ask_answer", 3, 0, "Bram Stoker")]
    outcome = MAskReward()(result(calls, "Bram Stoker"), EXAMPLE)
    f1_stoker = 2 * 1.0 * 0.5 / 1.5
    assert outcome.rewards == pytest.approx([0.0, f1_stoker, f1_stoker, f1_stoker, f1_stoker,
                                             1 - f1_stoker, 1 - f1_stoker, 1 - f1_stoker, 1.0,
                                             0.0, 1.0])


def test_mask_refuses_traces_without_per_turn_answers():
    calls = [call("m_ask_plan", 0, 0, {"predicted": "x"}), call("m_ask_summary", 1, 1, "ev")]
    with pytest.raises(ValueError, match="answer_every_turn"):
        MAskReward()(result(calls, "x"), EXAMPLE)


def test_sepr_matches_one_to_one_with_a_threshold():
    table = {("a", "A"): 0.9, ("a", "B"): 0.8, ("b", "A"): 0.85, ("b", "B"): 0.2, ("c", "A"): 0.1, ("c", "B"): 0.1}
    similarity = lambda left, right: [[table[(x, y)] for y in right] for x in left]  # noqa: E731
    # Hungarian picks a-B (0.8) + b-A (0.85) over a-A alone: 2 matched, P = 2/3, R = 1
    assert sepr(["a", "b", "c"], ["A", "B"], similarity, threshold=0.7) == pytest.approx(0.8)
    # the same assignment with a threshold above 0.8 keeps one pair: P = 1/3, R = 1/2 -> 0.4
    assert sepr(["a", "b", "c"], ["A", "B"], similarity, threshold=0.82) == pytest.approx(0.4)
    assert sepr([], ["A"], similarity, 0.5) == 0.0


def test_sepr_with_the_sentence_transformer_is_order_and_paraphrase_robust():
    gold = ["Who directed the film Jaws?", "When was that director born?"]
    example = QAExample(id="q2", question="When was the director of Jaws born?", golds=("1946",),
                        metadata={"decomposition": gold})
    paraphrased = ["What is the birth date of the director?", "Which person directed Jaws?"]
    unrelated = ["What is the capital of Peru?"]
    reward = SeprReward(threshold=0.6, similarity=sentence_similarity)
    good = reward(result([call("apex_plan", 0, 0, paraphrased)], "1946"), example)
    bad = reward(result([call("apex_plan", 0, 0, unrelated)], "1946"), example)
    assert good.rewards[0] == pytest.approx(1.0)
    assert bad.rewards[0] == 0.0
    with pytest.raises(ValueError, match="gold decomposition"):
        reward(result([call("apex_plan", 0, 0, unrelated)], "1946"), EXAMPLE)


def test_qagent_reward_is_relaxed_em_plus_half_hit_on_the_agents_last_call():
    info = "<information>\nDoc 1 (Dracula): Dracula is an 1897 novel by Bram Stoker.\n</information>"
    calls = [call("qagent", 1, 0, {"search": ["dracula"]}),
             call("qagent", 2, 0, {"answer": "x"}, prompt="Question ..." + info),
             call("AG", 3, 0, "the writer Bram Stoker", trained=False)]
    outcome = QAgentReward()(result(calls, "the writer Bram Stoker"), EXAMPLE)
    assert outcome.rewards == [0.0, 1.5, 0.0]
    miss = QAgentReward()(result(calls[:1] + [call("AG", 3, 0, "Wilde")], "Wilde"), EXAMPLE)
    assert miss.rewards == [0.0, 0.0]


def test_frozen_calls_pass_their_reward_to_the_learning_call_before_them():
    calls = [call("planner", 1, 0), call("AG", 1, 1, trained=False), call("planner", 2, 0),
             call("AS", 3, 0, trained=False)]
    items = to_experiences(calls, [0.1, 0.2, 0.3, 0.4], group="q1", local=[-1.0, -1.0, 0.0, -1.0])
    assert [e.role for e in items] == ["planner", "planner"]
    assert [e.reward for e in items] == pytest.approx([0.3, 0.7])
    assert [e.local_reward for e in items] == [-1.0, 0.0]  # frozen calls' penalties are not moved
    only_ag = to_experiences([call("planner", 1, 0), call("AG", 1, 1)], [1.0, 2.0], "q", train_roles={"AG"})
    assert [(e.role, e.reward) for e in only_ag] == [("AG", 3.0)]
