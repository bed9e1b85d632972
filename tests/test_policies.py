import asyncio
import time
import warnings

import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage

from ragteam.graphs.methods.jade import build_jade_graph
from ragteam.graphs.run import run
from ragteam.nodes.policies.batching import RequestCoalescer
from ragteam.nodes.policies.chat import ChatModelPolicy
from ragteam.nodes.context import RunContext
from ragteam.nodes.policies.protocol import (Generation, GenerationRequest, Policy, SamplingParams,
                                             exact_ids, written_reply)
from ragteam.nodes.policies.scripted import ScriptedPolicy, decode_byte_ids
from ragteam.nodes.team import Frozen, Team
from ragteam.stores.demo import demo_retriever


def request(text, role="AG", temperature=0.0, stop=()):
    return GenerationRequest(({"role": "user", "content": text},), SamplingParams(16, temperature, stop),
                             role=role)


def test_scripted_policy_ids_decode_to_the_exact_text():
    policy = ScriptedPolicy({"AG": "<answer>Zürich</answer> trailing"})
    [gen] = asyncio.run(policy.generate([request("Where? ü", stop=("</answer>",))]))
    assert gen.text == "<answer>Zürich</answer>"  # cut after the stop string, like a real backend
    assert decode_byte_ids(gen.prompt_ids + gen.completion_ids) == gen.prompt_text + gen.text
    assert len(gen.logprobs) == len(gen.completion_ids)
    assert isinstance(policy, Policy)


def test_scripted_sequences_advance_per_role_and_repeat_the_last():
    policy = ScriptedPolicy({"AG": ["a", "b"]})
    texts = [asyncio.run(policy.generate([request("q")]))[0].text for _ in range(3)]
    assert texts == ["a", "b", "b"]
    with pytest.raises(KeyError):
        asyncio.run(policy.generate([request("q", role="QR")]))


def test_coalescer_batches_concurrent_requests_and_groups_decoding_modes():
    seen_batches = []

    def run_batch(requests):
        seen_batches.append([r.messages[0]["content"] for r in requests])
        time.sleep(0.05)
        return [Generation(text=r.messages[0]["content"].upper()) for r in requests]

    coalescer = RequestCoalescer(run_batch, max_batch_size=4)

    async def main():
        greedy = [coalescer.submit([request(f"g{i}")]) for i in range(6)]
        sampled = [coalescer.submit([request(f"s{i}", temperature=0.7)]) for i in range(2)]
        return await asyncio.gather(*greedy, *sampled)

    results = asyncio.run(main())
    assert [r[0].text for r in results] == [f"G{i}" for i in range(6)] + ["S0", "S1"]
    assert sorted(len(b) for b in seen_batches) == [2, 2, 4]  # max size 4; modes never mix
    for batch in seen_batches:
        assert len({name[0] for name in batch}) == 1


def test_coalescer_serves_two_event_loops_at_once_each_in_its_own_batches():
    """A trainer's asynchronous rollouts (their own loop, in a thread) and an evaluation on the
    main thread share one policy: each loop's requests are batched apart and all are answered."""
    import threading

    seen_batches = []

    def run_batch(requests):
        seen_batches.append({r.messages[0]["content"][0] for r in requests})
        time.sleep(0.02)
        return [Generation(text=r.messages[0]["content"].upper()) for r in requests]

    coalescer = RequestCoalescer(run_batch, max_batch_size=4)

    async def many(prefix):
        return await asyncio.gather(*(coalescer.submit([request(f"{prefix}{i}")]) for i in range(10)))

    answers = {}
    background = threading.Thread(target=lambda: answers.update(b=asyncio.run(many("b"))))
    background.start()
    answers["m"] = asyncio.run(many("m"))
    background.join(timeout=30)
    for prefix in "bm":
        assert [r[0].text for r in answers[prefix]] == [f"{prefix.upper()}{i}" for i in range(10)]
    assert all(len(names) == 1 for names in seen_batches)  # never a batch of both loops' requests
    assert not coalescer._queues and not coalescer._workers  # both loops' entries gone with them


def test_coalescer_passes_backend_errors_to_every_waiter_and_recovers():
    calls = []

    def run_batch(requests):
        calls.append(len(requests))
        if len(calls) == 1:
            raise RuntimeError("backend down")
        return [Generation(text="ok") for _ in requests]

    coalescer = RequestCoalescer(run_batch)

    async def main():
        first = await asyncio.gather(coalescer.submit([request("a")]), coalescer.submit([request("b")]),
                                     return_exceptions=True)
        second = await coalescer.submit([request("c")])
        return first, second

    first, second = asyncio.run(main())
    assert all(isinstance(e, RuntimeError) for e in first)
    assert second[0].text == "ok"


def test_chat_model_adapter_serves_a_frozen_role():
    chat = GenericFakeChatModel(messages=iter([AIMessage(content="<answer>Paris</answer> extra")]))
    policy = ChatModelPolicy(chat)
    [gen] = asyncio.run(policy.generate([request("Capital of France?", stop=("</answer>",))]))
    assert gen.text == "<answer>Paris</answer>"
    assert policy.exact_ids is False and not gen.has_token_ids


def test_a_policy_class_that_still_sets_trainable_works_and_is_warned_once():
    """A user's own policy written before ``exact_ids`` had its name sets ``trainable``: read as
    ``exact_ids``, with one warning (per class) that names the new attribute."""
    class OldPolicy:
        name, trainable = "old", True

        def __init__(self):
            self.inner = ScriptedPolicy({"planner": "<workflow>RA,AG</workflow>",
                                         "AG": "<answer>x</answer>"})

        async def generate(self, requests):
            return await self.inner.generate(requests)

    ctx = RunContext(Team(OldPolicy()), demo_retriever())
    with pytest.warns(FutureWarning, match="OldPolicy.*exact_ids") as caught:
        result = run(build_jade_graph(), "Who is Shirley Temple?", ctx)
    assert [w.category for w in caught].count(FutureWarning) == 1
    assert result.transitions and all(t.trained for t in result.transitions)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the class was warned of already
        assert exact_ids(OldPolicy()) is True


def test_a_frozen_role_is_the_teams_and_keeps_its_policys_abilities():
    """The same exact-ids policy plays a trained role and a frozen one: frozen is the team's
    binding (``Frozen``), which passes everything else through (a written reply, exact ids)."""
    policy = ScriptedPolicy({"planner": "<workflow>RA,AG</workflow>", "AG": "<answer>x</answer>"})
    team = Team.with_frozen(policy, policy, ["AG"])
    assert team.trains("planner") and not team.trains("AG")
    frozen = team.policy_for("AG")
    assert isinstance(frozen, Frozen) and frozen.name == policy.name and exact_ids(frozen)
    written = written_reply(frozen, request("q"), "<answer>y</answer>")
    assert written.text == "<answer>y</answer>" and written.completion_ids
    chat = ChatModelPolicy(GenericFakeChatModel(messages=iter([])))  # no ids: the text alone
    chat_written = written_reply(Frozen(chat), request("q"), "y")
    assert chat_written.text == "y" and not chat_written.prompt_ids


def test_roles_bound_to_different_policies(make_ctx):
    shared = ScriptedPolicy({"planner": "<workflow>RA,AG</workflow>"}, name="shared")
    frozen = ChatModelPolicy(GenericFakeChatModel(messages=iter([AIMessage(content="<answer>x</answer>")])),
                             name="frozen-ag")
    ctx = RunContext(Team(shared, bindings={"AG": frozen}), demo_retriever())
    result = run(build_jade_graph(), "Who is Shirley Temple?", ctx)
    by_role = {t.role: t for t in result.transitions}
    assert by_role["planner"].policy == "shared" and by_role["planner"].trained
    assert by_role["AG"].policy == "frozen-ag" and not by_role["AG"].trained
    assert by_role["AG"].prompt_ids == [] and result.answer == "x"


def test_the_old_name_of_the_engine_error_still_imports_with_a_message():
    from ragteam.nodes.policies import protocol

    with pytest.warns(FutureWarning, match="BackendError is now EngineError"):
        old = protocol.BackendError
    assert old is protocol.EngineError
    with pytest.raises(AttributeError):
        protocol.NoSuchName  # noqa: B018
