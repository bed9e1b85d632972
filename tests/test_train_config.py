"""A training config is checked where it is read: PPO and LoRA values, duplicate YAML keys, the SFT
script's arguments; each refusal names the value."""

import pytest


@pytest.mark.parametrize("values, message", [
    ({"lora": {"r": -1}}, "lora: r must be a positive number"),
    ({"lora": {"rank": 4}}, "unknown LoRA option"),
    ({"train_roles": ["nope"]}, "train_roles: unknown role(s) nope"),
    ({"frozen_roles": ["nope"]}, "frozen_roles: unknown role(s) nope"),
    ({"fallback_workflow": "XX"}, "fallback_workflow: 'XX' is not a workflow"),
    ({"device": "cuda:abc"}, "device: use cpu, cuda, cuda:N or auto"),
    ({"ppo": {"advantage": "grpo"}}, "GRPO compares the runs of one question"),
    ({"out": ""}, "out: empty path"),
    ({"reward": {"foo": 1}}, "x.yaml: reward scheme 'jade'"),
    ({"weight_sync": "adapter"}, "weight_sync: adapter sends the LoRA adapter alone; it needs lora"),
    ({"weight_sync": "adapter", "lora": {"r": 4, "modules_to_save": ["lm_head"]}}, "no modules_to_save"),
    ({"weight_sync": "adapter", "lora": {"r": 1024}}, "serves LoRA ranks up to 512, not 1024"),
    ({"fan_out": -1}, "fan_out"),
])
def test_ppo_config_values_are_checked(values, message):
    from ragteam.trainers.config import from_dict

    with pytest.raises(ValueError) as error:
        from_dict(values, "x.yaml")
    assert message in str(error.value)


def test_the_rollouts_run_with_the_configs_settings():
    from ragteam.trainers.config import from_dict
    from ragteam.trainers.rollout import run_settings

    settings = run_settings(from_dict({"top_k": 3, "fan_out": 5, "temperature": 0.7}, "x.yaml"))
    assert (settings.top_k, settings.serial.fan_out, settings.temperature) == (3, 5, 0.7)
    assert run_settings(from_dict({}, "x.yaml")).serial.fan_out == 0  # unset: the runtime's default


def test_duplicate_yaml_keys_are_refused(tmp_path):
    from ragteam.trainers.config import load_config

    (tmp_path / "c.yaml").write_text("lr: 1.0e-5\nsteps: 2\nlr: 2.0e-5\n")
    with pytest.raises(ValueError, match=r"c.yaml: not valid YAML \(duplicate key\(s\) lr"):
        load_config(tmp_path / "c.yaml", {})


def test_a_yaml_merge_may_be_overridden_but_a_key_written_twice_may_not(tmp_path):
    from ragteam.trainers.config import read_yaml

    (tmp_path / "ok.yaml").write_text("a: &round {lr: 1, epochs: 2}\nb: {<<: *round, lr: 3}\n")
    assert read_yaml(tmp_path / "ok.yaml") == {"a": {"lr": 1, "epochs": 2}, "b": {"lr": 3, "epochs": 2}}
    (tmp_path / "bad.yaml").write_text("a: &round {lr: 1}\nb: {<<: *round, lr: 3, lr: 4}\n")
    with pytest.raises(ValueError, match=r"bad.yaml: not valid YAML \(duplicate key\(s\) lr"):
        read_yaml(tmp_path / "bad.yaml")


@pytest.mark.parametrize("flag, value", [("--min-f1", "nan"), ("--min-f1", "2"), ("--epochs", "-1"),
                                         ("--lr", "-1"), ("--minibatch-size", "0"), ("--adapter", "planner"),
                                         ("--adapter", "../x=planner"), ("--adapter", "tokenizer=planner")])
def test_sft_arguments_are_checked(flag, value, tmp_path):
    from ragteam.trainers import sft_graph

    with pytest.raises(SystemExit) as exit_:
        sft_graph.main(["--traces", str(tmp_path), flag, value])
    assert exit_.value.code == 2


@pytest.mark.parametrize("backend, options, engines, message", [
    ("embedded", {}, [object()], "engines were given to a run whose rollouts sample from the learner"),
    ("embedded", {"sampler": "vllm"}, [object(), object()], "samples from one engine; 2 were given"),
    ("embedded", {"sampler": "vllm"}, [object()], "object is not a rollout engine: it has no name, generate"),
    ("embedded", {"sampler": "vllm"}, object(), "engines must be a list of started engines"),
])
def test_handed_over_engines_must_fit_the_backend(backend, options, engines, message):
    """Engines handed to a trainer (``trainers.engines``) must be what its backend calls, refused
    before any model loads."""
    from ragteam.trainers.config import from_dict
    from ragteam.trainers.loop import make_backend

    with pytest.raises(ValueError, match=message):
        make_backend(from_dict({"backend": backend, **options}, "x.yaml"), [], engines)


def test_the_old_names_of_the_sampler_are_refused_naming_the_new_one(tmp_path):
    """``engine`` means a rollout engine object only: the hf|vllm choice is ``sampler``."""
    from ragteam.graphs.apps.cli import main
    from ragteam.trainers.config import from_dict
    from ragteam.trainers.ppo_graph import parser

    with pytest.raises(ValueError, match="engine: vllm is now sampler: vllm"):
        from_dict({"engine": "vllm"}, "x.yaml")
    with pytest.raises(ValueError, match=r"engine= is now engines=\[...\]"):
        from_dict({"engine": object()}, "x.yaml")
    for parse in (lambda: main(["run", "--engine", "vllm", "Who?"]), lambda: parser().parse_args(["--engine", "hf"])):
        with pytest.raises(SystemExit) as exit_:
            parse()
        assert exit_.value.code == 2
    assert from_dict({"sampler": "vllm"}, "x.yaml").sampler == "vllm"


def test_forced_runs_alone_are_a_group_but_nothing_at_all_is_refused():
    """``samples_per_question: 0`` with forced workflows: each group holds the written runs only
    (the learning gate's all-action variant); with none, a step would run nothing."""
    from ragteam.trainers.config import load_config

    config = load_config(None, {"graph": "jade", "samples_per_question": 0, "forced_workflows": ["RA,AG", "QDS"]})
    assert config.samples_per_question == 0
    with pytest.raises(ValueError, match="samples_per_question: 0 runs nothing unless forced_workflows"):
        load_config(None, {"graph": "jade", "samples_per_question": 0})
