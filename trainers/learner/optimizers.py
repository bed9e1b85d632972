"""The learner's optimizers behind one small interface, so the PPO/SFT loops do not care which runs.

- ``torch``: plain AdamW — no build step; what unit tests use. Over N ranks it is plain data
  parallelism (every rank holds everything; gradients averaged each step): for LoRA and per-role
  adapters, whose state is small.
- ``deepspeed``: a DeepSpeed engine, ZeRO stage 0-3, over the learner's process group (N ranks,
  ``trainers.learner.data_parallel``; a one-process gloo group when none is set up), bf16 on a
  GPU, the optimizer state offloaded to DeepSpeed's CPU Adam unless ``offload`` is off. Its C++
  ops are JIT-built once into ``TORCH_EXTENSIONS_DIR`` (kept in ragteam's cache directory unless set).

Both: ``accumulate(loss, boundary)`` per micro-batch (the caller has already weighted the loss
for its share of the mini-batch), ``step()`` applies the update with gradient clipping and the
warmup schedule, ``save``/``load`` hold model + optimizer + scheduler state (plain AdamW leaves
frozen weights out: a resumed run rebuilds them from its model folder).
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

import torch
from torch import nn

from ragteam.trainers.learner.data_parallel import Ranks


def warmup_schedule(optimizer, warmup_steps: int):
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: min(1.0, (step + 1) / warmup_steps) if warmup_steps > 0 else 1.0)


def trainable_parameters(module: nn.Module) -> list[nn.Parameter]:
    return [p for p in module.parameters() if p.requires_grad]


def parameter_groups(module: nn.Module, lr: float, head_lr: float | None) -> list[dict]:
    """The value head (fresh, zero-initialized) may learn faster than the pretrained backbone."""
    head = [p for n, p in module.named_parameters() if p.requires_grad and n.startswith("value_head.")]
    body = [p for n, p in module.named_parameters() if p.requires_grad and not n.startswith("value_head.")]
    groups = [{"params": body, "lr": lr}]
    if head:
        groups.append({"params": head, "lr": head_lr if head_lr is not None else lr})
    return groups


def _all_on_cuda(groups: list[dict]) -> bool:
    """Whether AdamW can run fused (every parameter on CUDA): a few kernels per step instead of
    a foreach pass per Adam operation. Unfused, the optimizer took 201 ms of a 1.18 s
    shared-prompt PPO pass on an H100 (8 steps of a 1.7B model)."""
    return all(p.is_cuda for group in groups for p in group["params"])


def frozen_keys(module: nn.Module) -> set[str]:
    """The state-dict keys of ``module``'s frozen parameters (a LoRA run's base weights)."""
    return {key for key, value in module.state_dict(keep_vars=True).items()
            if isinstance(value, nn.Parameter) and not value.requires_grad}


def trained_state(module: nn.Module) -> dict:
    """``module``'s state dict without its frozen parameters: a run rebuilds those from its model
    folder on resume, so a LoRA or per-role adapter checkpoint holds the adapters, the value
    head and the buffers (a 0.5B model's per-role adapter SFT wrote 2.7 GB per checkpoint with
    the frozen base in it)."""
    frozen = frozen_keys(module)
    return {key: value for key, value in module.state_dict().items() if key not in frozen}


def load_trained_state(module: nn.Module, state: dict, folder: Path) -> None:
    """Restore ``trained_state`` (or a whole state dict, as older checkpoints hold): every key
    must be ``module``'s, and only frozen parameters may be absent."""
    missing, unexpected = module.load_state_dict(state, strict=False)
    lost = sorted(set(missing) - frozen_keys(module))
    if unexpected or lost:
        named = f"unexpected {', '.join(sorted(unexpected)[:3])}" if unexpected else f"missing {', '.join(lost[:3])}"
        raise ValueError(f"{folder}: the checkpoint's weights do not fit this model ({named}); "
                         "resume with the model and adapters the run was started with")


class TorchOptimizer:
    """Plain AdamW, or plain SGD (``rule``), with the warmup schedule and gradient clipping. Over several learner ranks
    (``Ranks.current()``) each rank holds the whole model and optimizer state, as plain data
    parallelism: the trainable weights start as the first rank's, and each step averages the
    ranks' gradients first (DeepSpeed's convention, which ``ppo_update`` scales its losses for).
    Meant for small trainable sets (LoRA, per-role adapters), whose gradients are cheap to send."""

    name = "torch"

    def __init__(self, module: nn.Module, lr: float, head_lr: float | None = None,
                 weight_decay: float = 0.0, max_grad_norm: float = 1.0, warmup_steps: int = 0,
                 groups: list[dict] | None = None, rule: str = "adamw"):
        """``groups``: the parameter groups when not ``parameter_groups``' two (per-role
        adapters, ``trainers.learner.adapters``). ``rule``: ``adamw``, or ``sgd`` (no momentum,
        no per-weight scaling: each weight moves by lr × its gradient, so an update whose
        questions' pushes cancel in the gradient cancels in the weights too, where Adam's
        per-weight normalisation would scale what is left of it up to lr)."""
        self.module = self.forward_module = module
        self.ranks = Ranks.current()
        groups = groups or parameter_groups(module, lr, head_lr)
        if rule == "sgd":
            self.optimizer = torch.optim.SGD(groups, lr=lr, weight_decay=weight_decay)
        elif rule == "adamw":
            self.optimizer = torch.optim.AdamW(groups, lr=lr, weight_decay=weight_decay,
                                               fused=_all_on_cuda(groups) or None)
        else:
            raise ValueError(f"unknown update rule {rule!r}: use adamw or sgd")
        self.scheduler = warmup_schedule(self.optimizer, warmup_steps)
        self.max_grad_norm = max_grad_norm
        self.ranks.broadcast_from_first(trainable_parameters(module))

    def accumulate(self, loss: torch.Tensor, boundary: bool) -> None:
        loss.backward()

    def step(self) -> float:
        parameters = trainable_parameters(self.module)
        self.ranks.average_gradients(parameters)
        norm = torch.nn.utils.clip_grad_norm_(parameters, self.max_grad_norm)
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return float(norm)

    @property
    def lr(self) -> float:
        return self.scheduler.get_last_lr()[0]

    @property
    def steps(self) -> int:
        """Optimizer steps taken, resumed with the scheduler's state: the weights' version."""
        return self.scheduler.last_epoch

    def full_state_dict(self, module: nn.Module) -> dict:
        return module.state_dict()

    def optimizer_state_numel(self) -> int:
        """Elements of optimizer state this rank holds (Adam's moments): all of it, on every rank."""
        return sum(t.numel() for s in self.optimizer.state.values() for t in s.values()
                   if torch.is_tensor(t) and t.dim() > 0)

    def save(self, folder: Path) -> None:
        if self.ranks.is_first:  # every rank holds the same state
            torch.save({"module": trained_state(self.module), "optimizer": self.optimizer.state_dict(),
                        "scheduler": self.scheduler.state_dict()}, folder / STATE_FILE)

    def load(self, folder: Path) -> None:
        state = torch.load(saved_state(folder, STATE_FILE, OLD_STATE_FILE), weights_only=True)  # tensors and plain data only
        load_trained_state(self.module, state["module"], folder)
        kernels = [(group["fused"], group["foreach"]) for group in self.optimizer.param_groups]
        self.optimizer.load_state_dict(state["optimizer"])
        # torch restores every group option saved, the kernel choice included: a checkpoint from
        # another device (or from before fusing) must not decide which kernel runs on this one
        for group, (fused, foreach) in zip(self.optimizer.param_groups, kernels):
            group["fused"], group["foreach"] = fused, foreach
        self.scheduler.load_state_dict(state["scheduler"])


# A checkpoint's learner state: ``optimizer.pt`` (plain AdamW), or DeepSpeed's ``optimizer/``
# folder (its tag). Checkpoints written before the rename name them after the DeepSpeed engine;
# "engine" now means a rollout engine only.
STATE_FILE, OLD_STATE_FILE = "optimizer.pt", "engine.pt"
DEEPSPEED_TAG, OLD_DEEPSPEED_TAG = "optimizer", "engine"


def saved_state(folder: Path, name: str, old_name: str) -> Path:
    """``folder / name``, or ``folder / old_name`` where only an older checkpoint's spelling exists."""
    return folder / (old_name if not (folder / name).exists() and (folder / old_name).exists() else name)


def _single_process_env() -> None:
    """DeepSpeed expects a launcher; one process on this machine needs only these."""
    if "MASTER_PORT" not in os.environ:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            os.environ["MASTER_PORT"] = str(probe.getsockname()[1])
    for key, value in {"MASTER_ADDR": "127.0.0.1", "RANK": "0", "LOCAL_RANK": "0",
                       "WORLD_SIZE": "1"}.items():
        os.environ.setdefault(key, value)


def _single_process_group() -> None:
    """A one-process gloo group with an in-memory store. DeepSpeed's own set-up would start a
    TCPStore that listens on every interface (whatever MASTER_ADDR says); one process needs no
    rendezvous at all, and gloo is kept on the loopback interface."""
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    torch.distributed.init_process_group("gloo", store=torch.distributed.HashStore(), rank=0,
                                         world_size=1)


def _extensions_dir() -> None:
    """Where DeepSpeed JIT-builds its C++ ops: ragteam's cache unless the user set one."""
    from ragteam.nodes.policies.offline_model import cache_dir

    os.environ.setdefault("TORCH_EXTENSIONS_DIR", str(cache_dir() / "torch_extensions"))


def build_deepspeed_ops() -> list[str]:
    """Build (or find built) the C++ ops a DeepSpeed learner loads here — CPU Adam, and on a CPU
    the shared-memory collectives — ahead of the first step (``make deepspeed-ops``, run before
    the tests): a learner otherwise compiles them inside its first step, and on a CI machine that
    was 4.4 minutes on one core while the tests of the other core waited for the build's lock.
    Returns the builders' names."""
    _extensions_dir()
    from deepspeed.accelerator import get_accelerator

    accelerator = get_accelerator()
    names = ["CPUAdamBuilder", *(["ShareMemCommBuilder"] if accelerator.device_name() == "cpu" else [])]
    for name in names:
        accelerator.create_op_builder(name).load(verbose=False)
    return names


class DeepSpeedOptimizer:
    """A DeepSpeed engine (ZeRO, CPU Adam unless ``offload`` is off) driven with explicit
    accumulation boundaries, on every rank of the learner's process group."""

    name = "deepspeed"

    def __init__(self, module: nn.Module, lr: float, head_lr: float | None = None,
                 weight_decay: float = 0.0, max_grad_norm: float = 1.0, warmup_steps: int = 0,
                 zero_stage: int = 2, offload: bool = True, bf16: bool = False,
                 groups: list[dict] | None = None):
        _extensions_dir()
        if not torch.distributed.is_initialized():
            _single_process_env()
            _single_process_group()
        import deepspeed
        from deepspeed.ops.adam import DeepSpeedCPUAdam

        self.ranks = Ranks.current()
        os.environ.update(RANK=str(self.ranks.rank), WORLD_SIZE=str(self.ranks.size))  # what DeepSpeed reads
        os.environ.setdefault("LOCAL_RANK", "0")
        deepspeed.init_distributed(dist_backend=torch.distributed.get_backend(), verbose=False)  # sees it is set up
        groups = groups or parameter_groups(module, lr, head_lr)
        offload = offload and zero_stage > 0  # ZeRO 0 has no optimizer partition to offload
        on_cpu = next(module.parameters()).device.type == "cpu"
        optimizer = (DeepSpeedCPUAdam(groups, lr=lr, weight_decay=weight_decay, adamw_mode=True)
                     if offload or on_cpu else torch.optim.AdamW(groups, lr=lr, weight_decay=weight_decay))
        config = {
            "train_micro_batch_size_per_gpu": 1,
            "gradient_accumulation_steps": 1,  # boundaries are set per call (variable micro-batches)
            "gradient_clipping": max_grad_norm,
            "zero_optimization": {"stage": zero_stage},
            "bf16": {"enabled": bf16},  # bf16 weights and activations, fp32 master weights in ZeRO
            "zero_allow_untested_optimizer": True,
            "steps_per_print": 10 ** 9,
            "wall_clock_breakdown": False,
        }
        if offload:
            config["zero_optimization"]["offload_optimizer"] = {"device": "cpu"}
        self.deepspeed, self.optimizer, _, self.scheduler = deepspeed.initialize(
            model=module, optimizer=optimizer, lr_scheduler=warmup_schedule(optimizer, warmup_steps),
            config=config)
        self.module = self.deepspeed.module
        # training forwards go through the engine: its forward counts ZeRO-3's micro-steps, and a
        # backward not preceded by one overwrites the gradient it should add to
        self.forward_module = self.deepspeed
        self.zero_stage = zero_stage

    def full_state_dict(self, module: nn.Module) -> dict:
        """``module``'s whole weights on every rank (ZeRO-3 gathers its shards: a collective, so
        every rank calls it)."""
        if self.zero_stage < 3:
            return module.state_dict()
        import deepspeed

        with deepspeed.zero.GatheredParameters(list(module.parameters())):
            return {name: value.detach().clone() for name, value in module.state_dict().items()}

    def optimizer_state_numel(self) -> int:
        """Elements of optimizer state this rank holds (fp32 master weights and Adam moments of
        its partition): what ZeRO divides by the rank count."""
        state = self.optimizer.state if hasattr(self.optimizer, "state") else {}
        held = sum(t.numel() for s in state.values() for t in s.values() if torch.is_tensor(t) and t.dim() > 0)
        masters = getattr(self.optimizer, "single_partition_of_fp32_groups", None) or \
            getattr(self.optimizer, "fp32_partitioned_groups_flat", None) or []
        return held + sum(t.numel() for t in masters)

    def accumulate(self, loss: torch.Tensor, boundary: bool) -> None:
        self.deepspeed.set_gradient_accumulation_boundary(boundary)
        self.deepspeed.backward(loss)

    def step(self) -> float:
        self.deepspeed.set_gradient_accumulation_boundary(True)
        self.deepspeed.step()
        norm = self.deepspeed.get_global_grad_norm()
        return float(norm) if norm is not None else float("nan")

    @property
    def lr(self) -> float:
        return self.deepspeed.get_lr()[0]

    @property
    def steps(self) -> int:
        """Optimizer steps taken, resumed with the scheduler's state: the weights' version."""
        return self.scheduler.last_epoch

    def save(self, folder: Path) -> None:
        self.deepspeed.save_checkpoint(str(folder), tag=DEEPSPEED_TAG, save_latest=False)

    def load(self, folder: Path) -> None:
        self.deepspeed.checkpoint_engine = _WeightsOnlyCheckpointEngine()
        tag = saved_state(folder, DEEPSPEED_TAG, OLD_DEEPSPEED_TAG).name
        path, _ = self.deepspeed.load_checkpoint(str(folder), tag=tag, load_optimizer_states=True,
                                              load_lr_scheduler_states=True)
        if path is None:
            raise FileNotFoundError(f"no DeepSpeed checkpoint in {folder}")


def _WeightsOnlyCheckpointEngine():
    """DeepSpeed's torch checkpoint engine with one change: files load with ``weights_only=True``
    (DeepSpeed's own loader unpickles anything, so a hostile ``--resume`` folder could run code).
    The few plain DeepSpeed types its checkpoints hold are allow-listed by name."""
    from deepspeed.runtime.checkpoint_engine.torch_checkpoint_engine import TorchCheckpointEngine

    class WeightsOnly(TorchCheckpointEngine):
        def load(self, path: str, map_location=None):
            with torch.serialization.safe_globals(_deepspeed_checkpoint_types()):
                return torch.load(path, map_location=map_location, weights_only=True)

    return WeightsOnly()


def _deepspeed_checkpoint_types() -> list:
    from deepspeed.runtime.fp16.loss_scaler import LossScaler
    from deepspeed.runtime.zero.config import ZeroStageEnum
    from deepspeed.utils.tensor_fragment import fragment_address

    return [ZeroStageEnum, LossScaler, fragment_address]


OPTIMIZERS = ("deepspeed", "torch")


def make_optimizer(name: str, module: nn.Module, **options) -> "TorchOptimizer | DeepSpeedOptimizer":
    """The optimizer ``name`` (deepspeed | torch) over ``module``'s trainable parameters."""
    if name == "torch":
        for deepspeed_only in ("zero_stage", "offload", "bf16"):
            options.pop(deepspeed_only, None)
        return TorchOptimizer(module, **options)
    if name == "deepspeed":
        if options.pop("rule", "adamw") != "adamw":
            raise ValueError("optimizer: deepspeed updates with Adam; update_rule: sgd needs optimizer: torch")
        return DeepSpeedOptimizer(module, **options)
    raise ValueError(f"unknown optimizer {name!r}: use {' or '.join(OPTIMIZERS)}")
