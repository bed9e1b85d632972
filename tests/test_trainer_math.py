"""Advantages and PPO losses against values worked out by hand."""

import math

import pytest
import torch

from tests.conftest import experience
from ragteam.trainers.algorithms.advantages import (ADVANTAGE_ESTIMATORS, assign_advantages, gae, group_normalized,
                                             register_advantage, whiten)
from ragteam.trainers.algorithms.losses import (MAX_LOG_RATIO, POLICY_LOSSES, kl_to_reference, masked_mean,
                                        ppo_clip_loss, value_loss)
from ragteam.trainers.algorithms.ppo import micro_batches
from ragteam.trainers.algorithms.settings import PPOSettings


def test_gae_matches_hand_computation():
    # r = [0, -1, 1], V = [0.5, 0.2, 0.4], gamma = 0.9, lambda = 0.8
    # d2 = 1 - 0.4 = 0.6                      A2 = 0.6
    # d1 = -1 + 0.9*0.4 - 0.2 = -0.84         A1 = -0.84 + 0.72*0.6 = -0.408
    # d0 = 0 + 0.9*0.2 - 0.5 = -0.32          A0 = -0.32 + 0.72*(-0.408) = -0.61376
    advantages, returns = gae([0.0, -1.0, 1.0], [0.5, 0.2, 0.4], gamma=0.9, lam=0.8)
    assert advantages == pytest.approx([-0.61376, -0.408, 0.6])
    assert returns == pytest.approx([-0.11376, -0.208, 1.0])


def test_gae_with_lambda_one_and_zero_values_is_the_return():
    rewards = [-1.0, 0.0, 0.7]
    advantages, _ = gae(rewards, [0.0] * 3, gamma=1.0, lam=1.0)
    assert advantages == pytest.approx([-0.3, 0.7, 0.7])  # the undiscounted returns-to-go


def test_group_normalization_and_whitening():
    assert group_normalized([1.0, 0.0, 0.0, 1.0]) == pytest.approx([1, -1, -1, 1], abs=1e-5)
    assert whiten([2.0, 4.0]) == pytest.approx([-1.0, 1.0], abs=1e-6)


def test_clipped_policy_loss_by_hand():
    # one transition, two tokens; ratios e^0.5 = 1.6487 and e^-0.5 = 0.6065, advantage +1, clip 0.2
    # token 1: min(1.6487, 1.2) = 1.2; token 2: min(0.6065, 0.8) = 0.6065 -> loss = -(1.2+0.6065)/2
    logp = torch.tensor([[0.0, -1.0]])
    old = torch.tensor([[-0.5, -0.5]])
    loss, info = ppo_clip_loss(logp, old, torch.tensor([1.0]), torch.ones(1, 2), 0.2, 0.2)
    assert loss.item() == pytest.approx(-(1.2 + math.exp(-0.5)) / 2, abs=1e-6)
    assert info["clip_frac"] == pytest.approx(0.5)
    # negative advantage: min(-1.6487, -1.2) = -1.6487; min(-0.6065, -0.8) = -0.8
    loss, _ = ppo_clip_loss(logp, old, torch.tensor([-1.0]), torch.ones(1, 2), 0.2, 0.2)
    assert loss.item() == pytest.approx((math.exp(0.5) + 0.8) / 2, abs=1e-6)


def test_policy_loss_ignores_padding_and_weighs_transitions_equally():
    logp = torch.tensor([[-1.0, 0.0, 0.0], [-2.0, -2.0, -2.0]])
    old = logp.clone()
    mask = torch.tensor([[1.0, 0.0, 0.0], [1.0, 1.0, 1.0]])
    loss, _ = ppo_clip_loss(logp, old, torch.tensor([1.0, 3.0]), mask)
    assert loss.item() == pytest.approx(-(1.0 + 3.0) / 2)  # ratio 1: -mean advantage per transition
    loss, _ = ppo_clip_loss(logp, old, torch.tensor([1.0, 3.0]), mask, aggregation="per_token")
    assert loss.item() == pytest.approx(-(1.0 + 3 * 3.0) / 4)  # per token: the long call weighs 3x


def test_separate_clip_bounds_by_hand():
    # ratios e^0.5 = 1.6487 (above) and e^-0.5 = 0.6065 (below); clip_low 0.1, clip_high 0.3
    logp, old = torch.tensor([[0.0, -1.0]]), torch.tensor([[-0.5, -0.5]])
    loss, _ = ppo_clip_loss(logp, old, torch.tensor([1.0]), torch.ones(1, 2), clip_low=0.1, clip_high=0.3)
    assert loss.item() == pytest.approx(-(1.3 + math.exp(-0.5)) / 2, abs=1e-6)  # the upper bound: 1.3
    loss, _ = ppo_clip_loss(logp, old, torch.tensor([-1.0]), torch.ones(1, 2), clip_low=0.1, clip_high=0.3)
    assert loss.item() == pytest.approx((math.exp(0.5) + 0.9) / 2, abs=1e-6)  # the lower bound: 0.9
    assert PPOSettings(clip=0.2, clip_high=0.28).clip_bounds == (0.2, 0.28)


def test_the_log_ratio_is_clamped_before_exp():
    logp, old = torch.tensor([[0.0]]), torch.tensor([[-1000.0]])  # a ratio of e^1000 overflows
    loss, _ = ppo_clip_loss(logp, old, torch.tensor([-1.0]), torch.ones(1, 1))
    assert loss.item() == pytest.approx(math.exp(MAX_LOG_RATIO))  # finite, the clamped ratio


def test_dual_clip_bounds_a_risen_token_under_a_negative_advantage_by_hand():
    # ratios e^2 = 7.389 (risen far), e^0.5 = 1.6487, e^-0.5 = 0.6065; clip 0.2, cap 3
    logp, old = torch.tensor([[0.0, 0.0, -1.0]]), torch.tensor([[-2.0, -0.5, -0.5]])
    dual = POLICY_LOSSES["dual_clip"]
    # advantage -1: ppo_clip takes -7.389, -1.6487, -0.8; dual clipping floors the first at -3
    loss, info = dual(logp, old, torch.tensor([-1.0]), torch.ones(1, 3), 0.2, 0.2)
    assert loss.item() == pytest.approx((3.0 + math.exp(0.5) + 0.8) / 3, abs=1e-6)
    assert info["clip_frac"] == pytest.approx(2 / 3)  # the floor held on token 1, the clip on token 3
    plain, _ = ppo_clip_loss(logp, old, torch.tensor([-1.0]), torch.ones(1, 3), 0.2, 0.2)
    assert plain.item() == pytest.approx((math.exp(2.0) + math.exp(0.5) + 0.8) / 3, abs=1e-6)
    # the floored token passes no gradient; the others as in ppo_clip
    logp.requires_grad_(True)
    dual(logp, old, torch.tensor([-1.0]), torch.ones(1, 3), 0.2, 0.2)[0].backward()
    assert logp.grad[0, 0].item() == 0.0 and logp.grad[0, 1].item() == pytest.approx(math.exp(0.5) / 3)
    # a positive advantage: the same as ppo_clip
    for adv in (1.0, 0.5):
        a = dual(logp.detach(), old, torch.tensor([adv]), torch.ones(1, 3), 0.2, 0.2)[0]
        b = ppo_clip_loss(logp.detach(), old, torch.tensor([adv]), torch.ones(1, 3), 0.2, 0.2)[0]
        assert a.item() == pytest.approx(b.item())
    assert PPOSettings(policy_loss="dual_clip").policy_loss == "dual_clip"


def test_masked_mean_aggregations():
    values = torch.tensor([[1.0, 9.0, 9.0], [2.0, 4.0, 6.0]])
    mask = torch.tensor([[1.0, 0.0, 0.0], [1.0, 1.0, 1.0]])
    assert masked_mean(values, mask, "per_call").item() == pytest.approx((1.0 + 4.0) / 2)
    assert masked_mean(values, mask, "per_token").item() == pytest.approx((1 + 2 + 4 + 6) / 4)


def test_estimators_and_losses_are_registered_by_name():
    assert {"gae", "grpo"} <= set(ADVANTAGE_ESTIMATORS) and "ppo_clip" in POLICY_LOSSES
    with pytest.raises(ValueError, match="unknown advantage estimator 'nope'; known: gae, grpo"):
        PPOSettings(advantage="nope")
    with pytest.raises(ValueError, match="unknown policy loss 'nope'"):
        PPOSettings(policy_loss="nope")

    @register_advantage("constant_for_test")
    def constant(trajectories, settings):
        for steps in trajectories.values():
            for e in steps:
                e.advantage = e.returns = 0.25
    try:
        items = [_exp("a", 1.0), _exp("b", -1.0)]
        assign_advantages(items, PPOSettings(advantage="constant_for_test", whiten_advantages=False))
        assert [e.advantage for e in items] == [0.25, 0.25]
    finally:
        del ADVANTAGE_ESTIMATORS["constant_for_test"]


def test_clipped_value_loss_by_hand():
    # V = 1.0, V_old = 0.5, R = 2.0, clip 0.2: unclipped (1-2)^2 = 1, clipped V = 0.7 -> 1.69
    assert value_loss(torch.tensor([1.0]), torch.tensor([0.5]), torch.tensor([2.0]), 0.2).item() == pytest.approx(0.845)
    assert value_loss(torch.tensor([1.0]), torch.tensor([0.5]), torch.tensor([2.0]), None).item() == pytest.approx(0.5)


def test_k3_kl_is_zero_at_equality_and_positive_elsewhere():
    logp = torch.tensor([[-1.0, -2.0]])
    assert kl_to_reference(logp, logp, torch.ones(1, 2)).item() == pytest.approx(0.0)
    # r = 0.5: e^0.5 - 0.5 - 1 = 0.148721
    assert kl_to_reference(logp, logp + 0.5, torch.ones(1, 2)).item() == pytest.approx(0.148721, abs=1e-6)


def _exp(trajectory, reward, value=0.0, group="q", n=10):
    return experience([1] * n, [2], trajectory=trajectory, group=group, old_logprobs=[-1.0], reward=reward,
                      value=value)


def test_gae_runs_within_each_trajectory_only():
    items = [_exp("a", 0.0, 0.1), _exp("a", 1.0, 0.2), _exp("b", -1.0, 0.3)]
    assign_advantages(items, PPOSettings(gamma=1.0, lam=1.0, whiten_advantages=False))
    assert [e.advantage for e in items] == pytest.approx([0.9, 0.8, -1.3])
    assert [e.returns for e in items] == pytest.approx([1.0, 1.0, -1.0])


def test_local_rewards_reach_their_own_call_only():
    # a valid plan (t0), a sub-planner that broke its format (t1, local -1), a good answer (t2)
    items = [_exp("a", 0.0), _exp("a", 0.0), _exp("a", 1.0)]
    items[1].local_reward = -1.0
    assign_advantages(items, PPOSettings(gamma=1.0, lam=1.0, whiten_advantages=False))
    assert [e.advantage for e in items] == pytest.approx([1.0, 0.0, 1.0])
    assert [e.returns for e in items] == pytest.approx([1.0, 1.0, 1.0])  # critic: shared return


def _scored(trajectory, reward, outcome, group="q", role="AG"):
    return experience([1] * 4, [2], trajectory=trajectory, group=group, role=role, old_logprobs=[-1.0],
                      reward=reward, outcome=outcome)


def test_grpo_broadcasts_the_group_normalized_return():
    items = [_exp("a", 0.5, group="q"), _exp("a", 0.5, group="q"), _exp("b", 0.0, group="q"),
             _exp("c", 3.0, group="other")]
    for e in items:
        e.outcome = e.reward  # runs that scored differently
    assign_advantages(items, PPOSettings(advantage="grpo", group_std=True, whiten_advantages=False))
    assert [e.advantage for e in items] == pytest.approx([1.0, 1.0, -1.0, 0.0], abs=1e-5)


def test_a_group_differing_by_cost_alone_is_not_scaled_up_to_a_full_standing():
    """Every run scored F1 0; only JADE's cost differs (one retrieval −0.033, a decomposition
    −0.097). Divided by the group's std that became ±1, a 40-point win's standing, pushing the
    planner off decomposing exactly where nothing works yet. By default it stays a cost."""
    items = [_scored("r1", -0.033, 0.0), _scored("r2", -0.033, 0.0), _scored("d1", -0.097, 0.0),
             _scored("d2", -0.097, 0.0)]
    assign_advantages(items, PPOSettings(advantage="grpo", whiten_advantages=False))
    assert [e.advantage for e in items] == pytest.approx([0.032, 0.032, -0.032, -0.032], abs=1e-6)
    zero = [_scored(e.trajectory, e.reward, 0.0) for e in items]
    assign_advantages(zero, PPOSettings(advantage="grpo", tied_groups="zero", whiten_advantages=False))
    assert [e.advantage for e in zero] == [0.0] * 4
    # with the std division asked for, a tied group still keeps its cost scale
    scaled = [_scored(e.trajectory, e.reward, 0.0) for e in items]
    assign_advantages(scaled, PPOSettings(advantage="grpo", group_std=True, whiten_advantages=False))
    assert max(abs(e.advantage) for e in scaled) < 0.05


def test_dr_grpo_keeps_the_size_of_a_win():
    """Without the std division (the default), a group's standings are reward − mean: one win
    in four is +0.75, and a group of near-equal scores gets near-equal standings, not ±1."""
    items = [_scored("a", 1.0, 1.0), _scored("b", 0.0, 0.0), _scored("c", 0.0, 0.0), _scored("d", 0.0, 0.0)]
    assign_advantages(items, PPOSettings(advantage="grpo", whiten_advantages=False))
    assert [e.advantage for e in items] == pytest.approx([0.75, -0.25, -0.25, -0.25])
    close = [_scored("a", 0.51, 0.51), _scored("b", 0.49, 0.49)]
    assign_advantages(close, PPOSettings(advantage="grpo", whiten_advantages=False))
    assert [e.advantage for e in close] == pytest.approx([0.01, -0.01])


def test_the_deciding_call_is_weighted_apart_from_the_executors():
    """A run's first planner call chose its workflow; ``plan_weight`` scales its advantage alone."""
    items = [_scored("a", 0.0, 1.0, role="planner"), _scored("a", 1.0, 1.0), _scored("b", 0.0, 0.0, role="planner"),
             _scored("b", 0.0, 0.0)]
    assign_advantages(items, PPOSettings(advantage="grpo", plan_weight=4.0, whiten_advantages=False))
    assert [e.advantage for e in items] == pytest.approx([2.0, 0.5, -2.0, -0.5])


def test_written_replies_are_not_trained_as_if_sampled():
    """A forced workflow's planner reply was written, not sampled: by default it is compared in
    its group but left out of the update; ``importance`` weighs it by π_old(reply)."""
    from ragteam.trainers.algorithms.advantages import trained_calls, written_weight

    written = _scored("a", 1.0, 1.0, role="planner")
    written.written, written.old_logprobs = True, [-0.5, -0.2]
    items = [written, _scored("b", 0.0, 0.0, role="planner")]
    assign_advantages(items, PPOSettings(advantage="grpo", whiten_advantages=False))
    assert items[0].advantage == 0.0 and items[1].advantage == pytest.approx(-0.5)
    assert written_weight(written, "importance") == pytest.approx(math.exp(-0.7))
    assert written_weight(written, "sampled") == 1.0
    # a written reply that decided nothing (a sub-question's plan the setup wrote) is never trained
    assert written_weight(written, "sampled", deciding=False) == 0.0
    later = _scored("a", 1.0, 1.0, role="planner")
    later.written = True
    runs = [written, later, items[1]]
    assert trained_calls(runs, PPOSettings(written_replies="sampled")) == [written, items[1]]
    assert trained_calls(runs, PPOSettings()) == [items[1]]




def test_menu_weights_are_the_menus_probabilities_and_fade_once_the_choice_is_made():
    """``menu``: each written alternative's advantage becomes p_a (A_a − Σ p_b A_b), p the
    planner's probability over the group's written alternatives: they sum to 0, and a question's
    push on its two-way choice, p (1 − p) ΔA, vanishes as p → 1 on its best workflow."""

    def group(question, p_first, rewards):
        runs = []
        for name, p, reward in zip("xy", (p_first, 1 - p_first), rewards):
            call = _scored(f"{question}{name}", reward, reward, role="planner")
            call.group, call.written, call.old_logprobs = question, True, [math.log(p * 0.5)]  # half the mass elsewhere
            runs.append(call)
        return runs

    undecided, decided = group("q", 0.5, (1.0, 0.0)), group("r", 0.99, (1.0, 0.0))
    assign_advantages(undecided + decided, PPOSettings(advantage="grpo", whiten_advantages=False, written_replies="menu"))
    # p = 0.5: ±0.5 × 0.5; p = 0.99: the p-weighted baseline is 0.49 (the menu's mass is normalised away)
    assert [e.advantage for e in undecided] == pytest.approx([0.25, -0.25])
    assert [e.advantage for e in decided] == pytest.approx([0.99 * 0.01, -0.01 * 0.99])
    # in the logits of the two-way choice the push is p(a)(A_a − Σ p A) per question: p(1 − p)
    push = lambda runs, p: runs[0].advantage * (1 - p) - runs[1].advantage * p  # noqa: E731
    assert push(undecided, 0.5) == pytest.approx(0.5 * 0.5 * 1.0)
    assert push(decided, 0.99) == pytest.approx(0.99 * 0.01 * 1.0)  # p (1 − p) ΔA: faded


def test_the_batch_baseline_takes_off_the_push_every_question_shares():
    """Three questions push toward x (by 0.3, 0.3 and 0.1) and one toward y: with λ = 1 each
    workflow's mean deciding advantage over the step is removed, so the pushes sum to 0 per
    workflow and only their differences remain; λ = 0.5 keeps half the shared part; executors'
    calls are untouched."""
    def step(pushes):
        items = []
        for q, push in enumerate(pushes):
            for workflow, reward in (("x", push), ("y", -push)):
                plan = _scored(f"{q}{workflow}", reward, reward, group=f"q{q}", role="planner")
                executor = _scored(f"{q}{workflow}", 0.0, reward, group=f"q{q}")  # the run's reward: the plan's
                plan.workflow = executor.workflow = workflow
                items += [plan, executor]
        return items

    for share, shared in ((1.0, 0.0), (0.5, 0.075)):
        items = step([0.3, 0.3, 0.1, -0.1])
        assign_advantages(items, PPOSettings(advantage="grpo", whiten_advantages=False, batch_baseline=share))
        plans = [e for e in items if e.role == "planner" and e.workflow == "x"]
        assert sum(e.advantage for e in plans) / len(plans) == pytest.approx(shared)
        assert [e.advantage for e in plans] == pytest.approx([a - 0.15 * share for a in (0.3, 0.3, 0.1, -0.1)])
        executors = [e for e in items if e.role == "AG" and e.workflow == "x"]
        assert [e.advantage for e in executors] == pytest.approx([0.3, 0.3, 0.1, -0.1])
    # keep_unanimous: questions that disagree lose their mean as before; when every question
    # pushes x up (nothing pays, x is cheaper everywhere) the smallest push stays shared
    for pushes, kept in (([0.3, 0.3, 0.1, -0.1], 0.0), ([0.3, 0.3, 0.1, 0.2], 0.1)):
        items = step(pushes)
        assign_advantages(items, PPOSettings(advantage="grpo", whiten_advantages=False, batch_baseline=1.0,
                                             keep_unanimous=True))
        plans = [e for e in items if e.role == "planner" and e.workflow == "x"]
        assert sum(e.advantage for e in plans) / len(plans) == pytest.approx(kept)
        shared = sum(pushes) / 4 - kept
        assert [e.advantage for e in plans] == pytest.approx([a - shared for a in pushes])
        assert sum(e.advantage for e in items if e.role == "planner" and e.workflow == "y") / 4 == pytest.approx(-kept)
def test_micro_batches_respect_the_token_budget():
    items = [_exp("a", 0, n=n) for n in (100, 300, 120, 500, 90)]
    groups = micro_batches(items, token_budget=400)
    assert sorted(len(e.prompt_ids) for g in groups for e in g) == [90, 100, 120, 300, 500]
    for group in groups:
        assert len(group) == 1 or len(group) * max(e.n_tokens for e in group) <= 400


def test_kl_in_reward_subtracts_the_sequence_log_ratio():
    item = _exp("a", 1.0)
    item.old_logprobs, item.ref_logprobs = [-1.0, -2.0], [-1.5, -1.0]  # log-ratio sum 0.5 - 1.0 = -0.5
    assign_advantages([item], PPOSettings(kl_coef=0.2, kl_in="reward", whiten_advantages=False,
                                          gamma=1.0, lam=1.0))
    assert item.reward == pytest.approx(1.0 + 0.1)
    assert item.advantage == pytest.approx(1.1)


def test_the_algorithms_import_neither_the_learner_nor_the_config():
    """Algorithms are pure functions over experience and tensors (as in verl's core_algos): no
    import of the learner, the config, the loop or the backends, at any level (TYPE_CHECKING too)."""
    import ast
    from pathlib import Path

    import ragteam.trainers.algorithms

    forbidden = ("ragteam.trainers.learner", "ragteam.trainers.config", "ragteam.trainers.loop",
                 "ragteam.trainers.backends")
    found = []
    for path in sorted(Path(ragteam.trainers.algorithms.__file__).parent.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            found += [f"{path.name}:{node.lineno} {n}" for n in names
                      if n == "ragteam.trainers" or n.startswith(forbidden)]
    assert found == []


def test_the_weight_lag_counts_sampled_calls_against_the_learners_version():
    """``weight_lag``: how many versions behind the learner's weights each sampled call was;
    a written call was never sampled and counts for nothing."""
    from ragteam.trainers.learner.learner import weight_lag

    items = [experience([1], [2], weight_version=3), experience([1], [2], weight_version=2),
             experience([1], [2], weight_version=0, written=True)]
    assert weight_lag(items, 3) == {"weight_lag/mean": 0.5, "weight_lag/max": 1.0}
    assert weight_lag([items[2]], 3) == {}



def test_truncated_importance_weights_reweigh_sampled_tokens_only():
    """``ppo.behaviour_correction: tis``: each sampled token weighs min(π_old / π_behaviour, cap);
    a written call (never sampled) and padding weigh 1."""
    from ragteam.trainers.algorithms.ppo import tis_weights

    sampled = experience([1], [2, 3], behaviour_logprobs=[-1.0, -3.0])
    written = experience([1], [4, 5, 6], written=True)
    old = torch.tensor([[-1.5, -1.0, 0.0], [-0.2, -0.2, -0.2]])
    weights = tis_weights([sampled, written], old, cap=2.0)
    assert torch.allclose(weights, torch.tensor([[math.exp(-0.5), 2.0, 1.0], [1.0, 1.0, 1.0]]))


@pytest.mark.parametrize("policy_loss", ["ppo_clip", "dual_clip"])
def test_tis_with_no_mismatch_is_the_plain_loss_and_weighs_each_token_otherwise(policy_loss):
    """With π_old equal to the behaviour policy every weight is 1 and the loss is today's; with
    behaviour log-probs off, the loss is the plain loss over π_old with each token's surrogate
    scaled by its weight (checked against the weighted sum computed by hand)."""
    from collections import defaultdict

    from ragteam.trainers.algorithms.losses import POLICY_LOSSES
    from ragteam.trainers.algorithms.ppo import ppo_loss, tis_weights
    from ragteam.trainers.learner.model import make_batch

    old = [[-0.5, -0.6, -0.7], [-1.0, -1.1]]
    items = [experience([1, 2], [5, 6, 7], old_logprobs=old[0], behaviour_logprobs=old[0], advantage=0.8),
             experience([1], [8, 9], old_logprobs=old[1], behaviour_logprobs=old[1], advantage=-1.2)]
    batch = make_batch([e.prompt_ids for e in items], [e.completion_ids for e in items], [1.0, 1.0], pad_id=0)
    logprobs = torch.tensor([[-0.4, -0.9, -0.6], [-1.3, -0.8, 0.0]]) * batch.completion_mask

    def loss(correction, group):
        settings = PPOSettings(advantage="grpo", policy_loss=policy_loss, behaviour_correction=correction)
        return ppo_loss(settings, defaultdict(list))(group, (batch, logprobs, None)).item()

    assert loss("tis", items) == pytest.approx(loss("none", items), abs=1e-7)
    items[0].behaviour_logprobs, items[1].behaviour_logprobs = [-1.5, -0.2, -0.7], [-1.0, -3.0]
    padded_old = torch.tensor([old[0], old[1] + [0.0]])
    weights = tis_weights(items, padded_old, 2.0)
    by_hand, _ = POLICY_LOSSES[policy_loss](logprobs, padded_old, torch.tensor([0.8, -1.2]).unsqueeze(-1) * weights,
                                            batch.completion_mask)
    assert loss("tis", items) == pytest.approx(by_hand.item(), abs=1e-7)
    assert loss("tis", items) != pytest.approx(loss("none", items), abs=1e-4)


def test_the_sgd_rule_moves_each_weight_by_lr_times_its_gradient_where_adamw_scales_it():
    """``update_rule: sgd``: a gradient of 1e-3 on one weight and 1 on the other moves them
    1e-4 and 0.1 at lr 0.1; AdamW's first step moves both by ~lr (the small one scaled up)."""
    from ragteam.trainers.config import TrainConfig
    from ragteam.trainers.learner.optimizers import make_optimizer

    moved = {}
    for rule in ("sgd", "adamw"):
        layer = torch.nn.Linear(2, 1, bias=False)
        layer.weight.data = torch.tensor([[1.0, 2.0]])
        optimizer = make_optimizer("torch", layer, lr=0.1, max_grad_norm=100.0, rule=rule)
        (layer.weight * torch.tensor([[1e-3, 1.0]])).sum().backward()
        optimizer.step()
        moved[rule] = (torch.tensor([[1.0, 2.0]]) - layer.weight.data)[0].tolist()
    assert moved["sgd"] == pytest.approx([1e-4, 0.1], rel=1e-3)  # float32 weights
    assert moved["adamw"] == pytest.approx([0.1, 0.1], rel=1e-2)
    with pytest.raises(ValueError, match="update_rule: sgd"):
        TrainConfig(optimizer="deepspeed", update_rule="sgd")


@pytest.mark.parametrize("advantage, filled", [("grpo", [True, False]), ("gae", [True, True])])
def test_the_learner_computes_pi_old_only_for_the_calls_it_trains_unless_the_estimator_reads_values(
        tiny_model_dir, tmp_path, advantage, filled):
    """A written sub-question plan is compared but never trained: a critic-free estimator needs
    no forward of it (a gate step's calls are half such); GAE reads every call's value."""
    from ragteam.trainers.config import TrainConfig
    from ragteam.trainers.learner.learner import Learner

    config = TrainConfig(graph="jade", model=tiny_model_dir, out=str(tmp_path / "run"), optimizer="torch",
                         samples_per_question=2, ppo=PPOSettings(advantage=advantage, written_replies="sampled"))
    learner = Learner(config, tiny_model_dir, frozen_roles=[])
    written = [experience([5, 6, 7], [10, 11], trajectory="t1", role="planner", written=True),  # decides t1
               experience([5, 6, 7, 9], [10], trajectory="t1", role="planner", written=True)]  # a sub-question's
    learner.prepare([experience([5, 6, 7], [8, 9], trajectory="t0", role="planner", old_logprobs=[-1.0, -1.0],
                                reward=1.0),
                     experience([5, 6, 7, 8], [9], trajectory="t0", role="AG", old_logprobs=[-1.0]), *written])
    assert [len(e.old_logprobs) > 0 for e in written] == filled
