"""My first graph: rewrite the question into a search query, retrieve, answer (docs/compose_your_own_graph.md).

    ragteam run --graph examples/my_first_graph.py:graph --policy scripted "Who is Ed Wood?"
"""
from langgraph.graph import END, START, StateGraph

import ragteam as rt

builder = StateGraph(rt.WorkflowState)                 # the state ragteam's nodes read and write
builder.add_node("QR", rt.query_rewriter("QR"))        # an LLM role: question -> search query
builder.add_node("RA", rt.retriever("RA"))             # a tool, no LLM: query -> documents
builder.add_node("AG", rt.answer_generator("AG"))      # an LLM role: documents -> answer
builder.add_edge(START, "QR")
builder.add_edge("QR", "RA")
builder.add_edge("RA", "AG")
builder.add_edge("AG", END)
graph = builder.compile(name="my_first_graph")
