"""A planner that chooses among given workflows (``Settings.planning.choices``, ``nodes.choices``)."""

import asyncio
import math

import pytest
import torch

from ragteam.graphs.methods.jade import build_jade_graph
from ragteam.graphs.run import run
from ragteam.nodes.choices import choose_reply
from ragteam.nodes.context import ContextSpec, RunContext, Settings
from ragteam.nodes.policies.protocol import GenerationRequest
from ragteam.nodes.policies.scripted import ScriptedPolicy
from ragteam.nodes.roles.base import Observation
from ragteam.nodes.roles.jade import PLANNER, workflow_reply
from ragteam.nodes.team import Team
from ragteam.stores.demo import demo_questions, demo_retriever
from ragteam.trainers.weight_sync import completion_logprobs

MENU = [workflow_reply("RA,AG"), workflow_reply("QDS")]


class MenuScores(ScriptedPolicy):
    """A scripted team whose planner scores each reply by a fixed total log-prob."""

    def __init__(self, totals: dict[str, float], rules: dict):
        super().__init__(rules)
        self.totals = totals

    async def score_replies(self, request, replies):
        return [[self.totals[r.text]] for r in replies]


def planner_request(temperature: float) -> GenerationRequest:
    return PLANNER.request(Observation(query="Who is the mother of the friend of Ann?"), temperature=temperature)


@pytest.mark.parametrize("bad, reason", [(["RA,AG", "RA,AG"], "twice"), (["RA,AG", "XX"], "'XX'"),
                                         ("RA,AG", "list of workflow")])
def test_a_bad_menu_is_one_clear_error(bad, reason):
    with pytest.raises(ValueError, match=reason):
        Settings(planning={"choices": bad})


def test_a_training_run_asks_for_a_menu_only_where_replies_can_be_scored():
    from ragteam.trainers.config import TrainConfig

    assert TrainConfig(plan_choices=["RA,AG", "QDS"]).plan_choices == ["RA,AG", "QDS"]
    with pytest.raises(ValueError, match="only the hf"):
        TrainConfig(plan_choices=["RA,AG", "QDS"], sampler="vllm")
    with pytest.raises(ValueError, match="no planner that picks"):
        TrainConfig(graph="vanilla_rag", plan_choices=["RA,AG"])


def test_a_studio_context_takes_the_menu_as_a_json_list():
    spec = ContextSpec(planning={"choices": ["RA,AG", "QDS"]})
    assert spec.planning.choices == ("RA,AG", "QDS")


def test_greedy_takes_the_likeliest_and_sampling_follows_the_menus_softmax():
    policy = MenuScores({MENU[0]: math.log(0.3), MENU[1]: math.log(0.1)}, {})
    greedy = asyncio.run(choose_reply(policy, planner_request(0.0), MENU))
    assert greedy.text == MENU[0] and greedy.logprobs == [math.log(0.3)]
    torch.manual_seed(0)
    draws = [asyncio.run(choose_reply(policy, planner_request(1.0), MENU)).text for _ in range(2000)]
    share = draws.count(MENU[0]) / len(draws)
    assert abs(share - 0.75) < 0.04  # 0.3 / (0.3 + 0.1); the draw's sd is ~0.01


def test_a_policy_that_cannot_score_replies_is_named():
    with pytest.raises(TypeError, match="cannot score given replies"):
        asyncio.run(choose_reply(ScriptedPolicy({}), planner_request(1.0), MENU))


def test_a_run_plans_only_from_the_menu_and_traces_the_choice_as_sampled(make_ctx):
    rules = {"AG": "<answer>yes</answer>", "planner": "<workflow>AG</workflow>"}
    policy = MenuScores({MENU[0]: -0.1, MENU[1]: -9.0}, rules)
    ctx = RunContext(Team(policy), demo_retriever(), Settings(planning={"choices": ("RA,AG", "QDS")}))
    result = run(build_jade_graph(), demo_questions()[0]["question"], ctx)
    [plan] = [t for t in result.transitions if t.role == "planner"]
    assert result.topologies[0] == "RA,AG" and plan.completion_text == MENU[0]
    assert not plan.written and plan.logprobs == [-0.1]


@pytest.mark.slow
@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_the_hf_policy_scores_replies_as_a_forward_pass_on_their_ids(offline_policy, temperature):
    request = planner_request(temperature)
    replies = [offline_policy.encode_reply(request, text) for text in MENU + [workflow_reply("QR,RA,DS,AG")]]
    scored = asyncio.run(offline_policy.score_replies(request, replies))
    for reply, logprobs in zip(replies, scored):
        reply.logprobs = []
        expected = completion_logprobs(offline_policy.model, reply, temperature)
        assert len(logprobs) == len(reply.completion_ids)
        assert torch.allclose(torch.tensor(logprobs), expected, atol=2e-3)
    chosen = asyncio.run(choose_reply(offline_policy, planner_request(0.0), MENU))
    totals = [sum(row) for row in scored[:2]] if temperature == 0.0 else None
    if totals is not None:
        assert chosen.text == MENU[totals.index(max(totals))]


@pytest.mark.slow
def test_concurrent_scores_are_batched_and_equal_each_reply_scored_alone(offline_policy):
    """Calls that score at once share one batch (their instruction computed once); each reply's
    log-probs are still those of a forward pass on its own ids, whatever the question's length
    or the call's temperature."""
    questions = ["Who wrote Hamlet?", "Who is the mother of the friend of the brother of Ann Lee?",
                 "Which river flows through the capital of the country where the author of Faust was born?"]
    requests = [PLANNER.request(Observation(query=q), temperature=t, few_shot=False)
                for q, t in zip(questions, (1.0, 0.7, 0.0))]
    menus = [[offline_policy.encode_reply(r, text) for text in MENU] for r in requests]
    before = len(offline_policy.scorer.batch_sizes)

    async def together():
        return await asyncio.gather(*(offline_policy.score_replies(r, m) for r, m in zip(requests, menus)))

    scored = asyncio.run(together())
    assert offline_policy.scorer.batch_sizes[before:] == [3]
    for request, replies, rows in zip(requests, menus, scored):
        for reply, logprobs in zip(replies, rows):
            reply.logprobs = []
            expected = completion_logprobs(offline_policy.model, reply, request.sampling.temperature)
            assert torch.allclose(torch.tensor(logprobs), expected, atol=2e-3)
