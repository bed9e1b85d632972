"""Shared-prompt packing is exact: log-probs, values, the loss, every gradient and a whole PPO
step equal the unshared, padded computation (float32, within 1e-5), on a buffer with shared
prompts, different lengths and several roles."""

import copy
import random
from collections import defaultdict

import pytest
import torch

from tests.conftest import experience
from ragteam.trainers.algorithms.ppo import micro_batches, minibatches, ppo_loss
from ragteam.trainers.algorithms.settings import PPOSettings
from ragteam.trainers.learner.ppo_update import forward_items, update
from ragteam.trainers.experience import Experience
from ragteam.trainers.learner.batches import make_batch, pack_batch
from ragteam.trainers.learner.model import PolicyValueModel, load_lm
from ragteam.trainers.learner.optimizers import make_optimizer

TOL = 1e-5


def buffer(seed=0) -> list[Experience]:
    """Three GRPO-like groups: samples sharing a planner prompt, an answerer prompt shared by
    two samples, and singletons; prompts and completions of different lengths."""
    rng = random.Random(seed)
    prompts = {name: [rng.randrange(5, 900) for _ in range(n)] for name, n in
               (("plan_a", 23), ("plan_b", 17), ("ag_a", 31), ("ag_b", 12), ("solo", 9))}
    calls = [("plan_a", "planner"), ("plan_a", "planner"), ("plan_a", "planner"), ("ag_a", "AG"),
             ("ag_a", "AG"), ("plan_b", "planner"), ("plan_b", "planner"), ("ag_b", "AG"), ("solo", "QR")]
    items = []
    for i, (prompt, role) in enumerate(calls):
        completion = [rng.randrange(5, 900) for _ in range(rng.randrange(1, 9))]
        items.append(experience(prompts[prompt], completion, trajectory=f"t{i}", group=prompt, role=role,
                                old_logprobs=[-1.0 + 0.01 * j for j in range(len(completion))],
                                temperature=(0.7, 1.0, 0.0)[i % 3], reward=float(i % 2), advantage=0.5 - 0.2 * i,
                                returns=0.3 * i, value=0.1))
    return items


def buffer_with_instruction(seed=0) -> list[Experience]:
    """``buffer``'s calls, every prompt opening with one 40-token instruction (as a role's calls
    share their system prompt whatever the question)."""
    head = [random.Random(seed + 1).randrange(5, 900) for _ in range(40)]
    items = buffer(seed)
    for e in items:
        e.prompt_ids = head + e.prompt_ids
    return items


@pytest.fixture(scope="module", params=["sdpa", "eager"])
def model(request, tiny_model_dir):
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    lm = AutoModelForCausalLM.from_pretrained(tiny_model_dir, attn_implementation=request.param)
    return PolicyValueModel(lm).eval()


def test_packing_computes_each_shared_prompt_once_without_padding():
    items = buffer()
    packed = pack_batch([e.prompt_ids for e in items], [e.completion_ids for e in items], [1.0] * 9, 0)
    padded = make_batch([e.prompt_ids for e in items], [e.completion_ids for e in items], [1.0] * 9, 0)
    unique = {tuple(e.prompt_ids): len(e.prompt_ids) for e in items}
    assert packed.real_tokens == sum(unique.values()) + sum(len(e.completion_ids) for e in items)
    assert padded.real_tokens == sum(e.n_tokens for e in items) > packed.real_tokens
    # rows are no longer than the longest segment, and nearly full
    assert packed.input_ids.numel() < padded.input_ids.numel() / 2


def test_log_probs_and_values_equal_the_padded_computation(model):
    items = buffer()
    with torch.no_grad():
        _, shared_lp, shared_v = forward_items(model, items, 0, share_prompts=True)
        _, padded_lp, padded_v = forward_items(model, items, 0, share_prompts=False)
    assert shared_lp.shape == padded_lp.shape
    assert torch.allclose(shared_lp, padded_lp, atol=TOL) and torch.allclose(shared_v, padded_v, atol=TOL)


def test_a_common_instruction_is_computed_once_and_changes_no_output(model):
    """The calls' common prompt prefix is laid once per row: same log-probs and values as the
    padded computation, the prefix's tokens counted once."""
    items = buffer_with_instruction()
    packed = pack_batch([e.prompt_ids for e in items], [e.completion_ids for e in items], [1.0] * 9, 0)
    unique = {tuple(e.prompt_ids): len(e.prompt_ids) - 40 for e in items}
    assert packed.input_ids.shape[0] == 1
    assert packed.real_tokens == 40 + sum(unique.values()) + sum(len(e.completion_ids) for e in items)
    with torch.no_grad():
        _, shared_lp, shared_v = forward_items(model, items, 0, share_prompts=True)
        _, padded_lp, padded_v = forward_items(model, items, 0, share_prompts=False)
    assert torch.allclose(shared_lp, padded_lp, atol=TOL) and torch.allclose(shared_v, padded_v, atol=TOL)
    shared_loss, shared_grads = _loss_and_grads(model, items, True)
    padded_loss, padded_grads = _loss_and_grads(model, items, False)
    assert torch.allclose(shared_loss, padded_loss, atol=TOL)
    for name, grad in shared_grads.items():
        assert torch.allclose(grad, padded_grads[name], atol=TOL), name


def _loss_and_grads(model, items, share):
    model.zero_grad(set_to_none=True)
    stats = defaultdict(list)
    loss = ppo_loss(PPOSettings(kl_coef=0.0), stats)(items, forward_items(model, items, 0, share))
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def test_the_loss_and_every_gradient_equal_the_padded_computation(model):
    items = buffer()
    shared_loss, shared_grads = _loss_and_grads(model, items, True)
    padded_loss, padded_grads = _loss_and_grads(model, items, False)
    assert torch.allclose(shared_loss, padded_loss, atol=TOL)
    assert shared_grads.keys() == padded_grads.keys() and len(shared_grads) > 10
    for name, grad in shared_grads.items():
        assert torch.allclose(grad, padded_grads[name], atol=TOL), name


@pytest.mark.parametrize("lora", [None, {"r": 4, "lora_alpha": 8, "target_modules": "all-linear"}])
def test_one_ppo_step_gives_the_same_weights_shared_or_not(lora, tiny_model_dir):
    results = []
    for share in (True, False):
        torch.manual_seed(0)
        lm, _ = load_lm(tiny_model_dir, lora)
        # Adam's first step moves every weight by about lr whatever its gradient's size, so float
        # rounding in near-zero gradients shows up as ~lr·1e-3: lr 1e-3 keeps that under 1e-5
        optimizer = make_optimizer("torch", PolicyValueModel(lm), lr=1e-3, head_lr=1e-3)
        settings = PPOSettings(minibatch_size=4, micro_batch_tokens=120, epochs=2, share_prompts=share)
        stats = update(optimizer, buffer(), settings, pad_id=0, shuffle_seed=3)
        results.append(({n: p.detach().clone() for n, p in optimizer.module.named_parameters()}, stats))
    (shared, shared_stats), (padded, padded_stats) = results
    assert shared_stats["update_tokens"] == padded_stats["update_tokens"]  # counted alike
    assert shared_stats["update_computed_tokens"] < padded_stats["update_computed_tokens"]
    for name, weight in shared.items():
        assert torch.allclose(weight, padded[name], atol=TOL), name
    torch.manual_seed(0)
    initial = dict(PolicyValueModel(load_lm(tiny_model_dir, lora)[0]).named_parameters())
    assert sum(not torch.equal(w, initial[n]) for n, w in shared.items()) > 5  # the step did move weights


def test_micro_batches_keep_shared_prompts_together_and_count_real_tokens():
    items = buffer()
    groups = micro_batches(items, token_budget=60)
    for group in groups:
        prompts = {tuple(e.prompt_ids) for e in group}
        cost = sum(len(p) for p in prompts) + sum(len(e.completion_ids) for e in group)
        assert cost <= 60 or len(prompts) == 1  # a segment over the budget goes alone
        for prompt in prompts:  # every call with this prompt is in this micro-batch
            assert sum(tuple(e.prompt_ids) == prompt for e in group) == sum(
                tuple(e.prompt_ids) == prompt for e in items)
    assert sorted(id(e) for g in groups for e in g) == sorted(id(e) for e in items)


def test_mini_batches_never_split_a_shared_prompt():
    items = buffer()
    batches = minibatches(items, 4, random.Random(0))
    assert sorted(id(e) for b in batches for e in b) == sorted(id(e) for e in items)
    where = {}
    for number, batch in enumerate(batches):
        for e in batch:
            assert where.setdefault(tuple(e.prompt_ids), number) == number
    assert all(len(b) >= 4 for b in batches[:-1])


def test_the_value_pass_is_shared_too(model):
    from ragteam.trainers.learner.ppo_update import fill_values

    shared, padded = buffer(), buffer()
    fill_values(model, shared, 0, 200, share_prompts=True)
    fill_values(model, padded, 0, 200, share_prompts=False)
    assert [e.value for e in shared] == pytest.approx([e.value for e in padded], abs=TOL)


def test_bf16_weights_take_the_same_packed_path(tiny_model_dir):
    """bfloat16 rounds differently in every layout, so the bound is bf16's, not float32's."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    lm = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.bfloat16)
    model = PolicyValueModel(lm).eval()
    items = buffer()
    with torch.no_grad():
        _, shared, _ = forward_items(model, items, 0, share_prompts=True)
        _, padded, _ = forward_items(model, items, 0, share_prompts=False)
    assert torch.isfinite(shared).all() and torch.allclose(shared, padded, atol=5e-2)
