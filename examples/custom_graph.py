"""Compose your own RAG graph from ragteam's nodes.

    python examples/custom_graph.py [--policy offline|scripted|hf:PATH] ["question"]

Two ways to the same shape — parallel multi-query retrieval, then document selection, then an
answer:

1. in the topology language, compiled for you:   [RA|QR,RA],DS,AG
2. by hand in plain LangGraph, with ragteam's node factories plus a node of your own (here a
   non-LLM keyword query built from the question's capitalised words).

Every LLM call in either graph is traced like in the built-in methods.
"""

import argparse
import asyncio
import os
import re

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from langgraph.graph import END, START, StateGraph
from langgraph.types import Send

import sys
from pathlib import Path
_CHECKOUT = Path(__file__).resolve().parents[1]
if not __package__ and (_CHECKOUT / "ragteam" / "__init__.py").is_file():
    sys.path.insert(0, str(_CHECKOUT))  # run from a checkout: its own ragteam, not an installed one

from ragteam.graphs.compiler import compile_topology
from ragteam.nodes.workflow import answer_generator, document_selector, retriever
from ragteam.nodes.policies.spec import load_policy
from ragteam.nodes.topology import parse_topology
from ragteam.nodes.workflow import BranchOutput, WorkflowState
from ragteam.nodes.context import RunContext
from ragteam.nodes.team import Team
from ragteam.nodes.tracing import render_tree
from ragteam.stores.demo import demo_retriever


# 1. One line: the topology language.
from_topology = compile_topology(parse_topology("[RA|QR,RA],DS,AG"))


# 2. By hand: two retrieval branches (the question as asked, and a keyword query), joined.
def keyword_query(state: WorkflowState) -> dict:
    """A node of your own: no model, just the question's names as a search query."""
    names = re.findall(r"\b[A-Z][\w'-]+(?:\s+[A-Z][\w'-]+)*", state["question"])
    return {"query": " ".join(names) or state["question"]}


def branch(*steps):
    """A small sequential subgraph whose output is only its documents (like ragteam's branches)."""
    builder = StateGraph(WorkflowState, output_schema=BranchOutput)
    previous = START
    for name, node in steps:
        builder.add_node(name, node)
        builder.add_edge(previous, name)
        previous = name
    builder.add_edge(previous, END)
    return builder.compile()


builder = StateGraph(WorkflowState)
builder.add_node("as_asked", branch(("RA", retriever("as_asked/RA"))))
builder.add_node("keywords", branch(("KW", keyword_query), ("RA", retriever("keywords/RA"))))
builder.add_node("DS", document_selector("DS"))
builder.add_node("AG", answer_generator("AG"))
builder.add_conditional_edges(START, lambda s: [Send("as_asked", s), Send("keywords", s)],
                              ["as_asked", "keywords"])
builder.add_edge("as_asked", "DS")
builder.add_edge("keywords", "DS")
builder.add_edge("DS", "AG")
builder.add_edge("AG", END)
by_hand = builder.compile(name="keywords_and_question")


async def main(question: str, policy: str) -> None:
    ctx = RunContext(Team(load_policy(policy)), demo_retriever())
    inputs = {"task_id": "0", "round": 1, "question": question}
    for name, graph in [("topology [RA|QR,RA],DS,AG", from_topology), ("hand-built", by_hand)]:
        run_ctx = ctx.for_new_run()
        state = await graph.ainvoke(inputs, context=run_ctx)
        print(f"\n== {name}\nanswer: {state['answer']}\nnodes: {state['executed']}")
        print(f"documents: {[d.title for d in state['documents']]}")
        print(render_tree(run_ctx.tracer.transitions))


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("question", nargs="?",
                        default="Who portrayed Corliss Archer in the film Kiss and Tell?")
    parser.add_argument("--policy", default="offline")
    args = parser.parse_args()
    asyncio.run(main(args.question, args.policy))
