"""A stand-in rollout engine (``trainers.engines.RolloutEngine``) for measuring and testing the
trainer without a model on the rollout side: replies by rule (every role's plumbing rule unless
``rules`` say otherwise), token ids from the learner's tokenizer so the learner trains on them
as on real calls, and a fixed latency per ``generate`` call, as a remote engine or an API adds.
Weights it is sent are ignored: its replies never change. Behaviour log-probs are 0."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from ragteam.nodes.policies.hf import TokenizerReplies
from ragteam.nodes.policies.protocol import Generation, GenerationRequest
from ragteam.nodes.policies.scripted import Rule, ScriptedPolicy


class ScriptedEngine(TokenizerReplies, ScriptedPolicy):
    """Serves ``model_dir`` (as far as ``serves`` is asked) with ``tokenizer``'s ids; waits
    ``latency_s`` per ``generate`` call (its requests together, as a batching server would)."""

    sleeps = False

    def __init__(self, tokenizer, model_dir: str | Path, latency_s: float = 0.0,
                 rules: Mapping[str, Rule] | None = None, name: str = "scripted-engine"):
        from ragteam.nodes.roles import plumbing_rule

        ScriptedPolicy.__init__(self, rules or {}, name=name, delay_s=latency_s, rule_source=plumbing_rule)
        self.tokenizer = tokenizer
        self.model_dir = Path(model_dir).resolve()

    def _answer(self, request: GenerationRequest) -> Generation:
        """The rule's reply encoded as a written one would be, sampled with certainty."""
        generation = self.encode_reply(request, self._reply_text(request))
        generation.logprobs = [0.0] * len(generation.completion_ids)
        return generation

    # -- the rollout-engine seam ---------------------------------------------------------------
    def serves(self, model_dir: str | Path, options: Mapping) -> bool:
        return Path(model_dir).resolve() == self.model_dir

    def serve_team(self, adapters) -> None:
        self.adapters = adapters

    def serve_without_adapters(self) -> None:
        self.adapters = None

    def load_weights(self, state_dict: Mapping) -> None:
        """Taken and ignored: the replies come from the rules."""

    def load_adapter_files(self, files: Mapping[str, bytes], name: str | None = None) -> None:
        """Taken and ignored: the replies come from the rules."""

    @property
    def engine_dtype(self):
        import torch

        return torch.float32

    def in_background(self, coroutine):
        raise NotImplementedError("a scripted engine joins no weight channel: use weight_sync blob or adapter")

    async def join_channel(self, host: str, port: int, rank: int, world_size: int, transport: str) -> None:
        raise NotImplementedError("a scripted engine joins no weight channel: use weight_sync blob or adapter")

    async def receive_weights(self, layouts: list) -> None:
        raise NotImplementedError("a scripted engine joins no weight channel: use weight_sync blob or adapter")

    def sleep(self) -> None:
        """Never asked: it does not sleep."""

    def wake_up(self) -> None:
        """Never asked: it does not sleep."""

    def close(self) -> None:
        """Nothing runs apart from its caller."""
