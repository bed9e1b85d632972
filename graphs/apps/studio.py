"""Every registered method graph as a module attribute, for ``langgraph dev`` / LangGraph Studio
(``langgraph.json`` lists them; ``tests/test_studio.py`` checks it matches the registry).

Runs from Studio may pass a JSON context (``nodes.context.ContextSpec``), e.g.
``{"policy": "scripted", "index": "indexes/wiki", "max_rounds": 4, "trace_out": "runs/t.jsonl"}``.
The server opens whatever local paths a context names: it is for trusted local use, on 127.0.0.1.
"""

from graphs.methods import build_graph, methods

globals().update({name: build_graph(name) for name in methods()})


def langgraph_config() -> dict:
    """What ``langgraph.json`` should hold for the current registry."""
    return {"dependencies": ["."],
            "graphs": {name: f"./graphs/apps/studio.py:{name}" for name in methods()},
            "env": {"HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}}


if __name__ == "__main__":  # python graphs/apps/studio.py > langgraph.json
    import json

    print(json.dumps(langgraph_config(), indent=2))
