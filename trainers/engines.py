"""The rollout-engine seam: what a trainer's backend calls on an engine that samples its
rollouts, and how started engines are handed to a trainer instead of it starting its own.

- The embedded backend (``sampler: vllm``) calls a ``RolloutEngine`` in this process:
  ``nodes.policies.vllm.VLLMPolicy`` is the one ragteam ships; any object with these methods
  works. The trainer's weight syncs call the ``weight_sync`` mode's methods
  (``trainers.weight_sync``).
- The Ray backend's engines live in its rollout workers (Ray actors, each owning a vLLM engine):
  there, ``engines`` are started workers (``trainers.backends.ray.start_rollout_workers``).

``Trainer(config, engines=...)`` and ``train_ppo(..., engines=...)`` take either; the caller
keeps what it handed over (tests share engines between runs). ``sampler: hf`` samples from the
learner's own module and takes none.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class RolloutEngine(Protocol):
    """An engine in this process that samples rollouts and takes the learner's weights."""

    name: str

    async def generate(self, requests: Sequence) -> list:
        """A ``Generation`` per ``GenerationRequest``, with exact ids and behaviour log-probs."""

    def encode_reply(self, request, text: str):
        """The ``Generation`` a written reply would have been (``protocol.written_reply``)."""

    def serves(self, model_dir: str | Path, options: Mapping[str, Any]) -> bool:
        """Whether it serves ``model_dir`` with these engine options (``trainers.config.engine_options``)."""

    def serve_team(self, adapters) -> None:
        """Decode each role under its adapter (per-role adapters, ``weight_sync: adapter``)."""

    def serve_without_adapters(self) -> None:
        """Drop whatever adapters it served before (a run it is handed to starts clean)."""

    def load_weights(self, state_dict: Mapping) -> None:
        """Replace its weights (``weight_sync: blob``)."""

    def load_adapter_files(self, files: Mapping[str, bytes], name: str | None = None) -> None:
        """Serve a LoRA adapter's saved files under ``name`` (``weight_sync: adapter``)."""

    @property
    def engine_dtype(self):
        """The torch dtype of its weights (what the weight channel streams, ``weight_sync: channel``)."""

    def in_background(self, coroutine):
        """Run ``coroutine`` on its event loop; a ``concurrent.futures.Future``."""

    async def join_channel(self, host: str, port: int, rank: int, world_size: int, transport: str) -> None:
        """Join the learner's weight channel (a gloo/NCCL group) as ``rank``."""

    async def receive_weights(self, layouts: list) -> None:
        """Receive one streamed update, bucket by bucket (``trainers.learner.weight_channel``)."""

    @property
    def sleeps(self) -> bool:
        """Whether it frees its memory while the learner updates (one GPU shared)."""

    def sleep(self) -> None: ...

    def wake_up(self) -> None: ...

    def close(self) -> None:
        """End it (never called on an engine handed over: its caller keeps it)."""


def checked_engines(engines: Sequence | None, backend: str, sampler: str) -> list:
    """``engines`` handed to a trainer, checked against its config: one ``RolloutEngine`` for the
    embedded backend with ``sampler: vllm``, rollout workers for the Ray backend, none for
    ``sampler: hf``. Each mismatch is one ``ValueError`` saying what to give instead."""
    if engines is None:
        return []
    if isinstance(engines, (str, bytes)) or not isinstance(engines, Sequence):
        raise ValueError(f"engines must be a list of started engines, got {type(engines).__name__}")
    engines = list(engines)
    if backend == "ray":
        return engines  # its workers: checked by the backend, which asks each what it serves
    if sampler != "vllm":
        raise ValueError("engines were given to a run whose rollouts sample from the learner "
                         "(sampler: hf); set sampler: vllm")
    if len(engines) != 1:
        raise ValueError(f"the embedded backend samples from one engine; {len(engines)} were given")
    missing = [name for name in _MEMBERS if not hasattr(engines[0], name)]
    if missing:
        raise ValueError(f"{type(engines[0]).__name__} is not a rollout engine: it has no "
                         f"{', '.join(missing)} (trainers.engines.RolloutEngine)")
    return engines


# the protocol's members, in the order it declares them (named in the error for an object that lacks some)
_MEMBERS = (*RolloutEngine.__annotations__, *(name for name in vars(RolloutEngine) if not name.startswith("_")))
