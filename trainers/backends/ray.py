"""The Ray backend (``backend: ray``): rollout workers and a learner actor, through OpenRLHF.

Its halves of a step (``trainers.loop`` owns the step itself):

- **rollouts**: the step's questions are split in order over the rollout workers (Ray actors,
  each owning a vLLM engine); each runs the method graph on its share and returns finished
  rollouts. A worker that dies mid-step is restarted by Ray (``max_restarts``), gets the current
  weights and its share again; a share comes back whole or not at all, so a step trains on every
  question exactly once or fails;
- **learn**: one call to every learner actor (``ray.learner_ranks`` data-parallel ranks) with
  the scored buffer, put in Ray's store once; values, advantages and the PPO epochs (OpenRLHF's
  losses) all happen there, each rank on its dealt share (``trainers/backends/openrlhf.py``,
  ``trainers/learner/data_parallel.py``);
- **sync**: with ``weight_sync: channel`` (the default) the learner's first rank streams its
  weights in buckets over a ``torch.distributed`` group every worker's engine has joined
  (``trainers/learner/weight_channel.py``), to all engines at once; with ``blob`` it puts them in
  Ray's object store and each engine loads them from there in turn; with ``adapter`` (LoRA) the
  first rank puts only the adapters' files there (the ``lora`` one, or each per-role adapter the
  update changed, each role's calls served under its own) and every engine, serving the base
  weights plus those adapters, loads them at once. Either way they never pass through the driver.
  A restarted worker gets the current weights as a blob (or every adapter), and the channel is
  opened again (with it) at the next sync.

With asynchronous rollouts (``async.max_staleness`` > 0) the next steps' runs are started before
the update; the workers, asyncio actors, take a sync between the calls of the runs in flight.
"""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from ragteam.nodes.policies.spec import model_dir
from ragteam.stores.datasets import QAExample
from ragteam.trainers.config import TrainConfig, engine_options
from ragteam.trainers.experience import Experience
from ragteam.trainers.rollout import Rollout
from ragteam.trainers.weight_sync import WeightSync


def shards(items: list, parts: int) -> list[list]:
    """``items`` in order, cut into ``parts`` contiguous slices whose sizes differ by at most 1."""
    size, extra = divmod(len(items), parts)
    out, start = [], 0
    for part in range(parts):
        end = start + size + (part < extra)
        out.append(items[start:end])
        start = end
    return out


def cpu_binding(worker: int, workers: int) -> str | None:
    """Disjoint CPU sets for the workers' vLLM threads on one machine (None when there are more
    workers than CPUs: then they share, unbound)."""
    cpus = sorted(os.sched_getaffinity(0))
    if workers > len(cpus):
        return None
    return ",".join(str(c) for c in shards(cpus, workers)[worker])


def start_ray(config: TrainConfig) -> bool:
    """Join ``ray.address``, or start a local Ray without the dashboard whose every port listens
    on 127.0.0.1 only; whether a local Ray was started here (its starter shuts it down)."""
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    if not config.ray.address:
        _loopback_only()
    import ray

    if ray.is_initialized():
        return False
    env = {"env_vars": {"HF_HUB_OFFLINE": os.environ.get("HF_HUB_OFFLINE", "1"),
                        "TOKENIZERS_PARALLELISM": "false"}}
    for name in ("RAGTEAM_CACHE_DIR", "TORCH_EXTENSIONS_DIR", "VLLM_CACHE_ROOT"):
        if name in os.environ:
            env["env_vars"][name] = os.environ[name]
    if config.ray.address:
        ray.init(address=config.ray.address, runtime_env=env, log_to_driver=False)
    else:
        ray.init(num_cpus=max(len(os.sched_getaffinity(0)), config.ray.rollout_workers),
                 include_dashboard=False, runtime_env=env, log_to_driver=False)
    return not config.ray.address


def _loopback_only() -> None:
    """Ray turns 127.0.0.1 into the machine's address, so its servers would listen on the
    network; its single-machine mode (the switch it uses on macOS and Windows) keeps them on
    the loopback. The variable reaches the processes Ray starts; the constant covers a ``ray``
    module imported before this ran (measured: all 13 listening sockets on 127.0.0.1)."""
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    from ray._private import ray_constants

    ray_constants.ENABLE_RAY_CLUSTER = False


def _wait_for_restart(worker, timeout_s: float = 600) -> None:
    """Block until Ray has restarted ``worker`` (its engine is up again); raises ActorDiedError
    once its restarts are spent, GetTimeoutError after ``timeout_s``. Only this probe is retried
    by Ray (``max_task_retries=-1``: Ray holds it until the actor is back, whatever error the
    dying actor gave it): the actor's own tasks are not, because a rollout retried behind the
    driver's back would run on the restarted engine's initial weights."""
    import ray

    ray.get(worker.pid.options(max_task_retries=-1).remote(), timeout=timeout_s)


_WORKER_SETS = itertools.count()


def start_rollout_workers(config: TrainConfig, frozen_roles: list[str]) -> list:
    """``ray.rollout_workers`` rollout workers (Ray actors, each starting a vLLM engine) for
    ``config``'s run; Ray must be started (``start_ray``). Returns once every engine is up."""
    import ray

    from ragteam.trainers.backends.openrlhf import RolloutWorker, WorkerSpec

    ray_settings = config.ray
    on_gpu = ray_settings.gpus_per_worker > 0
    worker_set = next(_WORKER_SETS)  # live actors' names must differ
    workers = []
    for index in range(ray_settings.rollout_workers):
        spec = WorkerSpec(config=config.to_dict(), model_path=model_dir(config.model),
                          frozen_roles=frozen_roles, seed=config.seed + index,
                          gpus=ray_settings.gpus_per_worker,
                          cpu_ids=None if on_gpu or ray_settings.address
                          else cpu_binding(index, ray_settings.rollout_workers),
                          kv_cache_gib=ray_settings.kv_cache_gib, engine_options=engine_options(config))
        workers.append(RolloutWorker.options(
            num_cpus=ray_settings.cpus_per_worker, num_gpus=ray_settings.gpus_per_worker,
            max_restarts=ray_settings.max_worker_restarts, max_concurrency=1000,
            name=f"ragteam-rollout-{os.getpid()}-{worker_set}-{index}").remote(spec))
    ray.get([worker.pid.remote() for worker in workers])  # engines up, or their error
    return workers


def stop_rollout_workers(workers: list) -> None:
    """End rollout workers and their engines (nothing to do once Ray is shut down)."""
    import ray

    if ray.is_initialized():
        for worker in workers:
            ray.kill(worker, no_restart=True)


class RayBackend:
    """A ``trainers.loop.Backend`` over Ray actors (see the module docstring). ``workers``:
    started rollout workers (``start_rollout_workers``) to use instead of starting them, kept by
    the caller; their engines must serve the run's model with its engine options, they take the
    run's graph and settings, and get the learner's weights before their first rollout."""

    def __init__(self, config: TrainConfig, frozen_roles: list[str], workers: list | None = None):
        from ragteam.trainers.backends.openrlhf import check_versions

        check_versions()
        self.config = config
        self.model_path = model_dir(config.model)
        self.frozen_roles = frozen_roles
        self.owns_ray = start_ray(config)
        from ragteam.trainers.backends.openrlhf import learner_group

        self.owns_workers = workers is None
        if workers is not None:
            self.workers = list(workers)
            self._adopt(self.workers)
        self.learner = learner_group(config.ray.learner_ranks, config.ray.learner_gpus)
        threads = max(1, len(os.sched_getaffinity(0)) // config.ray.learner_ranks)  # the ranks share the cores
        self._learner_call("init_model_from_pretrained", config.to_dict(), self.model_path,
                           frozen_roles, threads)
        if workers is None:
            self.workers = start_rollout_workers(config, frozen_roles)
        self.weight_sync = RayWeightSync(self._learner_call, self.workers, config.weight_sync)
        self._stale = not self.owns_workers  # given engines hold whatever they last served

    def _adopt(self, workers: list) -> None:
        """Check that given (or restarted) workers' engines serve this run, and hand them its
        graph and settings (a restarted actor comes back with the config it was created with)."""
        import ray

        options = engine_options(self.config)
        if not all(ray.get([worker.serves.remote(self.model_path, options) for worker in workers])):
            raise ValueError(f"the given rollout workers serve another model or other options than "
                             f"the run's ({self.config.model}, {options})")
        ray.get([worker.configure.remote(self.config.to_dict(), self.frozen_roles) for worker in workers])

    # -- actors ------------------------------------------------------------------------------
    def _learner_call(self, method: str, *args):
        """``method`` on every learner rank (their collectives need all of them); the first
        rank's answer."""
        import ray

        return ray.get(self.learner.async_run_method(method, *args))[0]

    # -- the backend's halves of a step --------------------------------------------------------
    def start_rollouts(self, examples: Sequence[QAExample], tag: str) -> "RayRuns":
        """The questions' runs, sharded over the workers and started there. The workers are
        asyncio actors: a weight sync reaches their engines between calls of runs in flight."""
        if self._stale:
            self.sync()
        parts = shards(list(examples), len(self.workers))
        return RayRuns(parts, tag, {self.workers[i].rollout.remote(part, tag): i
                                    for i, part in enumerate(parts) if part})

    def finish_rollouts(self, started: "RayRuns") -> tuple[list[Rollout], dict]:
        """Every question's rollouts, in order; a dead worker's share is run again once Ray has
        restarted it (with the current weights)."""
        import ray
        from ray.exceptions import RayActorError

        parts, tag, pending = started.parts, started.tag, started.pending
        results: list[tuple[list, list]] = [([], []) for _ in parts]
        restarts = 0
        while pending:
            [ref], _ = ray.wait(list(pending), num_returns=1)
            index = pending.pop(ref)
            try:
                results[index] = ray.get(ref)
            except RayActorError:
                restarts += 1
                worker = self.workers[index]
                _wait_for_restart(worker)  # raises ActorDiedError once its restarts are spent
                if not self.owns_workers:
                    self._adopt([worker])
                self.weight_sync.restarted([worker])  # initial weights, in no channel
                self._mark_version([worker])
                pending[worker.rollout.remote(parts[index], tag)] = index
        return ([rollout for part, _ in results for rollout in part],
                {"worker_restarts": restarts, "failed": [run for _, failed in results for run in failed]})

    def rollouts(self, examples: Sequence[QAExample], tag: str) -> tuple[list[Rollout], dict]:
        return self.finish_rollouts(self.start_rollouts(examples, tag))

    def learn(self, items: list[Experience], step: int) -> dict:
        import ray

        return self._learner_call("learn", ray.put(items), step)  # stored once for every rank

    def sync(self) -> float:
        """The learner's weights into every engine (see the module docstring); seconds taken."""
        self._stale = False
        seconds = self.weight_sync.sync()
        self._mark_version(self.workers)
        return seconds

    def _mark_version(self, workers: list) -> None:
        """Tell ``workers`` which learner version their engines now hold (``weight_version``)."""
        import ray

        version = self._learner_call("version")
        ray.get([worker.set_weight_version.remote(version) for worker in workers])

    def lr(self) -> float:
        return self._learner_call("lr")

    def learner_logprobs(self, prompt_ids: list[int], completion_ids: list[int], temperature: float,
                         role: str = "") -> list[float]:
        """The learner's log-probs of recorded ids (to check an engine against it); with per-role
        adapters, under ``role``'s adapter."""
        return self._learner_call("logprobs", prompt_ids, completion_ids, temperature, role)

    def engine_generate(self, requests) -> list:
        """Generations of the first worker's engine for ``requests`` (to check it against the learner)."""
        import ray

        return ray.get(self.workers[0].generate_calls.remote(requests))

    def save(self, folder: Path, step: int, extra: dict) -> None:
        self._learner_call("save", str(folder), step, extra)

    def resume(self, folder: Path) -> dict | None:
        return self._learner_call("resume", str(folder))

    def export(self, folder: Path) -> None:
        self._learner_call("export", str(folder))

    def close(self) -> None:
        """End the learner actors and the workers started here (given ones stay up); a local Ray
        started here is shut down. Safe to call twice."""
        import ray

        if not ray.is_initialized():
            return
        if self.owns_workers:
            stop_rollout_workers(self.workers)
        for actor in self.learner._actor_handlers:  # RayActorGroup has no public accessor
            ray.kill(actor, no_restart=True)
        if self.owns_ray:
            ray.shutdown()


@dataclass
class RayRuns:
    """A step's runs in the rollout workers: each worker's share of the questions and the
    reference of its task (→ the share's index)."""

    parts: list[list]
    tag: str
    pending: dict

    def cancel(self) -> None:
        import ray

        for ref in self.pending:
            ray.cancel(ref)


class RayWeightSync(WeightSync):
    """The moves of ``trainers.weight_sync`` from the learner actors to the rollout workers'
    engines: the learner's first rank puts what it sends in Ray's store or streams it, so the
    weights never pass through the driver."""

    def __init__(self, learner_call, workers: list, mode: str):
        super().__init__(mode, workers)
        self.learner_call = learner_call

    def adapter_digests(self) -> dict[str | None, str]:
        return self.learner_call("adapter_digests")

    def send_adapters(self, names: list[str | None], engines: list) -> int:
        """The adapters' files (a few MB: one reference) into these engines at once."""
        import ray

        [(adapters, size)] = self.learner_call("publish_adapters", names)
        ray.get([worker.load_adapters.remote(adapters) for worker in engines])
        return size

    def open_channel(self, engines: list) -> None:
        self.learner_call("open_channel", engines)

    def stream(self) -> None:
        self.learner_call("send_weights")

    def load_blob(self, engines: list) -> None:
        """One engine at a time (see ``trainers.weight_sync``), from one reference."""
        import ray

        [weights] = self.learner_call("publish_weights")
        for worker in engines:
            ray.get(worker.load_weights_blob.remote(weights))
