"""Trainer input and state under hostile conditions (reliability sweep items 4, 5, 14): the whole
config is validated before anything loads, checkpoints never unpickle code, and the DeepSpeed
engine listens on no network interface."""

import json
import os
import pickle
from pathlib import Path

import pytest
import torch

from ragteam.trainers import ppo_graph
from ragteam.trainers.config import TrainConfig, load_config

BAD_CONFIGS = {  # YAML text → what the error must name
    "steps: [1\n": "not valid YAML",
    "ppo: 5\n": "ppo",
    "reward: 5\n": "reward",
    "steps: ten\n": "steps",
    "questions_per_step: 0\n": "questions_per_step",
    "steps: -3\n": "steps",
    "lr: -1e-5\n": "lr",
    "backend: tpu\n": "backend",
    "graph: nonsense\n": "unknown graph",
    "model: /nonexistent/model\n": "no Hugging Face model directory",
    "ppo: {epochs: 0}\n": "ppo.epochs",
    "zero_stage: 4\n": "zero_stage",
    "- just\n- a list\n": "expected a mapping",
    "steps: true\n": "steps",
    "lr: .inf\n": "lr",
    "seed: -5\n": "seed",
    "data: /nonexistent.jsonl\n": "no dataset file",
    "index: /nonexistent\n": "no index directory",
    "reward: {scheme: nope}\n": "unknown reward scheme",
    "ray: {rollout_workers: 0}\n": "ray.rollout_workers",
    "optimizer: jax\n": "optimizer",
}


@pytest.mark.parametrize("text", sorted(BAD_CONFIGS))
def test_a_bad_config_exits_2_naming_file_and_key_before_loading_anything(text, tmp_path, monkeypatch,
                                                                          capsys):
    def must_not_load(*args, **kwargs):
        raise AssertionError("the trainer started before the config was validated")
    monkeypatch.setattr("ragteam.trainers.loop.Trainer", must_not_load)
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    assert ppo_graph.main(["--config", str(path), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ppo_graph: ") and str(path) in err and BAD_CONFIGS[text] in err


def test_yaml_number_forms_are_numbers(tmp_path):
    path = tmp_path / "ok.yaml"
    path.write_text("lr: 1e-5\nhead_lr: '2e-4'\nsteps: '3'\nppo: {clip: 1e-1}\n")
    config = load_config(path, {})
    assert (config.lr, config.head_lr, config.steps, config.ppo.clip) == (1e-5, 2e-4, 3, 0.1)
    path.write_text("ppo:\n")  # an empty section means the defaults
    assert load_config(path, {}).ppo == TrainConfig().ppo


def test_bad_command_line_values_are_named_too(capsys, monkeypatch):
    monkeypatch.setattr("ragteam.trainers.loop.Trainer", lambda *a, **k: 1 / 0)
    assert ppo_graph.main(["--questions-per-step", "0", "--no-progress"]) == 2
    assert "questions_per_step" in capsys.readouterr().err
    assert ppo_graph.main(["--model", "/nonexistent", "--no-progress"]) == 2
    assert "/nonexistent" in capsys.readouterr().err
    assert ppo_graph.main(["--device", "tpu", "--no-progress"]) == 2
    assert "device: use cpu, cuda, cuda:N or auto" in capsys.readouterr().err


def test_ray_flags_reach_the_config_section():
    args = ppo_graph.parser().parse_args(["--backend", "ray", "--ray-workers", "3", "--ray-address", "auto"])
    config = ppo_graph.config_from_args(args)
    assert (config.backend, config.ray.rollout_workers, config.ray.address) == ("ray", 3, "auto")
    assert config.optimizer == "deepspeed"  # the learner actor's optimizer


def test_device_flags_reach_the_config():
    config = ppo_graph.config_from_args(ppo_graph.parser().parse_args(["--device", "cuda:1", "--bf16"]))
    assert (config.device, config.bf16) == ("cuda:1", True)
    assert ppo_graph.parser().parse_args([]).bf16 is None  # absent: the config file decides


class Boom:
    """A pickle that would write a file when unpickled."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (Path.write_text, (self.marker, "owned"))


def test_checkpoints_never_unpickle_code(tmp_path):
    from ragteam.trainers.learner.checkpoint import load_rng_state, save_rng_state
    from ragteam.trainers.learner.optimizers import TorchOptimizer

    model = torch.nn.Linear(2, 2)
    optimizer = TorchOptimizer(model, lr=1e-3)
    optimizer.save(tmp_path)
    save_rng_state(tmp_path)
    optimizer.load(tmp_path)  # its own checkpoint loads weights-only
    load_rng_state(tmp_path)
    marker = tmp_path / "marker"
    for name in ("optimizer.pt", "rng.pt"):
        with open(tmp_path / name, "wb") as handle:
            pickle.dump({"module": Boom(marker)}, handle)
    with pytest.raises(pickle.UnpicklingError):
        optimizer.load(tmp_path)
    with pytest.raises(pickle.UnpicklingError):
        load_rng_state(tmp_path)
    assert not marker.exists()


def test_a_checkpoint_from_before_the_rename_still_loads(tmp_path):
    """Its learner state was called ``engine.pt`` (DeepSpeed's folder ``engine/``)."""
    from ragteam.trainers.learner.optimizers import TorchOptimizer

    model = torch.nn.Linear(2, 2)
    TorchOptimizer(model, lr=1e-3).save(tmp_path)
    (tmp_path / "optimizer.pt").rename(tmp_path / "engine.pt")
    with torch.no_grad():
        saved = model.weight.clone()
        model.weight.add_(1.0)
    TorchOptimizer(model, lr=1e-3).load(tmp_path)
    assert torch.equal(model.weight, saved)


def test_the_adamw_kernel_is_this_devices_choice_not_the_checkpoints(tmp_path):
    """AdamW runs fused when every parameter is on CUDA; torch's load_state_dict would restore
    whatever kernel the checkpoint's device used."""
    from ragteam.trainers.learner.optimizers import TorchOptimizer

    model = torch.nn.Linear(2, 2)
    saved = TorchOptimizer(model, lr=1e-3)
    assert saved.optimizer.param_groups[0]["fused"] is None  # on a CPU
    for group in saved.optimizer.param_groups:  # as a GPU run's checkpoint holds it
        group["fused"], group["foreach"] = True, False
    saved.save(tmp_path)
    loaded = TorchOptimizer(model, lr=1e-3)
    loaded.load(tmp_path)
    assert [(g["fused"], g["foreach"]) for g in loaded.optimizer.param_groups] == [(None, None)] * len(
        loaded.optimizer.param_groups)


def listening_sockets(pid: int) -> list[str]:
    """Local addresses this process listens on (TCP, v4 and v6), from /proc."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found = []
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state == "0A" and inode in inodes:  # 0A = LISTEN
                found.append(_address(local))
    return found


def _address(hex_address: str) -> str:
    host, port = hex_address.split(":")
    raw = bytes.fromhex(host)
    if len(raw) == 4:
        return ".".join(str(b) for b in raw[::-1]) + f":{int(port, 16)}"
    words = [raw[i:i + 4][::-1].hex() for i in range(0, 16, 4)]
    return ":".join(words) + f":{int(port, 16)}"


LOOPBACK = ("127.", "00000000:00000000:00000000:00000001", "00000000:00000000:0000ffff:7f")


@pytest.mark.slow
def test_the_deepspeed_optimizer_listens_on_no_network_interface():
    """In a fresh process (so ragteam's own one-process group is what gets set up, not one an
    earlier test left behind): after DeepSpeed starts, every listening socket of the process is on
    the loopback — and the socket scan itself is checked on a listener opened on purpose."""
    import subprocess
    import sys

    script = (
        "import json, os, socket, torch\n"
        "from tests.test_trainer_safety import listening_sockets\n"
        "from ragteam.trainers.learner.optimizers import make_optimizer\n"
        "assert not torch.distributed.is_initialized()\n"
        "make_optimizer('deepspeed', torch.nn.Linear(4, 4), lr=1e-3, zero_stage=2)\n"
        "after = listening_sockets(os.getpid())\n"
        "probe = socket.socket(); probe.bind(('127.0.0.1', 0)); probe.listen()\n"
        "seen = listening_sockets(os.getpid())\n"
        "print(json.dumps({'group': torch.distributed.is_initialized(), 'after': after,\n"
        "                  'probe': f'127.0.0.1:{probe.getsockname()[1]}' in seen}))\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=Path(__file__).resolve().parents[1],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["group"] and result["probe"]  # the group is up, and the scan sees a listener
    assert all(address.startswith(LOOPBACK) for address in result["after"]), result["after"]
