"""The learner and the HF policy on a GPU give what they give on the CPU (skipped without CUDA).

Run where a GPU is visible: ``pytest -m cuda``. Tolerances are float32 ones: the same maths
in a different kernel order (cuBLAS vs oneDNN) differs in the last bits, so losses and weights
after one AdamW step agree to ~1e-5, not exactly; TF32 is off (PyTorch's default for matmuls)."""

import asyncio
import copy

import pytest
import torch

from ragteam.nodes.policies.hf import HFPolicy
from ragteam.nodes.policies.protocol import GenerationRequest, SamplingParams
from ragteam.trainers.learner.optimizers import make_optimizer
from ragteam.trainers.learner.model import PolicyValueModel, load_lm, make_batch
from ragteam.trainers.algorithms.settings import PPOSettings
from ragteam.trainers.learner.ppo_update import update
from tests.conftest import experience

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device visible")]


def experiences(n):
    return [experience([10 + i + j for j in range(7 + i)], [200 + i + j for j in range(4)], trajectory=f"t{i % 2}",
                       role=("planner", "AG")[i % 2], old_logprobs=[-5.0] * 4, reward=float(i),
                       advantage=1.0 - i, returns=0.5)
            for i in range(n)]


def test_a_ppo_update_on_cuda_equals_the_cpu_one(tiny_model_dir):
    lm, tokenizer = load_lm(tiny_model_dir)
    base = PolicyValueModel(lm)
    items = experiences(4)
    results = {}
    for device in ("cpu", "cuda"):
        model = copy.deepcopy(base).to(device)
        engine = make_optimizer("torch", model, lr=1e-3, head_lr=1e-3, max_grad_norm=1.0)
        stats = update(engine, items, PPOSettings(minibatch_size=4), tokenizer.pad_token_id, shuffle_seed=0)
        results[device] = ({n: p.detach().cpu() for n, p in engine.module.named_parameters()}, stats)
    (cpu_params, cpu_stats), (gpu_params, gpu_stats) = results["cpu"], results["cuda"]
    assert gpu_stats["policy_loss"] == pytest.approx(cpu_stats["policy_loss"], abs=1e-5)
    assert gpu_stats["grad_norm"] == pytest.approx(cpu_stats["grad_norm"], rel=1e-4)
    for name, value in cpu_params.items():
        assert torch.allclose(gpu_params[name], value, atol=1e-5), name


def test_the_hf_policy_decodes_on_cuda_with_log_probs_the_cpu_learner_reproduces(tiny_model_dir):
    lm, tokenizer = load_lm(tiny_model_dir, device="cuda")
    policy = HFPolicy(lm, tokenizer, name="gpu")
    request = GenerationRequest(({"role": "user", "content": "Who wrote Hamlet?"},),
                                SamplingParams(12, 0.0, ()), role="AG")
    [generation] = asyncio.run(policy.generate([request]))
    assert len(generation.completion_ids) == len(generation.logprobs) > 0
    cpu_lm, _ = load_lm(tiny_model_dir)
    batch = make_batch([generation.prompt_ids], [generation.completion_ids], [0.0], tokenizer.pad_token_id)
    with torch.no_grad():
        logprobs, _ = PolicyValueModel(cpu_lm).eval()(batch)
    n = len(generation.completion_ids)
    assert torch.allclose(logprobs[0, :n], torch.tensor(generation.logprobs), atol=1e-3)


def test_bf16_learner_takes_a_finite_step_on_cuda(tiny_model_dir):
    lm, tokenizer = load_lm(tiny_model_dir, device="cuda", bf16=True)
    assert next(lm.parameters()).dtype == torch.bfloat16
    engine = make_optimizer("torch", PolicyValueModel(lm), lr=1e-3, head_lr=1e-3, max_grad_norm=1.0)
    items = experiences(2)
    stats = update(engine, items, PPOSettings(minibatch_size=2), tokenizer.pad_token_id, shuffle_seed=0)
    assert all(torch.isfinite(torch.tensor(v)) for v in stats.values())
