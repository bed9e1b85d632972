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

_MODULES = {  # each module → the public names it defines
    # composing: roles, the workflow nodes, the topology language, the graph contract
    "ragteam.nodes.roles.base": ("Role", "Observation", "documents_block"),
    "ragteam.nodes.parsing": ("Parsed", "tag_content", "tag_choice", "tagged_text"),
    "ragteam.nodes.workflow": ("WorkflowState", "BranchOutput", "query_rewriter", "retriever",
                               "document_selector", "answer_generator", "decomposer"),
    "ragteam.nodes.call": ("role_node", "call_role"),
    "ragteam.nodes.topology": ("parse_topology",),
    "ragteam.graphs.compiler": ("compile_topology",),
    "ragteam.graphs.contract": ("ragteam_graph", "GraphContractError"),
    "ragteam.graphs.methods.method": ("Method",),
    "ragteam.graphs.methods.registry": ("register", "build_graph", "get_method", "methods"),
    # running: context, policies, retrievers, data, traces
    "ragteam.nodes.context": ("run_context", "arun_context", "RunContext", "Settings", "make_context"),
    "ragteam.nodes.written": ("WrittenReplies",),
    "ragteam.nodes.serial_chains": ("SerialChains",),
    "ragteam.nodes.planning": ("Planning",),
    "ragteam.nodes.team": ("Team",),
    "ragteam.graphs.run": ("run", "arun", "arun_many", "RunFailed"),
    "ragteam.graphs.results": ("RunResult",),
    "ragteam.nodes.policies.spec": ("load_policy",),
    "ragteam.nodes.policies.scripted": ("ScriptedPolicy", "Rule"),
    "ragteam.nodes.policies.chat": ("ChatModelPolicy",),
    "ragteam.nodes.roles": ("plumbing_policy",),
    "ragteam.stores.demo": ("demo_retriever",),
    "ragteam.stores.index": ("build_index", "open_index", "open_retriever"),
    "ragteam.nodes.tracing": ("render_tree", "write_jsonl", "read_jsonl"),
    # evaluating and drawing
    "ragteam.graphs.eval.evaluate": ("evaluate", "evaluate_graph"),
    "ragteam.graphs.eval.compare": ("compare_runs",),
    "ragteam.graphs.apps.drawing": ("mermaid", "svg"),
    # rewards: what a scheme returns, and the pieces the built-in schemes are made of
    "ragteam.graphs.methods.rewards": ("RewardOutcome", "RewardScheme", "last_call", "format_penalties"),
    "ragteam.graphs.eval.metrics": ("score",),
    "ragteam.stores.datasets": ("read_dataset", "QAExample"),
    # training
    "ragteam.trainers.ppo_graph": ("train_ppo",),
    "ragteam.trainers.config": ("TrainConfig",),
    "ragteam.trainers.engines": ("RolloutEngine",),
}
_WHERE = {name: module for module, names in _MODULES.items() for name in names}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'ragteam' has no attribute {name!r}")
    value = getattr(importlib.import_module(_WHERE[name]), name)
    globals()[name] = value  # resolved once
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
