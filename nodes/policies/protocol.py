"""The policy protocol: what every model behind a policy must give the runtime and the trainer.

A policy turns chat requests into generations. A policy whose calls can be trained must return the
*exact* token ids it conditioned on and produced, plus the behaviour log-probability of every
completion token (``exact_ids``), so the trainer never re-tokenizes text (re-tokenizing decoded
text can yield different ids than the ones that were sampled, which silently corrupts the PPO
ratio). Whether a role's calls *are* trained is the team's business (``nodes.team``).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Protocol, Sequence, runtime_checkable

Message = dict[str, str]
PROMPT_TOO_LONG = "prompt_too_long"  # {"role": "system" | "user" | "assistant", "content": str}


@dataclass(frozen=True)
class SamplingParams:
    """Decoding settings of one request. ``temperature == 0`` means greedy decoding."""

    max_new_tokens: int = 128
    temperature: float = 0.0
    stop: tuple[str, ...] = ()

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0


@dataclass(frozen=True)
class GenerationRequest:
    messages: tuple[Message, ...]
    sampling: SamplingParams = SamplingParams()
    role: str = ""  # which role asks (scripted policies and per-role LoRA adapters key on it)
    # Text the assistant's turn already holds; generation continues it. Single-context agent
    # loops (Search-R1, QAgent) put the rollout so far here; it is part of the prompt.
    prefix: str = ""


@dataclass
class Generation:
    """One completion. ``prompt_text`` is the exact string the model was conditioned on
    (chat template applied); ``text`` is the decoded completion without special tokens."""

    text: str
    prompt_text: str = ""
    prompt_ids: list[int] = field(default_factory=list)
    completion_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    # "stop" (stop string), "eos", "length", or PROMPT_TOO_LONG (the engine could not take the
    # prompt: no completion, and the call is a recorded format violation)
    finish_reason: str = "stop"
    # Token counts reported by a model server that returns no ids (e.g. an API chat model).
    reported_usage: tuple[int, int] | None = None
    # the LoRA adapter that produced it, of a model with one per role ("" = the base weights,
    # or a model without per-role adapters)
    adapter: str = ""

    @property
    def has_token_ids(self) -> bool:
        return bool(self.prompt_ids)

    @property
    def token_counts(self) -> tuple[int, int]:
        """(prompt tokens, completion tokens)."""
        if self.reported_usage is not None:
            return self.reported_usage
        return len(self.prompt_ids), len(self.completion_ids)


@runtime_checkable
class Policy(Protocol):
    """Anything that can answer a batch of requests. ``exact_ids`` is a capability: the policy
    returns the exact token ids and behaviour log-probs of the model that sampled (HF, vLLM, a
    vLLM server, whose traces can train a model offline; not an API chat model). Only such calls
    can enter training; whether they do is the team's business (a frozen role's do not, see
    ``nodes.team.Frozen``). Read it through ``exact_ids(policy)``, which also takes a policy
    written before the attribute had this name."""

    name: str
    exact_ids: bool

    async def generate(self, requests: Sequence[GenerationRequest]) -> list[Generation]: ...


_warned_legacy: set[type] = set()  # policy classes already warned of their old attribute


def exact_ids(policy: Policy) -> bool:
    """Whether ``policy`` returns exact token ids and behaviour log-probs. A policy class written
    before the attribute was renamed sets ``trainable`` instead: it is read as ``exact_ids`` (what
    it meant for a policy), with one warning per class, so a user's own policy keeps working."""
    if hasattr(policy, "exact_ids"):
        return bool(policy.exact_ids)
    if hasattr(policy, "trainable"):
        _warn_legacy(type(policy))
        return bool(policy.trainable)
    raise AttributeError(f"policy {getattr(policy, 'name', policy)!r} has no exact_ids attribute "
                         "(True when it returns exact token ids and behaviour log-probs)")


def _warn_legacy(cls: type) -> None:
    if cls in _warned_legacy:
        return
    _warned_legacy.add(cls)
    # FutureWarning, not DeprecationWarning: Python hides the latter outside __main__, and the
    # person to tell is the one who wrote the policy class
    warnings.warn(f"policy class {cls.__qualname__} sets `trainable`; it is read as `exact_ids` "
                  "(returns exact token ids and behaviour log-probs): rename it to `exact_ids`. "
                  "Frozen roles are the team's business (nodes.team.Frozen).", FutureWarning,
                  stacklevel=3)


def written_reply(policy: Policy, request: GenerationRequest, text: str) -> Generation:
    """The generation ``policy`` would have recorded had it sampled ``text`` for ``request``: the
    prompt ids ``generate`` would send, ``text`` as this policy tokenizes it, and no behaviour
    log-probs (nothing was sampled; the learner takes π_old's). Training writes a reply this way to
    make a role try an action it would rarely sample (the planner's workflow groups). A policy
    offers it as ``encode_reply(request, text)``; one without it (a chat model behind an API,
    which records no ids and is never trained) records the text alone."""
    encode = getattr(policy, "encode_reply", None)
    if encode is None:
        if exact_ids(policy):
            raise TypeError(f"policy {policy.name!r} records exact ids but cannot encode a written "
                            "reply (it has no encode_reply)")
        return Generation(text=text)
    return encode(request, text)


class EngineError(RuntimeError):
    """The model behind the policy failed (an engine that did not start or died), not one request:
    callers stop instead of recording every later question as failed."""


def __getattr__(name: str):
    # the old name, from before "backend" meant only where a training step runs
    if name == "BackendError":
        import warnings

        warnings.warn("nodes.policies.protocol.BackendError is now EngineError", FutureWarning, stacklevel=2)
        return EngineError
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
