"""vLLM policy: continuous batching, prefix caching, exact ids and behaviour log-probs.

- Prompts are rendered and tokenized here, once, exactly as for the HF policy, and sent to the
  engine as token ids: the ids the trainer sees are the ids the model conditioned on.
- Sampling uses the request's temperature with no top-k/top-p, and the engine reports
  *processed* log-probs (after temperature scaling), so the recorded log-probs are the sampling
  distribution's — the PPO ratio's denominator.
- The completion is the engine's token ids (through the token that closed a stop string, or
  EOS); its text is decoded from those ids, so ``decode(ids) == text`` as with the HF policy.
- Requests go to the engine one by one as they arrive; vLLM's scheduler batches whatever is in
  flight at every step (continuous batching), so no coalescer is needed.

vLLM's async engine belongs to one event loop, but graph runs may come from many (every
``asyncio.run``); the engine therefore lives on its own loop in a daemon thread and callers await
its results from theirs. Its engine core and worker are separate processes, started by spawn, so
a script that uses this policy needs an ``if __name__ == "__main__"`` guard, and the workers
re-import that script: import the retrieval stores inside the guard, not at the top (bm25s pulls
in numba, and vLLM 0.32's CPU kernel registration fails on llvmlite objects in ``sys.modules``).
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import itertools
import os
import shutil
import tempfile
import threading
from pathlib import Path
from typing import Mapping, Sequence

from ragteam.nodes.background_loop import BackgroundLoop
from ragteam.nodes.policies.hf import TokenizerReplies, encode_prompt
from ragteam.nodes.policies.protocol import PROMPT_TOO_LONG, EngineError, Generation, GenerationRequest
from ragteam.nodes.shutdown import PARENT_MARK, exit_on_sigterm

WORKER_EXTENSION = "ragteam.nodes.policies.vllm_worker.WeightReceiver"


CPU_MAX_MODEL_LEN = 4096  # on CPU the KV cache lives in RAM beside the learner: keep it modest


def engine_args(model_dir: str, *, seed: int = 0, gpu: bool | None = None, shares_gpu: bool = False,
                block_size: int = 32, **overrides) -> dict:
    """The engine options ragteam relies on, as keyword arguments for ``AsyncEngineArgs``, with
    defaults chosen by device (``gpu``: None = whether torch sees CUDA here). ``overrides`` (a
    config's ``vllm:`` section; None values ignored) win over the defaults.

    - CPU: float32 (the exact-log-prob checks are float32), ``max_model_len`` 4096 (its KV
      cache is RAM), eager execution (compiling costs more than it saves).
    - GPU: the model's own dtype and context length, CUDA graphs on, 85% of the GPU's memory;
      beside a learner on the same GPU (``shares_gpu``) 40% and sleep mode, so the engine frees
      its memory while the learner updates."""
    import torch

    gpu = torch.cuda.is_available() if gpu is None else gpu
    if gpu:
        defaults = {"dtype": "auto", "enforce_eager": False, "tensor_parallel_size": 1,
                    "gpu_memory_utilization": 0.4 if shares_gpu else 0.85, "enable_sleep_mode": shares_gpu}
    else:
        defaults = {"dtype": "float32", "max_model_len": CPU_MAX_MODEL_LEN, "enforce_eager": True}
    args = {"model": model_dir, "seed": seed, **defaults,
            "enable_prefix_caching": True,            # role instructions and demonstrations repeat
            "block_size": block_size,                 # cache granularity: small blocks share more
            "logprobs_mode": "processed_logprobs",    # log-probs after temperature scaling
            "worker_extension_cls": WORKER_EXTENSION}
    args.update({k: v for k, v in overrides.items() if v is not None})
    if not gpu and args.get("max_model_len"):  # a small model's own limit may be lower
        args["max_model_len"] = min(args["max_model_len"], _model_max_len(model_dir) or args["max_model_len"])
    return args


def same_engine(model_dir: str | Path, options: dict, other_dir: str | Path, other_options: dict) -> bool:
    """Whether two engines serve the same model folder with the same options (a None is the
    default): one made for a run can stand in for the one the run would start."""
    def set_options(given: dict) -> dict:
        return {k: v for k, v in given.items() if v is not None}

    return (Path(model_dir).resolve() == Path(other_dir).resolve()
            and set_options(options) == set_options(other_options))


LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)  # the adapter ranks a vLLM engine can reserve


def adapter_engine_options(rank: int, count: int = 1) -> dict:
    """Engine options to serve ``count`` LoRA adapters of rank ``rank`` at most over the base
    weights: one for the adapter weight sync (``EnginePolicy.load_adapter``), a team's every
    adapter at once for ``VLLMPolicy.for_team`` (a slot each, so no request waits on a swap)."""
    room = next((r for r in LORA_RANKS if r >= rank), None)
    if room is None:
        raise ValueError(f"a vLLM engine serves LoRA ranks up to {LORA_RANKS[-1]}, not {rank}")
    return {"enable_lora": True, "max_lora_rank": room, "max_loras": count}


def team_engine_options(rank: int, count: int) -> dict:
    """Engine options to serve a team's ``count`` adapters (rank ``rank`` at most) at once, with
    one LoRA slot more, always empty (see ``VLLMPolicy.for_team``): a served export's engine and
    a per-role training run's rollout engine alike."""
    return adapter_engine_options(rank, count + 1)


def _model_max_len(model_dir: str) -> int | None:
    """The context length the model's config declares (None when it declares none)."""
    import json

    try:
        config = json.loads((Path(model_dir) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    value = config.get("max_position_embeddings")
    return value if isinstance(value, int) and value > 0 else None


class EnginePolicy(TokenizerReplies):
    """The policy protocol over a running vLLM async engine that lives on the caller's event
    loop (a Ray rollout worker owns its engine this way); ``VLLMPolicy`` adds an engine of its
    own on a private loop."""

    exact_ids = True

    def __init__(self, engine, tokenizer, name: str):
        self._engine = engine
        self.tokenizer = tokenizer
        self.name = name
        self._ids = itertools.count()
        self.cached_prompt_tokens = 0  # prompt tokens served from the prefix cache, all requests
        self.prompt_tokens = 0
        self._adapter = None  # the LoRA adapter every request is served with (``load_adapter``)
        self._adapters = itertools.count(1)  # LoRA ids: each adapter ever served has its own
        self._team: dict = {}  # adapter name → its LoRARequest, serving a team (``serve_team``)
        self._adapter_root: tempfile.TemporaryDirectory | None = None

    async def generate(self, requests: Sequence[GenerationRequest]) -> list[Generation]:
        return list(await asyncio.gather(*(self._one(r) for r in requests)))

    def serve_team(self, roles, folders: Mapping[str, str | Path] | None = None) -> None:
        """Serve each request under its role's adapter: ``roles`` (a ``RoleMap``, the one the HF
        policy decodes by) names it, ``folders`` holds each adapter's peft folder (None: a
        trainer sends each with ``load_adapter(files, name)`` before the first request, and again
        whenever it changes); a role in no adapter decodes on the base weights. The engine has a
        LoRA slot for each adapter (``for_team``): vLLM batches requests of different adapters
        together, so unlike the HF policy nothing is split by role."""
        from vllm.lora.request import LoRARequest

        self.adapters = roles
        self._team = {name: LoRARequest(name, next(self._adapters), str(folders[name]))
                      for name in (roles.names if folders is not None else ())}

    def _lora_request(self, adapter: str):
        """The ``LoRARequest`` that serves ``adapter`` (None: the base weights); without a team,
        the synced adapter (``load_adapter``), if any, serves every request."""
        return self._team.get(adapter) if self.adapters is not None else self._adapter

    async def _one(self, request: GenerationRequest) -> Generation:
        from vllm import SamplingParams, TokensPrompt

        prompt_text, prompt_ids = encode_prompt(self.tokenizer, request)
        sampling = request.sampling
        room = self.max_model_len - len(prompt_ids)  # tokens the engine can still generate
        if room < 1:  # vLLM would refuse the request; the run goes on with this call's violation
            return Generation(text="", prompt_text=prompt_text, prompt_ids=prompt_ids,
                              finish_reason=PROMPT_TOO_LONG, adapter=self._adapter_of(request.role))
        params = SamplingParams(
            temperature=max(sampling.temperature, 0.0), top_k=0, top_p=1.0, min_p=0.0,
            max_tokens=min(sampling.max_new_tokens, room), stop=list(sampling.stop),
            include_stop_str_in_output=True, logprobs=0, detokenize=True)
        final = None
        adapter = self._adapter_of(request.role)
        try:
            async for output in self._engine.generate(TokensPrompt(prompt_token_ids=prompt_ids), params,
                                                      request_id=f"r{next(self._ids)}",
                                                      lora_request=self._lora_request(adapter)):
                final = output
        except Exception as error:  # the engine died or refused: no single question's fault
            raise EngineError(f"vLLM engine failed: {type(error).__name__}: {error}") from error
        completion = final.outputs[0]
        ids = list(completion.token_ids)
        logprobs = [step[token].logprob for step, token in zip(completion.logprobs, ids)]
        self.prompt_tokens += len(prompt_ids)
        self.cached_prompt_tokens += final.num_cached_tokens or 0
        return Generation(text=self.tokenizer.decode(ids, skip_special_tokens=True),
                          prompt_text=prompt_text, prompt_ids=prompt_ids, completion_ids=ids,
                          logprobs=logprobs, finish_reason=_finish_reason(completion), adapter=adapter)

    @property
    def max_model_len(self) -> int:
        """The longest sequence (prompt + completion) the engine takes."""
        return self._engine.model_config.max_model_len

    @property
    def engine_dtype(self):
        """The torch dtype the engine computes in (what a weight update is cast to)."""
        return self._engine.model_config.dtype

    async def load_weights_blob(self, blob: bytes) -> None:
        """Replace the engine's weights with a safetensors ``blob`` (see ``weights_blob``) and
        drop the prefix cache, whose keys and values the old weights computed."""
        await self._engine.collective_rpc("ragteam_load_weights", args=(blob,))
        await self._weights_changed()

    async def load_adapter(self, files: dict[str, bytes], name: str | None = None) -> None:
        """Serve later requests with this LoRA adapter over the engine's base weights (the engine
        was started with ``adapter_engine_options``): every request (``name`` None, the single
        adapter of ``weight_sync: adapter``), or those of the team's adapter ``name``
        (``serve_team``). ``files`` is a PEFT adapter folder's content (``adapter_config.json``,
        ``adapter_model.safetensors``), written to a folder of this policy's: the engine loads
        adapters from disk. Each load is a new adapter id, name and folder (vLLM's prefix-cache
        keys), so no cached prefix of the previous one is ever served.

        The previous adapter is removed first: vLLM puts an adapter into the first free LoRA slot
        as it is added and does not zero a slot it frees, so adding before removing would fill a
        team engine's spare slot (``for_team``), under which vLLM-CPU's own LoRA ops decode
        base-weight requests."""
        from vllm.lora.request import LoRARequest

        if self._adapter_root is None:
            self._adapter_root = tempfile.TemporaryDirectory(prefix="ragteam-adapters-")
        number = next(self._adapters)
        folder = Path(self._adapter_root.name) / f"adapter{number}"
        folder.mkdir()
        for file, data in files.items():
            (folder / Path(file).name).write_bytes(data)
        previous = self._team.get(name) if name is not None else self._adapter
        if previous is not None:
            await self._remove_adapter(previous)
        adapter = LoRARequest(f"{name or 'ragteam'}{number}", number, str(folder))
        if not await self._engine.add_lora(adapter):
            raise EngineError(f"the vLLM engine did not load the adapter in {folder}")
        if name is not None:
            self._team[name] = adapter
        else:
            self._adapter = adapter

    async def _remove_adapter(self, adapter) -> None:
        """Take ``adapter`` (a ``LoRARequest``) off the engine, and its folder if this policy
        wrote it (never an export's)."""
        await self._engine.remove_lora(adapter.lora_int_id)
        if self._adapter_root is not None and Path(adapter.lora_path).parent == Path(self._adapter_root.name):
            shutil.rmtree(adapter.lora_path, ignore_errors=True)

    async def remove_adapters(self) -> None:
        """Take every adapter this policy loaded off the engine (a served team's, a synced
        one): an engine handed to a trainer then decodes with its weights alone, and the trainer's
        adapters go into free slots, leaving a team engine's spare one empty (``load_adapter``)."""
        for adapter in [*self._team.values(), *([self._adapter] if self._adapter is not None else [])]:
            await self._remove_adapter(adapter)
        self._team, self._adapter = {}, None

    async def join_channel(self, host: str, port: int, rank: int, world_size: int, transport: str) -> None:
        """Join a learner's weight channel (``trainers.learner.weight_channel``) as ``rank``."""
        await self._engine.collective_rpc("ragteam_join_channel", args=(host, port, rank, world_size, transport))

    async def receive_weights(self, layouts: list) -> None:
        """Take one weight update from the channel (the learner broadcasts it meanwhile)."""
        await self._engine.collective_rpc("ragteam_receive_buckets", args=(layouts,))
        await self._weights_changed()

    async def _weights_changed(self) -> None:
        # Requests still holding blocks are preempted (they recompute with the new weights); a
        # reset that cannot be done is an error, since a stale cache would silently serve the
        # old policy's prefixes.
        if not await self._engine.reset_prefix_cache(reset_running_requests=True):
            raise EngineError("the vLLM prefix cache could not be reset after a weight update")


class VLLMPolicy(EnginePolicy):
    """A causal LM from a local directory served by an in-process vLLM async engine."""

    def __init__(self, model_dir: str | Path, name: str | None = None, **options):
        from transformers import AutoTokenizer

        self.model_dir = str(model_dir)
        super().__init__(None, AutoTokenizer.from_pretrained(self.model_dir),
                         name or f"vllm:{model_dir}")
        self._options = options
        self._loop: BackgroundLoop | None = None
        self._start_lock = threading.Lock()

    @classmethod
    def for_team(cls, team, name: str | None = None, **options) -> "VLLMPolicy":
        """One engine over a trained team's base model with every adapter of its export loaded
        (``team``: a ``role_adapters.TeamExport``), each role decoded under its own. The base
        model's tokenizer serves, as the engine's own stop strings need (the export's is a copy).

        One LoRA slot more than adapters, always empty: vLLM-CPU's own LoRA ops index the slot of
        a request without adapter (-1) as Python does, i.e. the last slot, so in a batch that
        mixes adapters with base-weight requests those decoded under whichever adapter sat there
        (seen: log-probs 0.3 off). ragteam's vLLM plugin (``vllm_cpu_lora``) replaces those ops
        and reads -1 as no adapter, as the GPU kernels do; the spare slot keeps an engine
        started without the plugin (``VLLM_PLUGINS`` leaving it out) right, for its memory alone."""
        roles = team.roles
        policy = cls(team.base_dir, name=name, **team_engine_options(team.max_rank(), len(roles.names)),
                     **options)
        policy.serve_team(roles, {adapter: team.adapter_dir(adapter) for adapter in roles.names})
        return policy

    def serves(self, model_dir: str | Path, options: dict) -> bool:
        """Whether this engine was made for ``model_dir`` with these engine options (a None is
        the default): an engine handed to a trainer must be the one it would have started."""
        own = {k: v for k, v in self._options.items() if k not in ("seed", "shares_gpu")}
        return same_engine(self.model_dir, own, model_dir, options)

    # -- engine life -------------------------------------------------------------------------
    def start(self) -> "VLLMPolicy":
        """Start the engine now (otherwise the first request does); a clear error if it fails."""
        with self._start_lock:
            if self._engine is None:
                _engine_environment()
                self._loop = BackgroundLoop("vllm-engine")
                try:
                    self._engine = self._loop.call(self._create())
                    for lora in self._team.values():  # now: a broken adapter fails the start
                        if not self._loop.call(self._engine.add_lora(lora)):
                            raise RuntimeError(f"the engine did not load the adapter in {lora.lora_path}")
                    atexit.register(self.close)
                    exit_on_sigterm()  # the default action would orphan the engine's workers
                except Exception as error:
                    self.close()  # an engine that started but refused an adapter too
                    raise EngineError(f"the vLLM engine for {self.model_dir} failed to start: "
                                       f"{type(error).__name__}: {error}") from error
        return self

    @property
    def sleeps(self) -> bool:
        """Whether the engine was started with sleep mode (a GPU shared with a learner)."""
        return bool(engine_args(self.model_dir, **self._options).get("enable_sleep_mode"))

    async def _create(self):
        # vLLM logs ~70 INFO lines per engine start (config, KV cache, compile) between ragteam's
        # own lines: warnings and errors only, unless the user sets VLLM_LOGGING_LEVEL (read when
        # vllm is first imported, by this process and by the engine process it starts).
        os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        return AsyncLLM.from_engine_args(AsyncEngineArgs(**engine_args(self.model_dir, **self._options)))

    def sleep(self) -> None:
        """Free the engine's GPU memory (weights to host RAM, KV cache dropped) while the learner
        updates; ``wake_up`` before the next weight sync."""
        self.start()
        self._loop.call(self._engine.sleep(level=1))

    def wake_up(self) -> None:
        self.start()
        self._loop.call(self._engine.wake_up())

    def close(self) -> None:
        if self._engine is not None:
            # The output handler goes first: vLLM stops its engine process before cancelling the
            # handler, which then logs the engine's death as an ERROR on every clean exit.
            if self._loop is not None:
                self._loop.cancel_tasks()
            self._engine.shutdown()
            self._engine = None
        if self._loop is not None:
            self._loop.stop()
            self._loop = None

    # -- protocol: requests run on the engine's own loop -------------------------------------
    async def generate(self, requests: Sequence[GenerationRequest]) -> list[Generation]:
        self.start()
        return list(await asyncio.gather(*(self._loop.run(self._one(r)) for r in requests)))

    def reset_prefix_cache(self) -> None:
        """Forget cached prompt prefixes (and zero the cache counters), e.g. to time a cold pass."""
        self.start()
        self._loop.call(self._engine.reset_prefix_cache())
        self.prompt_tokens = self.cached_prompt_tokens = 0

    # -- weight sync ---------------------------------------------------------------------------
    def load_weights(self, state_dict: dict) -> None:
        """Replace the engine's weights with ``state_dict`` (Hugging Face names)."""
        self.start()
        self._loop.call(self.load_weights_blob(weights_blob(state_dict)))

    def load_adapter_files(self, files: dict[str, bytes], name: str | None = None) -> None:
        """``load_adapter`` from a plain thread (the engine lives on its own loop)."""
        self.start()
        self._loop.call(self.load_adapter(files, name))

    def serve_without_adapters(self) -> None:
        """``remove_adapters`` from a plain thread: every request is decoded by the engine's
        weights alone until an adapter is loaded again."""
        self.start()
        self._loop.call(self.remove_adapters())
        self.adapters = None

    def in_background(self, coroutine) -> "concurrent.futures.Future":
        """Start ``coroutine`` (e.g. ``join_channel``, ``receive_weights``) on the engine's loop
        and return at once: the learner's side of the channel runs meanwhile."""
        self.start()
        return self._loop.submit(coroutine)


def weights_blob(state_dict: dict) -> bytes:
    """Tensors for a weight sync, as one safetensors blob: it crosses vLLM's worker RPC and Ray
    intact (a dict of tensors would arrive as lists through the RPC)."""
    from safetensors.torch import save

    from ragteam.nodes.policies.weight_buckets import without_tied_copies

    # clone: views of one storage (safetensors refuses them) that are not tied copies
    return save({name: tensor.detach().to("cpu").clone().contiguous()
                 for name, tensor in without_tied_copies(state_dict).items()})


def _finish_reason(completion) -> str:
    if completion.finish_reason == "length":
        return "length"
    return "stop" if isinstance(completion.stop_reason, str) else "eos"


def _engine_environment() -> None:
    """Settings vLLM reads from the environment, each overridable by the user:
    - caches with ragteam's (vLLM writes under ~/.cache by default);
    - a CPU KV cache that fits beside a trainer (vLLM-CPU otherwise reserves most of the RAM
      and refuses to start when that much is not free);
    - workers started by spawn: a forked worker inherits every module the parent imported, and
      vLLM's kernel registration trips over some of them (llvmlite's function wrappers);
    - ragteam's CPU LoRA products (``vllm_cpu_lora``) switched on for this engine's processes;
    - the engine's processes ended with this one, however it ends (``nodes.shutdown.end_with_parent``)."""
    from ragteam.nodes.policies import vllm_cpu_lora
    from ragteam.nodes.policies.offline_model import cache_dir

    os.environ.setdefault("VLLM_CACHE_ROOT", str(cache_dir() / "vllm"))
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "4")  # GiB
    os.environ.setdefault("VLLM_WORKER_MULTIPROC_METHOD", "spawn")
    # ragteam's LoRA plugin acts only in engines started here: vLLM loads its plugins in each of
    # an engine's processes (this one too, for an in-process engine), which inherit the mark
    os.environ[vllm_cpu_lora.ENGINE_MARK] = "1"
    # and the engine's processes end with the process that started them, even when it was
    # killed without a chance to close them (nodes.shutdown.end_with_parent)
    os.environ[PARENT_MARK] = str(os.getpid())
