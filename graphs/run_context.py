"""Where graph nodes get their ``RunContext``.

Python callers pass a ``RunContext`` (``graphs.run.arun`` does). Runs started from LangGraph
Studio or the LangGraph API carry either no context or a JSON object, e.g.
``{"policy": "scripted", "index": "indexes/wiki", "max_rounds": 4}``; those are turned into a
``RunContext`` here, with the team and retriever built once per (policy, index) and reused.
Without a ``policy`` the ``RAGTEAM_POLICY`` environment variable decides (default ``offline``).
"""

from __future__ import annotations

import os
from dataclasses import fields
from functools import lru_cache
from typing import TypedDict

from langgraph.runtime import Runtime

from nodes.context import RunContext, Settings
from nodes.team import Team

_SETTING_NAMES = {f.name for f in fields(Settings)}


class ContextSpec(TypedDict, total=False):
    """The graphs' declared context schema: what a Studio/API run may pass as JSON. Python
    callers pass a full ``RunContext`` instead, which every node accepts as well."""

    policy: str            # offline | scripted | hf:PATH
    index: str             # a built index directory; default: the bundled BM25 demo store
    top_k: int
    max_rounds: int
    max_depth: int
    max_subquestions: int
    temperature: float
    fallback_workflow: str
    few_shot: bool


def run_context(runtime: Runtime) -> RunContext:
    context = runtime.context
    if isinstance(context, RunContext):
        return context
    return context_from_spec(context or {})


def context_from_spec(spec: dict) -> RunContext:
    policy = spec.get("policy") or os.environ.get("RAGTEAM_POLICY", "offline")
    team, retriever = _shared_parts(policy, spec.get("index"))
    settings = Settings(**{k: v for k, v in spec.items() if k in _SETTING_NAMES})
    return RunContext(team, retriever, settings)


@lru_cache(maxsize=8)
def _shared_parts(policy: str, index: str | None):
    from graphs.policies import load_policy
    from stores.demo import demo_retriever
    from stores.index import open_index

    return Team(load_policy(policy)), (open_index(index) if index else demo_retriever())
