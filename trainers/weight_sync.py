"""Phase 4 of a training step: the learner's weights into the rollout engines, by ``weight_sync``.

- ``channel``: the learner streams its weights in buckets over a ``torch.distributed`` group every
  engine has joined (``trainers/learner/weight_channel.py``), to all of them at once; the group
  is opened at the first sync, and again after an engine restarted;
- ``blob``: the weights as one blob, loaded by one engine at a time (a blob load holds about
  three copies of the weights in flight);
- ``adapter``: the LoRA adapters' files alone, loaded by every engine at once: the ``lora`` one,
  or each per-role adapter; only those whose weights changed since they were last sent.

``WeightSync`` holds that choice and the bookkeeping once; a host (the embedded backend's own
process, the Ray backend's actors) says how each move is made on its engines.
"""

from __future__ import annotations

import time
from typing import Sequence


class WeightSync:
    """The sync strategy over a list of engines; subclasses make the four moves."""

    def __init__(self, mode: str, engines: Sequence):
        self.mode = mode
        self.engines = list(engines)
        self.synced = False        # the engines hold trained weights (a restarted one must get them)
        self.channel_open = False
        self.sent: dict = {}       # the last sync's own metrics (set by the adapter move)
        self.digests: dict[str | None, str] = {}  # adapter → its weights' digest as last sent

    def sync(self) -> float:
        """The learner's current weights into every engine; seconds taken."""
        started = time.perf_counter()
        self.sent = {}
        if self.mode == "adapter":
            self.load_adapter(self.engines)
        elif self.mode == "channel":
            if not self.channel_open:
                self.open_channel(self.engines)
                self.channel_open = True
            self.stream()
        else:
            self.load_blob(self.engines)
        self.synced = True
        return time.perf_counter() - started

    def restarted(self, engines: Sequence) -> None:
        """``engines`` came back with their initial weights and in no channel: they get the
        current weights (as a blob or the adapter) when training has moved them, and the
        channel is opened again, with them, at the next sync."""
        self.channel_open = False
        self.digests.clear()  # a restarted engine holds no adapter: every one is sent again
        if self.synced:
            (self.load_adapter if self.mode == "adapter" else self.load_blob)(list(engines))

    def load_adapter(self, engines: list) -> None:
        """Each adapter whose weights changed since it was last sent (all of them the first time)
        into ``engines``, each under a new LoRA id (``EnginePolicy.load_adapter``: no prefix cached
        under the old one is served); a step moves only the adapters of the roles that made calls.
        How many and their bytes are the step's ``weight_sync_adapters`` / ``weight_sync_bytes``."""
        now = self.adapter_digests()
        changed = [name for name, digest in now.items() if self.digests.get(name) != digest]
        sent = self.send_adapters(changed, engines) if changed else 0
        self.digests.update({name: now[name] for name in changed})
        self.sent = {"weight_sync_adapters": len(changed), "weight_sync_bytes": sent}

    # -- the moves, made by the host ------------------------------------------------------------
    def adapter_digests(self) -> dict[str | None, str]:
        """adapter name (None: the ``lora`` one) → a digest of its weights now."""
        raise NotImplementedError

    def send_adapters(self, names: list[str | None], engines: list) -> int:
        """These adapters' files into every one of ``engines``; the bytes of one copy."""
        raise NotImplementedError

    def open_channel(self, engines: list) -> None:
        raise NotImplementedError

    def stream(self) -> None:
        raise NotImplementedError

    def load_blob(self, engines: list) -> None:
        raise NotImplementedError


# -- did a sync reach an engine: its log-probs of its own sample against the learner's ----------

def completion_logprobs(model, gen, temperature: float = 1.0):
    """A Hugging Face model's log-probs of ``gen``'s completion ids after its prompt ids, at
    ``temperature`` (0 = greedy, scored at 1): the forward pass that stands for the learner when
    an engine's recorded log-probs are checked against a plain model. Shape: [completion tokens]."""
    import torch

    ids = torch.tensor([gen.prompt_ids + gen.completion_ids])
    with torch.no_grad():
        logits = model(ids).logits[0, len(gen.prompt_ids) - 1:-1].float()
    logp = torch.log_softmax(logits / (temperature if temperature > 0 else 1.0), dim=-1)
    return logp.gather(1, torch.tensor(gen.completion_ids)[:, None]).squeeze(1)


def logprob_gap(engine_logprobs: list[list[float]], learner_logprobs: list[list[float]]) -> dict:
    """Mean and largest |engine − learner| log-prob per completion token, over calls."""
    gaps = [abs(a - b) for engine, learner in zip(engine_logprobs, learner_logprobs, strict=True)
            for a, b in zip(engine, learner, strict=True)]
    if not gaps:
        raise ValueError("no completion tokens to compare")
    return {"tokens": len(gaps), "mean_abs_gap": sum(gaps) / len(gaps), "max_abs_gap": max(gaps)}


def engine_learner_gap(generations, learner_logprobs) -> dict:
    """The engine-vs-learner check: ``generations`` an engine made (their recorded completion ids
    and behaviour log-probs), each rescored by ``learner_logprobs(generation)`` (the learner's, or
    a model's, log-probs of the same ids), compared per token (``logprob_gap``). After a sync the
    two differ only by precision; a large gap means the engine serves other weights."""
    return logprob_gap([list(g.logprobs) for g in generations],
                       [[float(x) for x in learner_logprobs(g)] for g in generations])
