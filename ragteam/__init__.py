"""ragteam's public API in one import: ``import ragteam as rt``.

Compose a graph from ragteam's nodes (and roles of your own), run it, evaluate it, draw it and
train it — the same pieces the built-in methods are made of::

    import ragteam as rt

    ctx = rt.make_context(policy="scripted")          # or "offline", "hf:PATH", "vllm:PATH"
    result = rt.run(rt.build_graph("vanilla_rag"), "Who is Ed Wood?", ctx)  # or a Method, or "vanilla_rag"
    print(result.answer, result.costs)

Names resolve lazily (``import ragteam`` loads neither a model nor torch); each is documented
where it is defined. ``examples/verified_rag.py`` is the tutorial: a new role and a graph of your
own, used everywhere a built-in method is.
"""

from __future__ import annotations

import importlib
from pathlib import Path as _Path
from typing import Any

# ragteam's packages are ragteam.graphs, ragteam.nodes, ragteam.stores and ragteam.trainers. An
# installed wheel holds them in this folder; a checkout keeps them beside it, at the repository
# root, so there they are found through this package's path (only then: an installed ragteam
# must never expose its parent folder).
_HERE = _Path(__file__).resolve().parent
if not (_HERE / "nodes").is_dir() and (_HERE.parent / "nodes" / "__init__.py").is_file():
    __path__.append(str(_HERE.parent))

_WHERE = {
    # composing: roles, the workflow nodes, the topology language, the graph contract
    "Role": "ragteam.nodes.roles.base", "Observation": "ragteam.nodes.roles.base", "documents_block": "ragteam.nodes.roles.base",
    "Parsed": "ragteam.nodes.parsing", "tag_content": "ragteam.nodes.parsing", "tag_choice": "ragteam.nodes.parsing",
    "tagged_text": "ragteam.nodes.parsing",
    "WorkflowState": "ragteam.nodes.workflow", "BranchOutput": "ragteam.nodes.workflow", "query_rewriter": "ragteam.nodes.workflow",
    "retriever": "ragteam.nodes.workflow", "document_selector": "ragteam.nodes.workflow", "answer_generator": "ragteam.nodes.workflow",
    "decomposer": "ragteam.nodes.workflow",
    "role_node": "ragteam.nodes.call", "call_role": "ragteam.nodes.call", "run_context": "ragteam.nodes.context",
    "arun_context": "ragteam.nodes.context",
    "parse_topology": "ragteam.nodes.topology", "compile_topology": "ragteam.graphs.compiler",
    "ragteam_graph": "ragteam.graphs.contract", "GraphContractError": "ragteam.graphs.contract",
    "Method": "ragteam.graphs.methods.registry", "register": "ragteam.graphs.methods.registry",
    "build_graph": "ragteam.graphs.methods.registry", "get_method": "ragteam.graphs.methods.registry",
    "methods": "ragteam.graphs.methods.registry",
    # running: context, policies, retrievers, data, traces
    "RunContext": "ragteam.nodes.context", "Settings": "ragteam.nodes.context", "make_context": "ragteam.nodes.context",
    "Team": "ragteam.nodes.team", "run": "ragteam.graphs.run", "arun": "ragteam.graphs.run", "arun_many": "ragteam.graphs.run",
    "RunResult": "ragteam.graphs.run", "RunFailed": "ragteam.graphs.run",
    "load_policy": "ragteam.nodes.policies.spec", "ScriptedPolicy": "ragteam.nodes.policies.scripted",
    "ChatModelPolicy": "ragteam.nodes.policies.chat", "plumbing_policy": "ragteam.nodes.roles",
    "Rule": "ragteam.nodes.policies.scripted",
    "open_retriever": "ragteam.stores.retriever", "demo_retriever": "ragteam.stores.demo", "build_index": "ragteam.stores.index",
    "open_index": "ragteam.stores.index", "read_dataset": "ragteam.stores.datasets", "render_tree": "ragteam.nodes.tracing",
    "write_jsonl": "ragteam.nodes.tracing", "read_jsonl": "ragteam.nodes.tracing",
    # evaluating and drawing
    "evaluate": "ragteam.graphs.eval.evaluate", "evaluate_graph": "ragteam.graphs.eval.evaluate",
    "compare_runs": "ragteam.graphs.eval.compare", "mermaid": "ragteam.graphs.apps.drawing", "svg": "ragteam.graphs.apps.drawing",
    # training
    "train_ppo": "ragteam.trainers.ppo_graph", "TrainConfig": "ragteam.trainers.config",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'ragteam' has no attribute {name!r}")
    value = getattr(importlib.import_module(_WHERE[name]), name)
    globals()[name] = value  # resolved once
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
