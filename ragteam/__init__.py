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
    "Role": "nodes.roles.base", "Observation": "nodes.roles.base", "documents_block": "nodes.roles.base",
    "Parsed": "nodes.parsing", "tag_content": "nodes.parsing", "tag_choice": "nodes.parsing",
    "tagged_text": "nodes.parsing",
    "WorkflowState": "nodes.workflow", "BranchOutput": "nodes.workflow", "query_rewriter": "nodes.workflow",
    "retriever": "nodes.workflow", "document_selector": "nodes.workflow", "answer_generator": "nodes.workflow",
    "decomposer": "nodes.workflow",
    "role_node": "nodes.call", "call_role": "nodes.call", "run_context": "nodes.context",
    "arun_context": "nodes.context",
    "parse_topology": "nodes.topology", "compile_topology": "graphs.compiler",
    "ragteam_graph": "graphs.contract", "GraphContractError": "graphs.contract",
    "Method": "graphs.methods.registry", "register": "graphs.methods.registry",
    "build_graph": "graphs.methods.registry", "get_method": "graphs.methods.registry",
    "methods": "graphs.methods.registry",
    # running: context, policies, retrievers, data, traces
    "RunContext": "nodes.context", "Settings": "nodes.context", "make_context": "nodes.context",
    "Team": "nodes.team", "run": "graphs.run", "arun": "graphs.run", "arun_many": "graphs.run",
    "RunResult": "graphs.run", "RunFailed": "graphs.run",
    "load_policy": "nodes.policies.spec", "ScriptedPolicy": "nodes.policies.scripted",
    "ChatModelPolicy": "nodes.policies.chat", "plumbing_policy": "nodes.roles",
    "Rule": "nodes.policies.scripted",
    "open_retriever": "stores.retriever", "demo_retriever": "stores.demo", "build_index": "stores.index",
    "open_index": "stores.index", "read_dataset": "stores.datasets", "render_tree": "nodes.tracing",
    "write_jsonl": "nodes.tracing", "read_jsonl": "nodes.tracing",
    # evaluating and drawing
    "evaluate": "graphs.eval.evaluate", "evaluate_graph": "graphs.eval.evaluate",
    "compare_runs": "graphs.eval.compare", "mermaid": "graphs.apps.drawing", "svg": "graphs.apps.drawing",
    # training
    "train_ppo": "trainers.ppo_graph", "TrainConfig": "trainers.config",
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
