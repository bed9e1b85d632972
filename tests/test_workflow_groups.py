"""GRPO groups that compare workflows: the planner's reply for the whole question written as a
given workflow (``Settings.written.plan``), traced as a written call, grouped with the team's
own runs of the question, and trained with π_old's log-probs filled in by the learner."""

import asyncio

import pytest
import torch

from ragteam.graphs.methods import get_method
from ragteam.graphs.run import RunFailed, arun
from ragteam.nodes.policies.scripted import ScriptedPolicy, byte_ids
from ragteam.stores.datasets import QAExample
from tests.conftest import experience
from ragteam.trainers.algorithms.advantages import assign_advantages
from ragteam.trainers.learner.ppo_update import fill_values, forward_items
from ragteam.trainers.config import PPOSettings, TrainConfig
from ragteam.trainers.experience import to_experiences
from ragteam.trainers.rollout import collect, score_rollouts

TEAM = {"planner": "<workflow>RA,AG</workflow>",
        "QDS": "<q1>Who directed Jaws?</q1>\n<q2>When was #1 born?</q2>",
        "DS": "<id>0</id>", "AG": "<answer>Steven Spielberg</answer>", "AS": "<answer>1946</answer>"}


def test_a_forced_workflow_writes_the_root_plan_and_leaves_the_sub_questions_to_the_planner(make_ctx):
    ctx = make_ctx(dict(TEAM), temperature=0.7, written={"plan": "QDS"})
    result = asyncio.run(arun(get_method("jade").graph(), "When was the director of Jaws born?", ctx))
    plans = [t for t in result.transitions if t.role == "planner"]
    root, children = plans[0], plans[1:]
    assert root.task_id == "0" and root.written and root.logprobs == []
    assert root.completion_ids == byte_ids("<workflow>QDS</workflow>") and root.format_ok
    assert root.action == "QDS" and root.temperature == 0.7
    # the decomposition ran, and each sub-question's plan was the planner's own (sampled) reply
    assert len(children) == 2 and all(not t.written and t.action == "RA,AG" for t in children)
    assert result.topologies[0] == "QDS" and [t.role for t in result.transitions].count("AS") == 1


def test_without_a_forced_workflow_every_plan_is_sampled(make_ctx):
    ctx = make_ctx(dict(TEAM), temperature=0.7)
    result = asyncio.run(arun(get_method("jade").graph(), "Who directed Jaws?", ctx))
    assert [t.written for t in result.transitions] == [False, False]
    assert result.topologies == ["RA,AG"]


def test_a_policy_without_encode_reply_is_refused_by_name(make_ctx):
    class Bare:
        name, exact_ids = "bare", True

        async def generate(self, requests):
            return await ScriptedPolicy(TEAM).generate(requests)

    ctx = make_ctx(Bare(), written={"plan": "QDS"})
    with pytest.raises(RunFailed, match="bare.*cannot encode a written reply") as failed:
        asyncio.run(arun(get_method("jade").graph(), "Who directed Jaws?", ctx))
    assert isinstance(failed.value.error, TypeError)


def test_a_group_holds_the_teams_own_runs_and_one_run_per_forced_workflow(make_ctx):
    ctx = make_ctx(dict(TEAM), temperature=0.7)
    examples = [QAExample("q1", "Who directed Jaws?", ("Steven Spielberg",), {"type": "comparison"}),
                QAExample("q2", "When was the director of Jaws born?", ("1946",), {"type": "bridge"})]
    rollouts, failed = asyncio.run(collect(get_method("jade").training_graph(), examples, ctx, samples=2,
                                           concurrency=4, tag="s1", forced_workflows=["RA,DS,AG", "QDS"],
                                           force=get_method("jade").workflow_choice.force))
    assert not failed
    assert [(r.example.id, r.forced_workflow) for r in rollouts] == [
        ("q1", ""), ("q1", ""), ("q1", "RA,DS,AG"), ("q1", "QDS"),
        ("q2", ""), ("q2", ""), ("q2", "RA,DS,AG"), ("q2", "QDS")]
    assert [r.result.topologies[0] for r in rollouts[:4]] == ["RA,AG", "RA,AG", "RA,DS,AG", "QDS"]
    assert len({r.result.run_id for r in rollouts}) == 8  # every run its own trajectory

    from ragteam.graphs.methods import make_reward
    reward = make_reward("jade", get_method("jade"))
    items, metrics, _ = score_rollouts(rollouts, reward, None, rollout_s=1.0)
    # the team's own figures come from its own runs; each forced workflow has its own
    assert metrics["topology/RA,AG"] == 1.0
    assert metrics["root/comparison/RA,AG"] == metrics["root/bridge/RA,AG"] == 2  # own runs by type
    assert metrics["f1"] == pytest.approx(0.5)  # q1 right, q2 answered with the director's name
    assert metrics["forced/QDS/f1"] == pytest.approx(0.5)  # AS says 1946 on both
    assert {"forced/RA,DS,AG/reward", "forced/QDS/reward"} <= set(metrics)
    # GRPO normalizes over the whole group: on q2 the forced QDS run is the only right one
    assign_advantages(items, PPOSettings(advantage="grpo", whiten_advantages=False))
    q2 = {e.trajectory: e.advantage for e in items if e.group == "q2"}
    assert q2["s1-q2-3"] > 0 and all(a < 0 for run, a in q2.items() if run != "s1-q2-3")


def test_forced_samples_give_each_forced_workflow_several_runs_that_carry_their_workflow(make_ctx):
    ctx = make_ctx(dict(TEAM), temperature=0.7)
    examples = [QAExample("q1", "When was the director of Jaws born?", ("1946",), {"type": "bridge"})]
    rollouts, failed = asyncio.run(collect(get_method("jade").training_graph(), examples, ctx, samples=1,
                                           concurrency=4, tag="s1", forced_workflows=["RA,AG", "QDS"],
                                           force=get_method("jade").workflow_choice.force, forced_samples=2))
    assert not failed
    assert [r.forced_workflow for r in rollouts] == ["", "RA,AG", "RA,AG", "QDS", "QDS"]
    assert len({r.result.run_id for r in rollouts}) == 5

    from ragteam.graphs.methods import make_reward
    items, _, _ = score_rollouts(rollouts, make_reward("jade", get_method("jade")), None, rollout_s=1.0)
    # the question's workflow: a decomposition's runs also plan each sub-question in a round
    assert [r.result.topologies for r in rollouts[3:]] == [["QDS", "RA,AG", "RA,AG"]] * 2
    workflows = {e.trajectory: e.workflow for e in items}
    assert workflows == {"s1-q1-0": "RA,AG", "s1-q1-1": "RA,AG", "s1-q1-2": "RA,AG",
                         "s1-q1-3": "QDS", "s1-q1-4": "QDS"}


def test_grpo_by_workflow_ranks_plans_among_all_runs_and_executions_within_their_workflow():
    # one question, three runs: one retrieval (reward 1), and two decompositions (0 and 0.5),
    # whose sub-questions are planned in rounds of their own (one here, two there)
    runs = {"r1": ("RA,AG", [("planner", 0.0), ("AG", 1.0)]),
            "r2": ("QDS", [("planner", 0.0), ("QDS", 0.0), ("sub-planner", 0.0), ("AG", 0.0)]),
            "r3": ("QDS", [("planner", 0.0), ("QDS", 0.0), ("sub-planner", 0.0), ("sub-planner", 0.0),
                           ("AG", 0.5)])}

    labels = [(run, label) for run, (_, calls) in runs.items() for label, _ in calls]

    def items():  # a sub-question's plan is the planner's call too, later in its run
        return [experience([1, 2], [3], trajectory=run, role=label.removeprefix("sub-"), reward=reward,
                           workflow=workflow, outcome=sum(r for _, r in calls))
                for run, (workflow, calls) in runs.items() for label, reward in calls]

    by_workflow = items()
    assign_advantages(by_workflow, PPOSettings(advantage="grpo_by_workflow", group_std=True,
                                               whiten_advantages=False))
    got = {label: round(e.advantage, 4) for label, e in zip(labels, by_workflow)}
    plan = 0.5 / (1 / 6) ** 0.5  # totals 1, 0, 0.5: mean 0.5, std √(1/6)
    assert got == {("r1", "planner"): round(plan, 4), ("r1", "AG"): 0.0,  # alone in its workflow
                   ("r2", "planner"): round(-plan, 4), ("r2", "QDS"): -1.0, ("r2", "sub-planner"): -1.0,
                   ("r2", "AG"): -1.0,
                   ("r3", "planner"): 0.0, ("r3", "QDS"): 1.0, ("r3", "sub-planner"): 1.0, ("r3", "AG"): 1.0}
    # plain GRPO gives the better decomposition its run's standing among all plans: nothing
    plain = items()
    assign_advantages(plain, PPOSettings(advantage="grpo", group_std=True, whiten_advantages=False))
    assert {round(e.advantage, 4) for e in plain if e.trajectory == "r3"} == {0.0}
    assert {round(e.advantage, 4) for e in plain if e.trajectory == "r2"} == {round(-plan, 4)}


def test_the_learner_fills_pi_old_for_a_written_call_and_keeps_sampled_log_probs(tiny_model_dir):
    from ragteam.trainers.learner.model import PolicyValueModel, load_lm

    lm, tokenizer = load_lm(tiny_model_dir)
    model = PolicyValueModel(lm).eval()
    written = experience(range(20, 40), [300, 301, 302], role="planner", temperature=0.7, reward=1.0)
    sampled = experience(range(20, 40), [400, 401], old_logprobs=[-1.5, -2.5], temperature=0.7, reward=1.0)
    gap = fill_values(model, [written, sampled], tokenizer.pad_token_id, token_budget=1024)
    with torch.no_grad():
        _, expected, _ = forward_items(model, [written], tokenizer.pad_token_id)
        _, learner, _ = forward_items(model, [sampled], tokenizer.pad_token_id)
    assert written.old_logprobs == pytest.approx(expected[0, :3].tolist(), abs=1e-6)
    assert sampled.old_logprobs == [-1.5, -2.5]  # the behaviour log-probs stay as sampled
    # the rollout-vs-learner gap covers the sampled call alone (a written one has no behaviour)
    diffs = [-1.5 - learner[0, 0].item(), -2.5 - learner[0, 1].item()]
    assert gap == pytest.approx({"rollout_gap/mean_abs": (abs(diffs[0]) + abs(diffs[1])) / 2,
                                 "rollout_gap/max_abs": max(map(abs, diffs)),
                                 "rollout_gap/mean": sum(diffs) / 2,
                                 f"rollout_gap/{sampled.role}/mean_abs": (abs(diffs[0]) + abs(diffs[1])) / 2},
                                abs=1e-5)


def test_forced_workflow_transitions_reach_the_learner_without_log_probs(make_ctx):
    ctx = make_ctx(dict(TEAM), temperature=0.7, written={"plan": "RA,DS,AG"})
    result = asyncio.run(arun(get_method("jade").graph(), "Who directed Jaws?", ctx))
    items = to_experiences(result.transitions, [0.0] * len(result.transitions), group="q")
    assert [(e.role, bool(e.old_logprobs)) for e in items] == [("planner", False), ("DS", True), ("AG", True)]


def test_config_checks_forced_workflows():
    assert TrainConfig(forced_workflows=["RA,AG", "QDS"], samples_per_question=1,
                       ppo={"advantage": "grpo"}).forced_workflows == ["RA,AG", "QDS"]
    with pytest.raises(ValueError, match="not a workflow"):
        TrainConfig(forced_workflows=["RA,XX"])
    with pytest.raises(ValueError, match="listed twice"):
        TrainConfig(forced_workflows=["QDS", "QDS"])
    with pytest.raises(ValueError, match="graph 'vanilla_rag' has no planner that picks a workflow"):
        TrainConfig(graph="vanilla_rag", forced_workflows=["RA,AG"])
    # MAO-ARAG runs JADE's loop: its planner's choice is JADE's, forcing included
    assert TrainConfig(graph="mao_arag", forced_workflows=["QDS"]).forced_workflows == ["QDS"]
    with pytest.raises(ValueError, match="the method's way to force one"):
        asyncio.run(collect(get_method("vanilla_rag").training_graph(), [], None, samples=1, concurrency=1,
                            tag="s", forced_workflows=["QDS"]))
    with pytest.raises(ValueError, match="at least 2"):
        TrainConfig(samples_per_question=1, ppo={"advantage": "grpo"})
    # executions of one workflow are compared with each other: two runs of it at least
    with pytest.raises(ValueError, match="grpo_by_workflow compares executions.*forced_samples"):
        TrainConfig(forced_workflows=["RA,AG", "QDS"], ppo={"advantage": "grpo_by_workflow"})
    assert TrainConfig(forced_workflows=["RA,AG", "QDS"], forced_samples=2,
                       ppo={"advantage": "grpo_by_workflow"}).forced_samples == 2


def test_a_ppo_step_with_forced_workflows_trains_the_written_plans_from_ratio_one(tiny_model_dir, tmp_path):
    """One embedded GRPO step on the tiny model: each question's group is one run of the team's
    own and one per forced workflow. The written plans enter the update with π_old's log-probs
    (a missing row would count as log-prob 0 and show as a huge KL to π_old)."""
    from ragteam.trainers.loop import Trainer

    config = TrainConfig(graph="jade", model=tiny_model_dir, out=str(tmp_path / "run"), steps=1,
                         questions_per_step=2, samples_per_question=1, forced_workflows=["RA,AG", "QDS"],
                         temperature=0.7, concurrency=6, optimizer="torch", export_hf=False, max_rounds=3,
                         ppo={"advantage": "grpo"})
    trainer = Trainer(config, progress=False)
    try:
        metrics = trainer.train_step()
    finally:
        trainer.close()
    assert {"forced/RA,AG/f1", "forced/QDS/f1"} <= set(metrics)
    assert metrics["trained_transitions"] >= 6  # at least a plan and an answer in each of the 6 runs
    assert abs(metrics["approx_kl_old"]) < 1e-3 and metrics["policy_loss"] == metrics["policy_loss"]

    # the step's runs, kept for reading: one record each, forced ones named, rewards as trained
    from ragteam.stores.jsonl import read_records

    records = read_records(tmp_path / "run" / "rollouts" / "step-000001.jsonl")
    assert len(records) == 6
    assert sorted(r["forced_workflow"] for r in records) == ["", "", "QDS", "QDS", "RA,AG", "RA,AG"]
    for record in records:
        assert record["calls"] and {"role", "text", "format_ok", "reward"} <= set(record["calls"][0])
        assert record["reward"] == pytest.approx(sum(call["reward"] for call in record["calls"]))
        if record["forced_workflow"]:
            assert record["workflows"][0] == record["forced_workflow"]
            assert record["calls"][0]["role"] == "planner" and record["forced_workflow"] in record["calls"][0]["text"]
    own = [r for r in records if not r["forced_workflow"]]
    assert sum(r["f1"] for r in own) / 2 == pytest.approx(metrics["f1"])


def test_a_ppo_step_with_grpo_by_workflow_runs_each_forced_workflow_twice(tiny_model_dir, tmp_path):
    from ragteam.stores.jsonl import read_records
    from ragteam.trainers.loop import Trainer

    config = TrainConfig(graph="jade", model=tiny_model_dir, out=str(tmp_path / "run"), steps=1,
                         questions_per_step=1, samples_per_question=1, forced_workflows=["RA,AG", "QDS"],
                         forced_samples=2, temperature=0.7, concurrency=5, optimizer="torch", export_hf=False,
                         max_rounds=3, ppo={"advantage": "grpo_by_workflow"})
    trainer = Trainer(config, progress=False)
    try:
        metrics = trainer.train_step()
    finally:
        trainer.close()
    assert metrics["trained_transitions"] >= 5 and abs(metrics["approx_kl_old"]) < 1e-3
    assert metrics["rollout_gap/max_abs"] < 1e-3  # the engine sampled with the learner's weights
    records = read_records(tmp_path / "run" / "rollouts" / "step-000001.jsonl")
    assert sorted(r["forced_workflow"] for r in records) == ["", "QDS", "QDS", "RA,AG", "RA,AG"]
