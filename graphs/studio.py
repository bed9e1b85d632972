"""Every method graph as a module attribute, for ``langgraph dev`` / LangGraph Studio (see
``langgraph.json``). Runs from Studio take an optional JSON context such as
``{"policy": "offline", "index": "indexes/wiki", "max_rounds": 4}`` (``graphs.run_context``)."""

from graphs.registry import build_graph

jade = build_graph("jade")
mao_arag = build_graph("mao_arag")
m_ask = build_graph("m_ask")
apex = build_graph("apex")
qagent = build_graph("qagent")
qagent_submodule = build_graph("qagent_submodule")
search_r1 = build_graph("search_r1")
llm_only = build_graph("llm_only")
vanilla_rag = build_graph("vanilla_rag")
static_pipeline = build_graph("static_pipeline")
