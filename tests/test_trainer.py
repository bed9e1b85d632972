"""The PPO trainer on a tiny randomly initialized model (same tokenizer as the offline model):
log-prob alignment, prompt masking, frozen roles, DeepSpeed vs torch, resume."""

import copy
import json

import pytest
import torch

from tests.conftest import experience
from ragteam.trainers.config import TrainConfig, load_config
from ragteam.trainers.learner.optimizers import make_optimizer
from ragteam.trainers.loop import Trainer, batch_at
from ragteam.trainers.learner.model import PolicyValueModel, make_batch
from ragteam.trainers.algorithms.settings import PPOSettings
from ragteam.trainers.learner.ppo_update import update


def tiny_lm(path):
    from ragteam.trainers.learner.model import load_lm
    return load_lm(path)


def experiences(n=3, prompt_len=7, completion_len=4):
    return [experience([10 + i + j for j in range(prompt_len + i)], [200 + i + j for j in range(completion_len - i % 2)],
                       trajectory=f"t{i % 2}", role=("planner", "AG")[i % 2], reward=float(i),
                       advantage=1.0 - i, returns=0.5)
            for i in range(n)]


def test_prompt_tokens_carry_no_loss_and_completion_logprobs_match_a_full_forward(tiny_model_dir):
    lm, _ = tiny_lm(tiny_model_dir)
    model = PolicyValueModel(lm).eval()
    items = experiences()
    batch = make_batch([e.prompt_ids for e in items], [e.completion_ids for e in items], [0.7] * 3, 0)
    seen_shapes = []
    hook = lm.lm_head.register_forward_hook(lambda m, args, out: seen_shapes.append(tuple(args[0].shape)))
    logprobs, values = model(batch)
    hook.remove()
    assert seen_shapes == [(3, 4, 32)]  # completion positions only, never the prompt
    for row, e in enumerate(items):
        ids = torch.tensor([e.prompt_ids + e.completion_ids])
        with torch.no_grad():
            full = torch.log_softmax(lm(ids).logits[0].float() / 0.7, -1)
        p = len(e.prompt_ids)
        expected = [full[p - 1 + j, tok].item() for j, tok in enumerate(e.completion_ids)]
        assert logprobs[row, :len(expected)].tolist() == pytest.approx(expected, abs=1e-5)
        assert logprobs[row, len(expected):].abs().sum().item() == 0.0  # padding carries nothing
    assert values.shape == (3,)


def test_frozen_roles_get_no_gradient_and_are_not_updated(tiny_model_dir, tmp_path):
    config = TrainConfig(graph="mao_arag", model=tiny_model_dir, out=str(tmp_path / "run"), steps=1,
                         questions_per_step=2, concurrency=2, optimizer="torch", export_hf=False,
                         max_rounds=2, lr=1e-2,
                         # equal rewards whiten to zero advantages; keep the raw ones so it must move
                         ppo=PPOSettings(whiten_advantages=False))
    trainer = Trainer(config, progress=False)
    frozen_before = copy.deepcopy(trainer.backend.learner.frozen.state_dict())
    learner_before = copy.deepcopy(trainer.backend.learner.model.lm.state_dict())
    metrics = trainer.train_step()
    assert all(not p.requires_grad and p.grad is None for p in trainer.backend.learner.frozen.parameters())
    for name, tensor in trainer.backend.learner.frozen.state_dict().items():
        assert torch.equal(tensor, frozen_before[name]), name
    assert metrics["trained_transitions"] > 0
    changed = any(not torch.equal(t, learner_before[n]) for n, t in trainer.backend.learner.model.lm.state_dict().items())
    assert changed  # the planner's shared model did learn
    # the frozen copy's calls are recorded as not trained, so they never reach the learner
    rollouts, _ = trainer.backend.rollouts(trainer.examples[:2], tag="check")
    calls = [t for r in rollouts for t in r.result.transitions]
    assert {t.role for t in calls if t.trained} == {"planner"}
    assert {t.role for t in calls if not t.trained} and all(
        t.role in ("QR", "QDS", "QDP", "DS", "AG", "AS") for t in calls if not t.trained)


def test_deepspeed_zero2_cpu_adam_step_equals_torch_adamw(tiny_model_dir):
    """The DeepSpeed backend (ZeRO-2, CPU Adam, manual accumulation boundaries) applies the same
    update as plain AdamW on the same micro-batches."""
    lm, tokenizer = tiny_lm(tiny_model_dir)
    base = PolicyValueModel(lm)
    items = experiences(3)
    for e in items:
        e.old_logprobs = [-5.0] * len(e.completion_ids)
    settings = PPOSettings(minibatch_size=3, micro_batch_tokens=12)  # forces several micro-batches
    results = {}
    for backend in ("torch", "deepspeed"):
        model = copy.deepcopy(base)
        engine = make_optimizer(backend, model, lr=1e-3, head_lr=1e-3, max_grad_norm=1.0,
                             zero_stage=2)
        stats = update(engine, items, settings, tokenizer.pad_token_id, shuffle_seed=0)
        results[backend] = ({n: p.detach().clone() for n, p in engine.module.named_parameters()}, stats)
    (torch_params, torch_stats), (ds_params, ds_stats) = results["torch"], results["deepspeed"]
    assert ds_stats["policy_loss"] == pytest.approx(torch_stats["policy_loss"], abs=1e-5)
    assert ds_stats["grad_norm"] == pytest.approx(torch_stats["grad_norm"], rel=1e-4)
    moved = 0
    for name, value in torch_params.items():
        assert torch.allclose(ds_params[name], value, atol=1e-6), name
        moved += int(not torch.equal(value, base.state_dict()[name]))
    assert moved > 0


def test_resume_reproduces_the_next_step(tiny_model_dir, tmp_path):
    def config(out, steps):
        return TrainConfig(graph="jade", model=tiny_model_dir, out=str(out), steps=steps,
                           questions_per_step=2, concurrency=1, optimizer="torch", export_hf=False,
                           max_rounds=2, lr=1e-3, seed=3)

    straight = Trainer(config(tmp_path / "a", 2), progress=False)
    straight.train()
    interrupted = Trainer(config(tmp_path / "b", 1), progress=False)
    interrupted.train()
    del interrupted  # "killed" after step 1's checkpoint
    resumed = Trainer(config(tmp_path / "b", 2), resume=True, progress=False)
    assert (resumed.step, resumed.cursor) == (1, 2)
    resumed.train()
    rows_a = [json.loads(line) for line in (tmp_path / "a" / "metrics.jsonl").read_text().splitlines()]
    rows_b = [json.loads(line) for line in (tmp_path / "b" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows_b] == [1, 2]
    for key in ("reward", "policy_loss", "value_loss", "trained_transitions", "grad_norm"):
        assert rows_b[1][key] == pytest.approx(rows_a[1][key], rel=1e-5, abs=1e-7), key
    for name, value in straight.backend.learner.model.state_dict().items():
        assert torch.allclose(resumed.backend.learner.model.state_dict()[name], value, atol=1e-6), name
    assert (tmp_path / "b" / "learning_curve.png").exists()
    # the weights' version (optimizer steps) resumes with the run, and every sampled call of a
    # synchronous step was sampled under the learner's current version: lag 0
    assert resumed.backend.learner.version == straight.backend.learner.version > 0
    sampled_under = straight.backend.rollout_policy.weight_version  # set for step 2's rollouts
    assert 0 < sampled_under < straight.backend.learner.version
    assert all(row["weight_lag/max"] == 0 for row in rows_a + rows_b)


def test_data_order_is_a_function_of_the_cursor():
    first = batch_at(10, 0, 10, seed=1)
    assert sorted(first) == list(range(10))
    assert batch_at(10, 4, 3, seed=1) == first[4:7]
    assert batch_at(10, 8, 4, seed=1)[:2] == first[8:]  # the next pass starts a new shuffle


def test_config_yaml_then_overrides(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("graph: m_ask\nsteps: 7\nppo: {epochs: 3, kl_coef: 0.01}\nreward: {scheme: m_ask}\n")
    config = load_config(path, {"steps": 2, "ppo.epochs": None, "ppo.clip": 0.1, "lr": None})
    assert (config.graph, config.steps, config.ppo.epochs, config.ppo.kl_coef, config.ppo.clip) == \
        ("m_ask", 2, 3, 0.01, 0.1)
    path.write_text("grpah: jade\n")
    with pytest.raises(ValueError, match="unknown option.*grpah"):
        load_config(path, {})


def test_lora_trains_adapters_only_and_uses_the_base_model_as_kl_reference(tiny_model_dir, tmp_path):
    config = TrainConfig(graph="jade", model=tiny_model_dir, out=str(tmp_path / "lora"), steps=1,
                         questions_per_step=2, concurrency=2, optimizer="torch", max_rounds=2, lr=1e-2,
                         lora={"r": 4, "lora_alpha": 8, "target_modules": "all-linear"},
                         ppo=PPOSettings(kl_coef=0.1, whiten_advantages=False))
    trainer = Trainer(config, progress=False)
    assert trainer.backend.learner.frozen is None  # no copy: disabled adapters are the reference
    before = {n: p.detach().clone() for n, p in trainer.backend.learner.model.named_parameters()}
    trainer.train()
    metrics = trainer.log.read()[-1]
    assert metrics["kl_ref"] == pytest.approx(0.0, abs=1e-5)  # first rollout: adapters start as identity
    for name, param in trainer.backend.learner.model.named_parameters():
        if "lora_" in name or name.startswith("value_head"):
            continue
        assert torch.equal(param, before[name]), name  # base weights untouched
    assert any(not torch.equal(p, before[n]) for n, p in trainer.backend.learner.model.named_parameters() if "lora_B" in n)
    from transformers import AutoModelForCausalLM
    merged = AutoModelForCausalLM.from_pretrained(tmp_path / "lora" / "hf")  # LoRA merged on export
    assert not any("lora" in n for n, _ in merged.named_parameters())


def test_the_documented_learning_run_config_loads():
    from pathlib import Path
    config = load_config(Path(__file__).resolve().parents[1] / "examples" / "jade_ppo.yaml", {"steps": 2})
    assert (config.graph, config.steps, config.backend, config.optimizer, config.reward["scheme"]) == (
        "jade", 2, "embedded", "deepspeed", "jade")


@pytest.mark.parametrize("given, chosen", [
    ({}, "torch"),                                               # one learner in this process
    ({"backend": "ray"}, "deepspeed"),                           # OpenRLHF's learner ranks
    ({"zero_stage": 3}, "deepspeed"), ({"offload_optimizer": False}, "deepspeed"),  # ZeRO asked for
    ({"optimizer": "deepspeed"}, "deepspeed"), ({"backend": "ray", "optimizer": "torch"}, "torch"),
    ({"backend": "ray", "adapters": {"a": {"roles": ["planner"]}}}, "torch"),  # an AdamW group each
    ({"backend": "ray", "ray.learner_ranks": 2, "adapters": {"a": {"roles": ["planner"]}}}, "torch"),
    ({"backend": "ray", "ray.learner_ranks": 2, "lora": {"r": 4}}, "deepspeed"),  # unless named
])
def test_the_optimizer_is_chosen_by_what_the_run_needs_unless_named(given, chosen):
    assert load_config(None, given).optimizer == chosen


def test_sft_selection_names_a_bad_prediction_line(tmp_path):
    from ragteam.trainers.algorithms.sft import successful_transitions

    folder = tmp_path / "eval" / "apex"
    folder.mkdir(parents=True)
    (folder / "predictions.jsonl").write_text('{"id": "a", "f1": 0.0, "trace_path": "x"}\n{broken\n')
    with pytest.raises(ValueError, match=r"predictions.jsonl:2"):
        successful_transitions([tmp_path / "eval"], min_f1=0.5, roles=None)
    with pytest.raises(FileNotFoundError, match="ragteam eval"):
        successful_transitions([tmp_path / "nothing"], min_f1=0.5, roles=None)


def test_a_run_that_raises_is_reported_and_left_out_of_its_step(tiny_model_dir, tmp_path, monkeypatch, capsys):
    """One question's run breaking (here: the graph raises on it) costs that run only: the step
    trains on the others, counts it, and names it in OUT/failed_runs.jsonl and on stderr."""
    import ragteam.trainers.rollout as rollout

    original = rollout.arun

    async def arun(graph, question, ctx, run_id=None):
        if run_id.endswith("-1"):  # every question's second sample breaks
            raise RuntimeError("this run broke")
        return await original(graph, question, ctx, run_id=run_id)

    monkeypatch.setattr(rollout, "arun", arun)
    config = TrainConfig(graph="vanilla_rag", model=tiny_model_dir, out=str(tmp_path / "run"), steps=1,
                         questions_per_step=2, samples_per_question=2, concurrency=2, optimizer="torch",
                         export_hf=False)
    trainer = Trainer(config, progress=False)
    metrics = trainer.train_step()
    assert metrics["failed_runs"] == 2 and metrics["trained_transitions"] == 2  # one call per kept run
    failed = [json.loads(line) for line in (tmp_path / "run" / "failed_runs.jsonl").read_text().splitlines()]
    assert [(r["step"], r["sample"], r["error"]) for r in failed] == [(1, 1, "RuntimeError: this run broke")] * 2
    assert "failed and is left out of the step: RuntimeError: this run broke" in capsys.readouterr().err


def test_a_step_with_truncated_importance_sampling_takes_the_learners_pi_old(tiny_model_dir, tmp_path):
    """``ppo.behaviour_correction: tis`` on the learner's own sampler: π_old is the learner's
    forward before the update and the behaviour log-probs the sampler's, the same weights, so
    every weight is 1 up to float noise and the gap per version lag is logged (lag 0)."""
    config = TrainConfig(graph="vanilla_rag", model=tiny_model_dir, out=str(tmp_path / "run"), steps=1,
                         questions_per_step=2, concurrency=1, optimizer="torch", export_hf=False,
                         temperature=1.0, samples_per_question=2, ppo={"advantage": "grpo", "behaviour_correction": "tis"})
    [metrics] = Trainer(config, progress=False).train()
    assert metrics["tis_weight"] == pytest.approx(1.0, abs=1e-3)
    assert metrics["rollout_gap/lag0/mean_abs"] < 1e-3 and metrics["weight_lag/max"] == 0
