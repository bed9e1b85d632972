"""Per-role LoRA adapters (``adapters:``; ``trainers/learner/adapters.py``): the config's checks,
a learner step that moves each adapter from its own roles' calls only, rollouts that sample each
role under its adapter, and a whole run with its export."""

import json

import pytest
import torch

from ragteam.trainers.algorithms.settings import PPOSettings
from ragteam.trainers.config import TrainConfig, from_dict
from ragteam.trainers.experience import Experience

EXECUTOR_ROLES = ["QDS", "QDP", "QR", "DS", "AG", "AS"]
ADAPTERS = {"planner": {"roles": ["planner"], "r": 4}, "executors": {"roles": EXECUTOR_ROLES, "r": 4}}


# -- configuration ------------------------------------------------------------------------------
@pytest.mark.parametrize("extra, message", [
    ({"adapters": {"a": {"roles": ["planner"]}, "b": {"roles": ["AG", "planner"]}}},
     "config: adapters: role planner is in two adapters (a and b)"),
    ({"adapters": {"a": {"roles": ["nobody"]}}}, "config: adapters: a: unknown role nobody; roles: AG, "),
    ({"adapters": {"a": {"roles": []}}}, "config: adapters.a.roles: an adapter plays at least one role"),
    ({"adapters": {"a/../b": {"roles": ["planner"]}}},
     "config: adapters: adapter name 'a/../b' is not a plain name"),
    ({"adapters": {"a": {"roles": ["planner"]}}, "frozen_roles": ["planner"]},
     "config: adapters: a: role planner is frozen; a frozen role has no adapter"),
    ({"adapters": {"a": {"roles": ["planner"]}}, "lora": {"r": 4}},
     "config: adapters: lora and adapters both name LoRA adapters; use one or the other"),
    ({"backend": "ray", "ray": {"learner_ranks": 2}},  # data-parallel AdamW: a small trainable set only
     "config: ray.learner_ranks: several learner ranks run in the Ray backend on DeepSpeed (backend: "
     "ray, optimizer: deepspeed), or on optimizer: torch when they train LoRA or per-role adapters"),
    ({"adapters": {"a": {"roles": ["planner"]}}, "sampler": "vllm"},
     "config: adapters: weight_sync: channel: per-role adapters reach a vLLM engine as the adapters "
     "alone; use weight_sync: adapter"),
    ({"adapters": {"a": {"roles": ["planner"]}}, "sampler": "vllm", "weight_sync": "blob"},
     "config: adapters: weight_sync: blob: per-role adapters reach a vLLM engine as the adapters alone"),
    ({"adapters": {"a": {"roles": ["planner"], "r": 1024}}, "sampler": "vllm", "weight_sync": "adapter"},
     "config: a vLLM engine serves LoRA ranks up to 512, not 1024"),
    ({"adapters": {"a": {"roles": ["planner"]}}, "optimizer": "deepspeed"},
     "config: adapters: optimizer: deepspeed is not supported with per-role adapters yet; use optimizer: torch"),
    ({"adapters": {}}, "config: adapters: name at least one adapter, or leave adapters out"),
    ({"adapters": {"tokenizer": {"roles": ["planner"]}}},
     "config: adapters: tokenizer names a file of the export beside the adapters' folders; choose another name"),
])
def test_adapter_config_errors_are_one_line(extra, message):
    with pytest.raises(ValueError) as error:
        from_dict({"graph": "jade", "optimizer": "torch", **extra})
    assert str(error.value).startswith(message)
    assert "\n" not in str(error.value)


def test_adapters_on_vllm_start_an_engine_with_a_lora_slot_each_and_a_spare():
    from ragteam.trainers.config import engine_options

    config = from_dict({"graph": "jade", "optimizer": "torch", "sampler": "vllm", "weight_sync": "adapter",
                        "adapters": {"planner": {"roles": ["planner"], "r": 4},
                                     "executors": {"roles": ["AG"], "r": 16}}})
    options = engine_options(config)
    assert (options["enable_lora"], options["max_lora_rank"], options["max_loras"]) == (True, 16, 3)


def test_adapter_options_default_to_alpha_twice_the_rank_on_every_linear_layer():
    config = from_dict({"graph": "jade", "optimizer": "torch",
                        "adapters": {"planner": {"roles": ["planner"], "r": 8, "lr": 1e-4}}})
    assert config.adapters["planner"].lora_options() == {"r": 8, "lora_alpha": 16, "target_modules": "all-linear"}
    assert config.adapters["planner"].lr == 1e-4


# -- learning -------------------------------------------------------------------------------------
def adapter_config(model_dir, out, **options) -> TrainConfig:
    values = dict(graph="jade", model=model_dir, out=str(out), steps=1, questions_per_step=1,
                  concurrency=2, optimizer="torch", max_rounds=2, lr=1e-2, adapters=ADAPTERS,
                  ppo=PPOSettings(whiten_advantages=False))
    return TrainConfig(**{**values, **options})


def calls(roles, prompt_len=7, completion_len=4):
    return [Experience(trajectory=f"t{i}", group="q", role=role,
                       prompt_ids=[10 + i + j for j in range(prompt_len + i)],
                       completion_ids=[200 + i + j for j in range(completion_len)],
                       old_logprobs=[], temperature=1.0, reward=1.0 + i)
            for i, role in enumerate(roles)]


def adapter_weights(learner, name):
    return {n: p.detach().clone() for n, p in learner.model.named_parameters() if f".{name}." in n and "lora_" in n}


def base_weights(learner):
    return {n: p.detach().clone() for n, p in learner.model.named_parameters()
            if "lora_" not in n and not n.startswith("value_head")}


@pytest.fixture
def learner(tiny_model_dir, tmp_path):
    from ragteam.trainers.learner.learner import Learner

    return Learner(adapter_config(tiny_model_dir, tmp_path / "run"), tiny_model_dir, frozen_roles=[])


def changed(before, learner):
    now = dict(learner.model.named_parameters())
    return {n for n, p in before.items() if not torch.equal(now[n], p)}


def test_one_step_updates_each_adapter_from_its_own_roles_calls(learner):
    planner, executors, base = (adapter_weights(learner, "planner"), adapter_weights(learner, "executors"),
                                base_weights(learner))
    assert planner and executors
    metrics = learner.learn(calls(["planner", "AG", "planner", "QR"]), step=0)
    assert changed(planner, learner) and changed(executors, learner)
    assert not changed(base, learner)  # the base weights never move
    for name in ("planner", "executors"):
        assert metrics[f"adapter/{name}/calls"] == 2
        for key in ("loss", "clip_frac", "grad_norm"):
            assert f"adapter/{name}/{key}" in metrics
        assert metrics[f"adapter/{name}/grad_norm"] > 0


def test_a_buffer_of_planner_calls_leaves_the_executors_adapter_exactly_as_it_was(learner):
    planner, executors, base = (adapter_weights(learner, "planner"), adapter_weights(learner, "executors"),
                                base_weights(learner))
    metrics = learner.learn(calls(["planner", "planner", "planner"]), step=0)
    assert changed(planner, learner)
    assert not changed(executors, learner)
    assert not changed(base, learner)
    assert metrics["adapter/executors/calls"] == 0 and metrics["adapter/executors/grad_norm"] == 0.0
    # every adapter stays trainable whichever was active last
    assert all(p.requires_grad for n, p in learner.model.named_parameters() if "lora_" in n)


def test_an_adapter_without_calls_stays_put_after_steps_that_moved_it(learner):
    """AdamW skips a parameter without gradient, moments and all (DeepSpeed's ZeRO would step
    it with a zero gradient: one reason this slice refuses optimizer: deepspeed)."""
    learner.learn(calls(["planner", "AG", "QR"]), step=0)
    executors = adapter_weights(learner, "executors")
    learner.learn(calls(["planner", "planner"]), step=1)
    assert not changed(executors, learner)


def test_a_checkpoint_restores_every_adapter_and_its_optimizer_group(learner, tiny_model_dir, tmp_path):
    from ragteam.trainers.learner.learner import Learner

    learner.learn(calls(["planner", "AG"]), step=0)
    learner.save(tmp_path / "checkpoints", 1, {"cursor": 1})
    restored = Learner(learner.config, tiny_model_dir, frozen_roles=[])
    assert restored.resume(tmp_path / "checkpoints")["step"] == 1
    for name in ("planner", "executors"):
        saved = adapter_weights(learner, name)
        assert not changed(saved, restored)
    assert [g["adapter"] for g in restored.optimizer.optimizer.param_groups[:2]] == ["planner", "executors"]
    assert restored.optimizer.optimizer.state_dict()["state"]  # Adam's moments came back too


def test_a_checkpoint_leaves_the_frozen_base_out_and_refuses_weights_that_do_not_fit(learner, tmp_path):
    """The checkpoint holds what was trained (the adapters, the value head), not the frozen base
    weights a resumed run loads from its model folder; a whole state dict (older checkpoints)
    still loads, and a checkpoint missing a trained weight, or naming one the model lacks, is
    refused with its folder named."""
    from ragteam.trainers.learner.optimizers import STATE_FILE, load_trained_state

    learner.learn(calls(["planner", "AG"]), step=0)
    learner.save(tmp_path / "checkpoints", 1, {"cursor": 1})
    saved = torch.load(tmp_path / "checkpoints" / "step-000001" / STATE_FILE, weights_only=True)["module"]
    module = learner.optimizer.module
    trained = {n for n, p in module.named_parameters() if p.requires_grad}
    assert trained <= set(saved) and any(".lora_" in key for key in saved) and any("value_head" in key for key in saved)
    assert not any(key.endswith("base_layer.weight") for key in saved)  # the frozen base stays out
    assert len(saved) < len(module.state_dict())

    load_trained_state(module, module.state_dict(), tmp_path)  # a whole state dict, as before
    lora_key = next(key for key in saved if ".lora_A." in key)
    with pytest.raises(ValueError, match=f"{tmp_path}: the checkpoint's weights do not fit this model "
                                         r"\(missing .*lora_A"):
        load_trained_state(module, {k: v for k, v in saved.items() if k != lora_key}, tmp_path)
    with pytest.raises(ValueError, match="unexpected extra.weight"):
        load_trained_state(module, {**saved, "extra.weight": torch.zeros(1)}, tmp_path)


def test_each_micro_batch_runs_under_its_roles_adapter(learner, monkeypatch):
    seen = []
    forward = type(learner.model).forward

    def spy(model, batch):
        seen.append((model.lm.active_adapter, batch.completion_ids.shape[0]))
        return forward(model, batch)

    monkeypatch.setattr(type(learner.model), "forward", spy)
    learner.learn(calls(["planner", "AG", "planner", "QR"]), step=0)
    assert {name for name, _ in seen} == {"planner", "executors"}
    assert sum(rows for _, rows in seen) == 4 * (1 + learner.config.ppo.epochs)  # values + each epoch


# -- rollouts (engine: hf) ------------------------------------------------------------------------
def distinct_adapters(learner):
    """Each adapter moved off the identity (peft starts lora_B at zero, so every adapter would
    otherwise decode exactly as the base weights and a wrong one could not be told apart)."""
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, param in learner.model.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=generator) * 0.5)


def test_each_role_samples_under_its_adapter_and_the_learner_recomputes_its_logprobs(tiny_model_dir, tmp_path):
    from ragteam.trainers.backends.embedded import EmbeddedBackend
    from ragteam.trainers.loop import load_examples

    # AG is in no adapter: the base weights play it, untrained
    adapters = {"planner": {"roles": ["planner"], "r": 4},
                "executors": {"roles": [r for r in EXECUTOR_ROLES if r != "AG"], "r": 4}}
    config = adapter_config(tiny_model_dir, tmp_path / "run", fallback_workflow="AG", max_rounds=1).model_copy(
        update={"adapters": from_dict({"adapters": adapters, "optimizer": "torch"}).adapters})
    backend = EmbeddedBackend(config, frozen_roles=[])
    learner = backend.learner
    distinct_adapters(learner)
    rollouts, _ = backend.rollouts(load_examples(config)[:1], tag="s1")
    transitions = [t for r in rollouts for t in r.result.transitions if t.completion_ids]
    expected = {"planner": "planner", "AG": "", **{r: "executors" for r in EXECUTOR_ROLES if r != "AG"}}
    assert {t.role for t in transitions} >= {"planner", "AG"}
    for t in transitions:
        assert t.adapter == expected[t.role], t.role
        assert t.trained == (t.role != "AG")
        recomputed = learner.logprobs(t.prompt_ids, t.completion_ids, t.temperature, role=t.role)
        assert recomputed == pytest.approx(t.logprobs, abs=1e-4), t.role
        other = learner.logprobs(t.prompt_ids, t.completion_ids, t.temperature,
                                 role="AG" if t.role != "AG" else "planner")
        assert other != pytest.approx(t.logprobs, abs=1e-4)  # another adapter's would not match
    backend.close()


# -- weight sync (engine: vllm) -------------------------------------------------------------------
class RecordingEngine:
    """An engine's ``load_adapter_files`` alone: which adapter got which files, in order."""

    def __init__(self):
        self.loaded = []

    def load_adapter_files(self, files, name=None):
        self.loaded.append((name, files))


def adapter_tensors(files):
    from safetensors.torch import load

    return load(files["adapter_model.safetensors"])


def test_a_sync_sends_only_the_adapters_the_update_changed(learner):
    from ragteam.trainers.backends.embedded import LocalWeightSync

    distinct_adapters(learner)
    engine = RecordingEngine()
    sync = LocalWeightSync(learner, engine, "adapter")
    sync.sync()  # the first: every adapter
    assert [name for name, _ in engine.loaded] == ["planner", "executors"]
    assert sync.sent["weight_sync_adapters"] == 2
    assert sync.sent["weight_sync_bytes"] == sum(len(d) for _, f in engine.loaded for d in f.values())
    # each adapter's own weights (peft's file names carry no adapter name)
    for name, files in engine.loaded:
        sent = adapter_tensors(files)
        own = adapter_weights(learner, name)
        assert len(sent) == len(own) > 0
        assert all(any(torch.equal(t, p) for p in own.values()) for t in sent.values())
    planner, executors = (adapter_tensors(files) for _, files in engine.loaded)
    assert any(not torch.equal(planner[k], executors[k]) for k in planner)

    engine.loaded.clear()
    learner.learn(calls(["planner", "planner"]), step=0)  # moves the planner's adapter alone
    sync.sync()
    assert [name for name, _ in engine.loaded] == ["planner"]
    assert sync.sent["weight_sync_adapters"] == 1
    assert sync.sent["weight_sync_bytes"] == sum(map(len, engine.loaded[0][1].values()))
    engine.loaded.clear()
    sync.sync()  # nothing moved since: nothing sent
    assert engine.loaded == [] and sync.sent == {"weight_sync_adapters": 0, "weight_sync_bytes": 0}
    sync.restarted([engine])  # an engine that came back holds none: every adapter again
    assert [name for name, _ in engine.loaded] == ["planner", "executors"]


# -- a whole run ----------------------------------------------------------------------------------
def test_a_run_trains_every_adapter_and_exports_each_as_a_peft_folder(tiny_model_dir, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from ragteam.trainers.loop import Trainer

    # written replies make the planner choose the executors' workflow: both adapters have calls
    config = adapter_config(tiny_model_dir, tmp_path / "run", max_rounds=1, samples_per_question=1,
                            forced_workflows=["QR,AG"], fallback_workflow="AG",
                            ppo=PPOSettings(whiten_advantages=False, kl_coef=0.1))
    trainer = Trainer(config, progress=False)
    try:
        trainer.train()
    finally:
        trainer.close()
    metrics = trainer.log.read()[-1]
    assert metrics["adapter/planner/calls"] > 0 and metrics["adapter/executors/calls"] > 0
    for name in ("planner", "executors"):
        assert {f"adapter/{name}/{k}" for k in ("loss", "kl", "clip_frac", "grad_norm")} <= set(metrics)
    assert trainer.backend.learner.frozen is None  # the reference is the base: every adapter off
    assert metrics["kl_ref"] == pytest.approx(0.0, abs=1e-5)  # adapters start as the identity
    out = tmp_path / "run" / "adapters"
    assert not (tmp_path / "run" / "hf").exists()  # no merged model: it cannot hold two adapters
    roles = json.loads((out / "roles.json").read_text())
    assert roles == {"base_model": tiny_model_dir, "adapters": {"planner": ["planner"], "executors": EXECUTOR_ROLES}}
    learned = dict(trainer.backend.learner.model.lm.named_parameters())
    for name in ("planner", "executors"):
        assert {p.name for p in (out / name).iterdir()} >= {"adapter_config.json", "adapter_model.safetensors"}
        loaded = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_model_dir), out / name)
        weights = {n.replace(".default.", f".{name}."): p for n, p in loaded.named_parameters() if "lora_" in n}
        assert weights and all(torch.equal(p, learned[n]) for n, p in weights.items())


def test_an_export_serves_each_role_under_its_adapter(learner, tmp_path):
    """``--policy adapters:DIR``: the export's base model with every adapter, each role decoded
    under its own (a role in none on the base weights), as the learner scores the same ids."""
    import asyncio
    from argparse import Namespace

    from ragteam.graphs.apps.cli import check_model_options
    from ragteam.nodes.policies.protocol import GenerationRequest, SamplingParams
    from ragteam.nodes.policies.spec import check_policy_spec, load_policy
    from ragteam.trainers.learner.adapters import export_adapters

    distinct_adapters(learner)
    out = tmp_path / "adapters"
    export_adapters(learner.model.lm, learner.tokenizer, learner.adapters, out, learner.config.model,
                    learner.model.value_head.state_dict())
    policy = load_policy(f"adapters:{out}")
    ask = lambda role: GenerationRequest(({"role": "user", "content": "Who wrote Hamlet?"},),  # noqa: E731
                                         SamplingParams(6, 0.0, ()), role=role)
    for role, adapter in (("planner", "planner"), ("QR", "executors"), ("summarizer", "")):
        [gen] = asyncio.run(policy.generate([ask(role)]))
        assert gen.adapter == adapter
        assert learner.logprobs(gen.prompt_ids, gen.completion_ids, 0.0, role=role) == pytest.approx(
            gen.logprobs, abs=1e-4), role
    with pytest.raises(ValueError, match="no roles.json there"):
        check_policy_spec(f"adapters:{tmp_path}")
    # vLLM serves it too (tests/test_adapters_vllm.py): the command line lets it through
    check_model_options(Namespace(policy=f"adapters:{out}", sampler="vllm", index=None))
    # a mistyped role would be played by the base weights, its adapter never used: refused
    spec = json.loads((out / "roles.json").read_text())
    spec["adapters"]["planner"] = ["plannr"]
    (out / "roles.json").write_text(json.dumps(spec))
    with pytest.raises(ValueError, match=r"roles.json: unknown role\(s\) plannr; roles: .*planner"):
        load_policy(f"adapters:{out}")


def test_a_mixed_batch_decodes_each_row_under_its_own_roles_adapter(learner):
    """``HFPolicy(mix_roles=True)``: calls of three roles (two adapters and the base weights) of
    one length decode as one batch, each row under its own adapter — the same ids and log-probs
    as one batch per role, and as the learner scores them."""
    import asyncio

    from ragteam.nodes.policies.hf import HFPolicy
    from ragteam.nodes.policies.protocol import GenerationRequest, SamplingParams

    distinct_adapters(learner)
    roles = ["planner", "QR", "summarizer"] * 2
    ask = [GenerationRequest(({"role": "user", "content": f"Who wrote Hamlet, part {i}?"},),
                             SamplingParams(6, 0.0, ()), role=role) for i, role in enumerate(roles)]
    decoded = {}
    for mix in (False, True):
        policy = HFPolicy(learner.model.lm, learner.tokenizer, adapters=learner.adapters, mix_roles=mix)
        batches = []
        policy._decode = (lambda decode: lambda requests, *rest: batches.append(len(requests))
                          or decode(requests, *rest))(policy._decode)
        decoded[mix] = policy.generate_batch(ask)
        assert batches == ([6] if mix else [2, 2, 2])
    for role, by_role, mixed in zip(roles, decoded[False], decoded[True]):
        assert mixed.adapter == {"planner": "planner", "QR": "executors", "summarizer": ""}[role]
        assert mixed.completion_ids == by_role.completion_ids
        assert mixed.logprobs == pytest.approx(by_role.logprobs, abs=1e-4)
        assert learner.logprobs(mixed.prompt_ids, mixed.completion_ids, 0.0, role=role) == pytest.approx(
            mixed.logprobs, abs=1e-4), role


def test_a_trace_from_before_adapters_loads_with_the_base_adapter(tmp_path):
    from dataclasses import asdict

    from ragteam.nodes.tracing import Transition, read_jsonl

    record = asdict(Transition(run_id="r", turn=0, step=0, role="AG", node_path="0/AG", task_id="0",
                               observation="o", prompt_text="p", completion_text="c", prompt_ids=[1],
                               completion_ids=[2], logprobs=[-0.5], action="c", format_ok=True,
                               violation="", policy="hf", trained=True, prompt_tokens=1,
                               completion_tokens=1, latency_s=0.0, adapter="executors"))
    del record["adapter"]
    (tmp_path / "old.jsonl").write_text(json.dumps(record) + "\n")
    [transition] = read_jsonl(tmp_path / "old.jsonl")
    assert transition.adapter == ""


@pytest.mark.parametrize("roles_json,message", [
    ([], "TypeError"),                                                       # a list, not an object
    ({"base_model": 7, "adapters": {"a1": ["planner"]}}, "base_model must be"),
    ({"base_model": "offline", "adapters": {"../good/a1": ["planner"]}}, "not a path"),
    ({"base_model": "offline", "adapters": {"a1": "planner"}}, "list of role names"),
    ({"base_model": "offline", "adapters": {"a1": ["planner"], "a2": ["planner", "QR"]}}, "in two adapters"),
    ({"base_model": "offline", "adapters": {}}, "expected adapter name"),
])
def test_an_export_whose_roles_json_is_malformed_is_refused_in_one_line(roles_json, message, tmp_path):
    from ragteam.nodes.policies.role_adapters import read_team_export

    (tmp_path / "roles.json").write_text(json.dumps(roles_json))
    with pytest.raises(ValueError, match=message) as refused:
        read_team_export(tmp_path)
    assert str(tmp_path) in str(refused.value) and "\n" not in str(refused.value)


@pytest.mark.parametrize("config,weights,message", [
    ({"peft_type": "LORA", "r": 1_000_000}, None, "LoRA rank 1000000"),
    ({"peft_type": "LORA", "r": "x"}, None, "LoRA rank 'x'"),
    ({"peft_type": "PREFIX_TUNING", "r": 8}, None, "peft_type"),
    ({"peft_type": "LORA", "r": 8, "rank_pattern": {"q_proj": -1}}, None, "LoRA rank -1"),
    ({"peft_type": "LORA", "r": 8}, b"", "adapter_model.safetensors"),                  # 0 bytes
    ({"peft_type": "LORA", "r": 8}, (10**9).to_bytes(8, "little") + b"{}", "adapter_model.safetensors"),
    ("[" * 100_000, None, "nested too deeply"),
])
def test_an_adapter_folder_a_loader_would_fail_on_is_refused_naming_the_file(config, weights, message, tmp_path):
    """peft allocates r × width before it reads a weight; a lying header or deep JSON is a
    traceback from inside the loader: each is one line naming the file, before any model loads."""
    from ragteam.nodes.policies.role_adapters import read_team_export

    (tmp_path / "roles.json").write_text(json.dumps({"base_model": "offline", "adapters": {"a1": ["planner"]}}))
    (tmp_path / "a1").mkdir()
    (tmp_path / "a1" / "adapter_config.json").write_text(config if isinstance(config, str) else json.dumps(config))
    sound = b"{}"
    (tmp_path / "a1" / "adapter_model.safetensors").write_bytes(
        weights if weights is not None else len(sound).to_bytes(8, "little") + sound)
    with pytest.raises(ValueError, match=message) as refused:
        read_team_export(tmp_path)
    assert "\n" not in str(refused.value)


def test_an_adapter_starts_from_a_warm_starts_export_with_its_rank_and_weights(tiny_model_dir, tmp_path):
    """``init: FOLDER``: PPO after a per-role warm start. The learner's adapter holds the folder's
    weights (bf16 on disk, as docs/results/phantomwiki/ commits them) under the folder's own rank;
    an adapter without ``init`` starts as peft starts one; options that contradict the folder
    are refused in one line."""
    from safetensors.torch import load_file, save_file

    from benchmarks.bench_role_adapters import random_team_export
    from ragteam.trainers.learner.learner import Learner

    export = random_team_export(tiny_model_dir, tmp_path / "warm", {"planner": ["planner"]}, rank=4)
    weights = load_file(export / "planner" / "adapter_model.safetensors")
    save_file({k: v.to(torch.bfloat16) for k, v in weights.items()}, export / "planner" / "adapter_model.safetensors")
    adapters = {"planner": {"roles": ["planner"], "init": str(export / "planner")},
                "executors": {"roles": ["QR", "AG"]}}
    learner = Learner(adapter_config(tiny_model_dir, tmp_path / "run", adapters=adapters), tiny_model_dir,
                      frozen_roles=[])
    assert learner.config.adapters["planner"].lora_options()["r"] == 4
    loaded = adapter_weights(learner, "planner")
    assert len(loaded) == len(weights)
    for name, tensor in loaded.items():
        unnamed = name.replace(".planner.", ".")  # peft's name in the folder has no adapter name
        saved = next(v for k, v in weights.items() if unnamed.endswith(k.split("base_model.")[-1]))
        assert torch.equal(tensor, saved.to(torch.bfloat16).to(tensor.dtype)), name
    assert all(not p.any() for n, p in adapter_weights(learner, "executors").items() if "lora_B" in n)
    with pytest.raises(ValueError, match=r"init .*: r: 8 \(its own: 4\)"):
        from_dict({"graph": "jade", "optimizer": "torch",
                   "adapters": {"planner": {"roles": ["planner"], "init": str(export / "planner"), "r": 8}}})
    with pytest.raises(ValueError, match="adapter_config.json"):
        from_dict({"graph": "jade", "optimizer": "torch",
                   "adapters": {"planner": {"roles": ["planner"], "init": str(tmp_path)}}})
