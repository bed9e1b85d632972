"""Every known graph as a module attribute, for ``langgraph dev`` / LangGraph Studio.

Served here: every registered method (built-in and installed), and the user's own graphs named in
``$RAGTEAM_GRAPHS`` (comma-separated ``path/to/file.py:NAME`` or ``package.module:NAME``), each
checked against the graph contract and adapted like ``ragteam run`` does. The checked-in
``langgraph.json`` lists the registered methods (``tests/test_studio.py`` checks it matches the
registry); ``ragteam studio FILE.py:NAME …`` writes one that also serves the user's graphs.

Runs from Studio may pass a JSON context (``nodes.context.ContextSpec``), e.g.
``{"policy": "scripted", "index": "indexes/wiki", "max_rounds": 4, "trace_out": "runs/t.jsonl"}``.
The server opens whatever local paths a context names: it is for trusted local use, on 127.0.0.1.

The server refuses blocking I/O on its event loop, so nothing a run loads is loaded there: nodes
build their run context in a worker thread (``nodes.context.arun_context``), and when the server
imports this module a background thread loads the default policy and the demo store, so the
first run need not wait for them.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from pathlib import Path
from typing import Sequence

_CHECKOUT = Path(__file__).resolve().parents[2]
if not __package__ and (_CHECKOUT / "ragteam" / "__init__.py").is_file():
    sys.path.insert(0, str(_CHECKOUT))  # run from a checkout: its own ragteam, not an installed one

from ragteam.graphs.methods import get_method, methods
from ragteam.graphs.methods.references import canonical_reference

USER_GRAPHS_ENV = "RAGTEAM_GRAPHS"
_ENV = {"HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
_THIS_MODULE = "ragteam.graphs.apps.studio"
_OLD_MODULE = _THIS_MODULE.removeprefix("ragteam.")  # its name in configs written before the move


def served_methods(references: Sequence[str] = ()) -> dict:
    """The methods this module serves: every registered one, then each reference's."""
    served = dict(methods())
    for reference in references:
        method = get_method(reference)
        if method.name in served:
            raise ValueError(f"graph {reference!r} is named {method.name!r}, like a graph already served")
        served[method.name] = method
    return served


def _references_from_env() -> list[str]:
    return [r.strip() for r in os.environ.get(USER_GRAPHS_ENV, "").split(",") if r.strip()]


def langgraph_config() -> dict:
    """What the checked-in ``langgraph.json`` should hold for the current registry."""
    return {"dependencies": ["."],
            "graphs": {name: f"./graphs/apps/studio.py:{name}" for name in methods()},
            "env": dict(_ENV)}


def user_langgraph_config(references: Sequence[str]) -> dict:
    """A ``langgraph.json`` serving the user's graphs beside every registered one. Graphs are
    named by import path (this module), so the file works from any directory."""
    references = [canonical_reference(r) for r in references]
    served = served_methods(references)
    return {"dependencies": ["."],
            "graphs": {name: f"{_THIS_MODULE}:{name}" for name in served},
            "env": {**_ENV, USER_GRAPHS_ENV: ",".join(references)}}


def write_langgraph_config(references: Sequence[str], out: str | Path) -> list[str]:
    """Write ``user_langgraph_config`` to ``out``; return the user's graph names. A file there is
    replaced only when it is one this function wrote (exactly its shape: ``dependencies``,
    ``graphs`` served by this module, ragteam's ``env``); any other file — the checked-in
    ``langgraph.json``, a config with keys of the user's — is refused, never overwritten."""
    from ragteam.stores.owned import ForeignPathError, new_file, write_text

    out = Path(out)
    if out.exists() or out.is_symlink():
        if out.is_symlink() or not out.is_file() or not _written_here(out):
            raise ForeignPathError(f"{out} exists and is not a config `ragteam studio` wrote: choose "
                                   "another --out (the file is left as it is)")
    else:
        new_file(out, "--out")
    config = user_langgraph_config(references)
    write_text(out, json.dumps(config, indent=2) + "\n")
    return [get_method(r).name for r in references]


def _written_here(path: Path) -> bool:
    """Whether ``path`` holds exactly what ``user_langgraph_config`` writes."""
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError, OSError):
        return False
    if not isinstance(config, dict) or set(config) != {"dependencies", "graphs", "env"}:
        return False
    graphs, env = config["graphs"], config["env"]
    return (config["dependencies"] == ["."] and isinstance(graphs, dict) and bool(graphs)
            and all(spec in (f"{_THIS_MODULE}:{name}", f"{_OLD_MODULE}:{name}") for name, spec in graphs.items())
            and isinstance(env, dict) and set(env) == {*_ENV, USER_GRAPHS_ENV})


def _warm_up() -> None:
    from ragteam.nodes.context import ContextSpec

    try:
        ContextSpec().shared_parts()
    except Exception:  # noqa: BLE001 — the run that needs them reports why they do not load
        pass


def studio_graphs(references: Sequence[str] = ()) -> dict:
    """Name → the graph served: a registered method's own graph (its context form declared); a
    user's graph adapted so Studio asks for the question alone and offers the same form
    (``graphs.contract.studio_graph``)."""
    from ragteam.graphs.contract import studio_graph
    from ragteam.graphs.methods.method import BUILT_IN

    return {name: method.graph() if method.source == BUILT_IN else studio_graph(method.graph(), name, method.outputs)
            for name, method in served_methods(references).items()}


globals().update(studio_graphs(_references_from_env()))

if "LANGSERVE_GRAPHS" in os.environ:  # the LangGraph server's graphs: imported by `langgraph dev`
    threading.Thread(target=_warm_up, name="ragteam-warm-up", daemon=True).start()


if __name__ == "__main__":  # python graphs/apps/studio.py > langgraph.json
    print(json.dumps(langgraph_config(), indent=2))
