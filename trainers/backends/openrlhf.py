"""Everything ragteam takes from OpenRLHF, in one module, so an OpenRLHF upgrade is one file to
change. Used by the Ray backend (``trainers/backends/ray.py``).

What comes from OpenRLHF:
- ``RolloutRayActor`` (its vLLM rollout actor): ``RolloutWorker`` subclasses it. OpenRLHF's
  actor answers one prompt per request; ragteam's worker runs whole graph rollouts (every role's
  call) on the engine the parent class starts, and loads weights through ragteam's vLLM worker
  extension, because OpenRLHF's ``WorkerWrap`` receives them over NCCL or CUDA IPC only.
- ``RayActorGroup`` and ``BaseModelActor``: the learner group. ``LearnerActor`` wraps ragteam's
  shared policy-value model and its DeepSpeed engine (``trainers/learner/learner.py``), so the team keeps
  one model whose value head is the critic. OpenRLHF's own policy/critic/reference actors need
  CUDA at their first forward and a separate critic model; they are not used.
- ``PolicyLoss``, ``ValueLoss``, ``compute_approx_kl``, ``aggregate_loss``: the update's losses,
  applied to ragteam's per-call micro-batches (one value, return and advantage per LLM call,
  from ragteam's cross-call GAE/GRPO: OpenRLHF's GAE runs within one sequence and cannot carry a
  team reward back to the planner's earlier call). OpenRLHF's ``Experience`` is not used: the
  learner's buffer never leaves ragteam's form.

Version pins (checked when the backend starts): openrlhf 0.11.2, installed ``--no-deps`` (its
requirements build flash-attn from source and pin another transformers/DeepSpeed), and ray 2.55.0.
"""

from __future__ import annotations

import importlib.machinery
import importlib.metadata
import importlib.util
import os
import sys
import types
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

OPENRLHF_VERSION = "0.11.2"
RAY_VERSION = "2.55.0"
INSTALL = (f'pip install "ray[default]=={RAY_VERSION}" pylatexenc torchdata jsonlines optree && '
           f"pip install --no-deps openrlhf=={OPENRLHF_VERSION}   (or: make setup-ray)")


def check_versions() -> None:
    """A clear error naming the install command when the pinned packages are not there."""
    for package, wanted in (("openrlhf", OPENRLHF_VERSION), ("ray", RAY_VERSION)):
        try:
            found = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            raise RuntimeError(f"the Ray backend needs {package}=={wanted}: {INSTALL}") from None
        if found != wanted:
            raise RuntimeError(f"the Ray backend is pinned to {package}=={wanted}, found {found}: {INSTALL}")


def install_flash_attn_standin() -> None:
    """OpenRLHF's model code imports flash-attn at module level (``models/ring_attn_utils``) for
    packed samples and ring attention, which ragteam never uses. Where flash-attn is absent (CPU
    machines; it only builds against CUDA) stand-in modules satisfy the import: ``rearrange`` is
    einops' own, everything else raises if it is ever called. The real package always wins."""
    if "flash_attn" in sys.modules or importlib.util.find_spec("flash_attn") is not None:
        return
    from einops import rearrange

    def missing(name):
        def call(*args, **kwargs):
            raise RuntimeError(f"flash_attn.{name} was called, but flash-attn is not installed "
                               "(ragteam's Ray backend does not pack samples or use ring attention)")
        return call

    modules = {}
    for name in ("flash_attn", "flash_attn.bert_padding", "flash_attn.utils", "flash_attn.utils.distributed"):
        # a spec without a file or version: transformers' availability probe reads "not installed"
        modules[name] = types.ModuleType(name)
        modules[name].__spec__ = importlib.machinery.ModuleSpec(name, None)
    padding = modules["flash_attn.bert_padding"]
    padding.rearrange = rearrange
    for name in ("index_first_axis", "pad_input", "unpad_input"):
        setattr(padding, name, missing(f"bert_padding.{name}"))
    modules["flash_attn.utils.distributed"].all_gather = missing("utils.distributed.all_gather")
    modules["flash_attn"].bert_padding = padding
    modules["flash_attn"].utils = modules["flash_attn.utils"]
    modules["flash_attn.utils"].distributed = modules["flash_attn.utils.distributed"]
    sys.modules.update(modules)


install_flash_attn_standin()  # before anything below imports openrlhf.models

import ray  # noqa: E402
import torch  # noqa: E402
from openrlhf.models import PolicyLoss, ValueLoss, aggregate_loss  # noqa: E402
from openrlhf.models.utils import compute_approx_kl  # noqa: E402
from openrlhf.trainer.ray.launcher import BaseModelActor, RayActorGroup  # noqa: E402
from openrlhf.trainer.ray.vllm_engine import RolloutRayActor  # noqa: E402

from ragteam.trainers.algorithms.losses import DUAL_CLIP_CAP  # noqa: E402
from ragteam.trainers.algorithms.ppo import LossTerms, ppo_loss  # noqa: E402
from ragteam.trainers.experience import Experience  # noqa: E402


# -- OpenRLHF's losses as the terms of ragteam's PPO loss ----------------------------------------
def _policy(logprobs, old, advantages, mask, clip_low, clip_high, aggregation, dual_clip=None):
    """OpenRLHF's ``PolicyLoss`` (its ``token_level_loss`` is ``per_token``; ``dual_clip`` its
    bound under negative advantages); one advantage per call, broadcast over the call's
    completion tokens, or one per token (importance-weighted)."""
    loss = PolicyLoss(clip_low, clip_high, dual_clip=dual_clip, token_level_loss=aggregation == "per_token")
    per_token = (advantages.unsqueeze(1).expand_as(logprobs) if advantages.dim() == 1 else advantages) * mask
    value, clip_ratio, ppo_kl, _, _ = loss(logprobs, old, per_token, mask)
    return value, {"clip_frac": clip_ratio.item(), "approx_kl_old": ppo_kl.item()}


def _value(values, old_values, returns, clip):
    """OpenRLHF's ``ValueLoss`` on one value per call (a plain mean)."""
    return ValueLoss(clip)(values, old_values, returns)


def _kl(logprobs, reference, mask, aggregation):
    """OpenRLHF's k3 estimator, aggregated like the policy loss."""
    kl = compute_approx_kl(logprobs, reference, kl_estimator="k3")
    return aggregate_loss(kl, mask, token_level_loss=aggregation == "per_token")


OPENRLHF_TERMS = LossTerms(policy=_policy, value=_value, kl=_kl)


def openrlhf_ppo_loss(settings, stats: dict[str, list[float]]):
    """ragteam's PPO loss (``trainers.algorithms.ppo.ppo_loss``: the same per-call batches,
    never converted to OpenRLHF samples and back) with OpenRLHF's three terms; ``policy_loss:
    dual_clip`` is OpenRLHF's policy loss with its dual clip at ragteam's bound."""
    if settings.policy_loss == "dual_clip":
        return ppo_loss(settings, stats, replace(OPENRLHF_TERMS, policy=partial(_policy, dual_clip=DUAL_CLIP_CAP)))
    return ppo_loss(settings, stats, OPENRLHF_TERMS)


# -- the learner actor ---------------------------------------------------------------------------
class _Learner(BaseModelActor):
    """ragteam's ``Learner`` in a Ray actor, one per learner rank (OpenRLHF's actor base gives
    each its rank and rank 0's address and port)."""

    def init_model_from_pretrained(self, config: dict, model_path: str, frozen_roles: list[str],
                                   threads: int) -> None:
        from ragteam.trainers.config import TrainConfig
        from ragteam.trainers.learner.data_parallel import init_learner_group
        from ragteam.trainers.learner.learner import Learner

        torch.set_num_threads(threads)  # Ray starts actors with one OpenMP thread
        settings = TrainConfig.model_validate(config)
        # where rank 0 serves the learner group's and the weight channel's stores: the loopback
        # on one machine, else the node's address OpenRLHF gave every rank
        self.host = self._master_addr if settings.ray.address else "127.0.0.1"
        if self._world_size > 1:
            init_learner_group(self.host, self._master_port, self._rank, self._world_size)
        self.learner = Learner(settings, model_path, [] if settings.frozen_policy else frozen_roles)

    def learn(self, items: list[Experience], step: int) -> dict:
        """The step's whole learning half in one call: values, advantages, the PPO epochs."""
        return self.learner.learn(items, step, loss=openrlhf_ppo_loss)

    def publish_weights(self) -> list:
        """The learner's weights put in Ray's store from here (by the first rank; every rank
        takes part in gathering them), so they reach the engines without passing through the
        driver; the reference comes back in a list (a bare one would be resolved to the bytes
        on the way)."""
        from ragteam.nodes.policies.vllm import weights_blob

        weights = self.learner.weights()
        return [ray.put(weights_blob(weights))] if self.learner.ranks.is_first else []

    def adapter_digests(self) -> dict:
        """adapter name (None: the ``lora`` one) → a digest of its weights (``Learner.adapter_digests``)."""
        return self.learner.adapter_digests()

    def publish_adapters(self, names: list) -> list:
        """These LoRA adapters' files (adapter name → files) put in Ray's store by the first rank,
        and their bytes: ``[(reference, bytes)]`` (in a list, as ``publish_weights``)."""
        if not self.learner.ranks.is_first:
            return []
        adapters = {name: self.learner.adapter_files(name) for name in names}
        return [(ray.put(adapters), sum(len(data) for files in adapters.values() for data in files.values()))]

    def open_channel(self, workers: list) -> None:
        """The first rank opens the weight channel (``trainers.learner.weight_channel``) to
        every rollout worker (Ray handles), on ``self.host``: gloo on CPU, NCCL on GPUs."""
        if not self.learner.ranks.is_first:
            return
        from ragteam.trainers.learner.weight_channel import WeightChannel

        self.channel = None  # a previous channel's group is dropped with it
        self.channel = WeightChannel([RemoteEngine(worker) for worker in workers],
                                     transport="nccl" if torch.cuda.is_available() else "gloo",
                                     host=self.host)
        self.engine_dtype = getattr(torch, ray.get(workers[0].engine_dtype.remote()))

    def send_weights(self) -> dict:
        """The learner's weights (every rank gathers under ZeRO-3) streamed by the first rank over
        the channel to every engine at once, cast to the engines' dtype; its figures."""
        weights = self.learner.weights()
        return self.channel.send(weights, self.engine_dtype) if self.learner.ranks.is_first else {}

    def logprobs(self, prompt_ids: list[int], completion_ids: list[int], temperature: float,
                 role: str = "") -> list[float]:
        return self.learner.logprobs(prompt_ids, completion_ids, temperature, role)

    def lr(self) -> float:
        return self.learner.optimizer.lr

    def version(self) -> int:
        return self.learner.version

    def save(self, folder: str, step: int, extra: dict) -> None:
        self.learner.save(Path(folder), step, extra)

    def resume(self, folder: str) -> dict | None:
        return self.learner.resume(Path(folder))

    def export(self, folder: str) -> None:
        self.learner.export(Path(folder))

    def empty_cache(self) -> None:  # OpenRLHF's calls CUDA unconditionally
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


LearnerActor = ray.remote(_Learner)


class RemoteEngine:
    """A rollout worker as the weight channel sees an engine (``join_channel``,
    ``receive_weights``, ``in_background``), over Ray calls: each call returns at once and its
    future is awaited after the broadcast, as the channel does with a local engine."""

    def __init__(self, worker):
        self.worker = worker

    def join_channel(self, host: str, port: int, rank: int, world_size: int, transport: str):
        return self.worker.join_channel.remote(host, port, rank, world_size, transport)

    def receive_weights(self, layouts: list):
        return self.worker.receive_weights.remote(layouts)

    @staticmethod
    def in_background(call):
        return call.future()


def learner_group(ranks: int, gpus: float) -> RayActorGroup:
    """``ranks`` learner actors, ``gpus`` each. On GPUs OpenRLHF packs them into one placement
    group (a GPU each); on CPU they reserve no CPU, since rollouts and the update take turns."""
    if gpus > 0:
        return RayActorGroup(1, ranks, LearnerActor, num_gpus_per_actor=gpus)
    return RayActorGroup(ranks, 1, LearnerActor, num_gpus_per_actor=0)  # no GPU placement group


# -- the rollout worker --------------------------------------------------------------------------
@dataclass
class WorkerSpec:
    config: dict            # the TrainConfig, as a dict
    model_path: str
    frozen_roles: list[str]
    seed: int
    gpus: float
    cpu_ids: str | None     # vLLM's OpenMP binding on CPU (VLLM_CPU_OMP_THREADS_BIND), e.g. "1"
    kv_cache_gib: int
    engine_options: dict    # the engine's options (``trainers.config.engine_options``)


class _RolloutWorker(RolloutRayActor.__ray_actor_class__):
    """OpenRLHF's vLLM rollout actor, running ragteam graph rollouts on its engine."""

    async def __init__(self, spec: WorkerSpec):
        from ragteam.nodes.policies.vllm import _engine_environment, engine_args

        _engine_environment()
        os.environ["VLLM_CPU_KVCACHE_SPACE"] = str(spec.kv_cache_gib)
        if spec.cpu_ids is not None:
            os.environ["VLLM_CPU_OMP_THREADS_BIND"] = spec.cpu_ids
        # The model runs in the engine-core process, a direct child of this actor: Ray ends an
        # actor's children when the actor dies, but vLLM's multiprocess executor would add a
        # grandchild that outlives a killed worker (measured: 4 GB left behind per kill).
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        options = engine_args(spec.model_path, seed=spec.seed, gpu=spec.gpus > 0, **spec.engine_options)
        # one process per engine unless it spans GPUs (tensor parallel: Ray places the shards)
        executor = "uni" if options.get("tensor_parallel_size", 1) == 1 else "ray"
        await super().__init__(num_gpus=spec.gpus, distributed_executor_backend=executor, **options)
        # Only now the graph and the stores: the engine's processes are already started
        # (see nodes.policies.vllm on what a spawned engine must not inherit).
        self._setup(spec)

    def _setup(self, spec: WorkerSpec) -> None:
        from transformers import AutoTokenizer

        from ragteam.nodes.policies.vllm import EnginePolicy

        self.spec = spec
        self.policy = EnginePolicy(self.llm, AutoTokenizer.from_pretrained(spec.model_path), "learner")
        self.configure(spec.config, spec.frozen_roles)

    def configure(self, config: dict, frozen_roles: list[str]) -> None:
        """Run ``config``'s graph and settings from now on (a trainer given this worker hands it
        its own run); the engine stays as it is."""
        from ragteam.trainers.config import TrainConfig
        from ragteam.nodes.policies.hf import HFPolicy
        from ragteam.trainers.rollout import RolloutSide, frozen_player

        settings = TrainConfig.model_validate(config)
        on_gpu = self.spec.gpus > 0  # the initial weights beside the engine, in the engine's precision
        frozen = frozen_player(settings, frozen_roles, lambda: HFPolicy.from_pretrained(
            self.spec.model_path, name="frozen", device="cuda" if on_gpu else "cpu", bf16=on_gpu))
        if settings.adapters:
            self._serve_team(settings.adapters)
        self.side = RolloutSide(settings, self.policy, frozen, frozen_roles)

    def _serve_team(self, adapters: dict) -> None:
        """Each role's calls under its adapter (``EnginePolicy.serve_team``); the trainer sends the
        adapters before the first rollout. A worker already serving another team refuses: its
        engine's LoRA slots hold that team's adapters."""
        from ragteam.nodes.policies.role_adapters import RoleMap

        team = RoleMap({name: settings.roles for name, settings in adapters.items()})
        current = self.policy.adapters
        if current is None:
            self.policy.serve_team(team)
        elif current.roles() != team.roles():
            raise ValueError("this rollout worker's engine serves other per-role adapters "
                             f"({current.roles()}); start new workers for this run")

    def serves(self, model_path: str, engine_options: dict) -> bool:
        """Whether this worker's engine was started for ``model_path`` with these options (a None
        is the default)."""
        from ragteam.nodes.policies.vllm import same_engine

        return same_engine(self.spec.model_path, self.spec.engine_options, model_path, engine_options)

    async def rollout(self, examples: list, tag: str) -> tuple[list, list]:
        """Graph rollouts of ``examples`` and the runs that failed (a worker that dies returns
        none: the driver runs its share again)."""
        return await self.side.collect(examples, tag)

    async def load_weights_blob(self, blob: bytes) -> None:
        """Load a ``weights_blob`` into this worker's engine (Ray resolves a reference to it)."""
        await self.policy.load_weights_blob(blob)

    async def load_adapters(self, adapters: dict) -> None:
        """Load LoRA adapters (name → a PEFT folder's files; Ray resolves a reference to them)
        into this worker's engine (``weight_sync: adapter``): the ``lora`` one (None) serves every
        request, a per-role adapter its roles' requests."""
        for name, files in adapters.items():
            await self.policy.load_adapter(files, name)

    async def join_channel(self, host: str, port: int, rank: int, world_size: int, transport: str) -> None:
        """Join the learner's weight channel as ``rank`` (``open_channel``)."""
        await self.policy.join_channel(host, port, rank, world_size, transport)

    async def receive_weights(self, layouts: list) -> None:
        """Take one weight update from the channel while the learner broadcasts it."""
        await self.policy.receive_weights(layouts)

    def engine_dtype(self) -> str:
        """The engine's dtype by name (``float32``, ``bfloat16``): what the weights are cast to."""
        return str(self.policy.engine_dtype).removeprefix("torch.")

    def set_weight_version(self, version: int) -> None:
        """The learner's version its engine's weights now hold (recorded on every call)."""
        self.policy.weight_version = version

    async def generate_calls(self, requests: list) -> list:
        """ragteam generation requests on this worker's engine, as the graph's calls make them
        (OpenRLHF's ``generate`` takes one raw prompt); the engine-vs-learner check uses it."""
        return await self.policy.generate(requests)

    def pid(self) -> int:
        return os.getpid()


RolloutWorker = ray.remote(_RolloutWorker)
