"""Runtime overhead: a ragteam JADE run vs the same graph hand-written in plain LangGraph.

Every side runs planner → QR → RA → DS → AG with a zero-latency scripted policy and an in-memory
retriever, so only orchestration is measured. Baselines, both making the same policy calls and
parsing the same tags, with no topology language, compile cache, trace state or transitions:

- hand-written JADE: the same two-level shape a person would write by hand — an outer loop graph
  whose plan node picks the workflow and whose execute node invokes a workflow subgraph (QR → RA
  → DS → AG), looping until answered. This is "the same graph"; target ratio <= 1.15.
- flat pipeline: the five nodes in one graph, no loop — a floor, reported for information.

The figure is time per role node (5 per run).

    python benchmarks/bench_runtime.py [--runs 300]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict

from ragteam.graphs.methods.jade import build_jade_graph
from ragteam.graphs.run import arun
from ragteam.nodes.context import RunContext
from ragteam.nodes.parsing import tag_content
from ragteam.nodes.roles.jade import AG, DS, PLANNER, QR, Observation
from ragteam.nodes.policies.scripted import ScriptedPolicy
from ragteam.nodes.team import Team
from ragteam.stores.documents import Document

RULES = {"planner": "<workflow>QR,RA,DS,AG</workflow>", "QR": "<query>rewritten</query>",
         "DS": "<id>0, 1</id>", "AG": "<answer>Shirley Temple</answer>"}
QUESTION = "Who portrayed Corliss Archer in the film Kiss and Tell?"
NODES_PER_RUN = 5  # planner, QR, RA, DS, AG


class StaticRetriever:
    docs = [Document(f"d{i}", f"Title {i}", "some text " * 20) for i in range(5)]

    def search(self, query, k=5):
        return self.docs[:k]


class HandState(TypedDict, total=False):
    question: str
    query: str
    documents: list
    selected: list
    answer: str


def hand_written_roles(policy, retriever):
    """The same calls and parsing as ragteam's roles, written directly with no framework."""
    async def ask(role, observation):
        [gen] = await policy.generate([role.request(observation)])
        return gen.text

    async def plan(state):
        await ask(PLANNER, Observation(query=state["question"]))
        return {}

    async def qr(state):
        text = await ask(QR, Observation(query=state["question"]))
        return {"query": tag_content(text, "query") or state["question"]}

    async def ra(state):
        return {"documents": await asyncio.to_thread(retriever.search, state["query"], 5)}

    async def ds(state):
        docs = state["documents"]
        text = await ask(DS, Observation(query=state["question"], documents=tuple(docs)))
        ids = [int(x) for x in (tag_content(text, "id") or "").replace(" ", "").split(",") if x.isdigit()]
        return {"selected": [docs[i] for i in ids if i < len(docs)]}

    async def ag(state):
        text = await ask(AG, Observation(query=state["question"], documents=tuple(state["selected"])))
        return {"answer": tag_content(text, "answer") or ""}

    return plan, [("QR", qr), ("RA", ra), ("DS", ds), ("AG", ag)]


def chain(steps):
    builder = StateGraph(HandState)
    previous = START
    for name, fn in steps:
        builder.add_node(name, fn)
        builder.add_edge(previous, name)
        previous = name
    builder.add_edge(previous, END)
    return builder.compile()


def hand_written_flat(policy, retriever):
    plan, steps = hand_written_roles(policy, retriever)
    return chain([("plan", plan), *steps])


def hand_written_jade(policy, retriever):
    plan, steps = hand_written_roles(policy, retriever)
    workflow = chain(steps)

    async def execute(state):
        result = await workflow.ainvoke({"question": state["question"]})
        return {"answer": result["answer"]}

    builder = StateGraph(HandState)
    builder.add_node("plan", plan)
    builder.add_node("execute", execute)
    builder.add_edge(START, "plan")
    builder.add_edge("plan", "execute")
    builder.add_conditional_edges("execute", lambda s: END if s.get("answer") else "plan", ["plan", END])
    return builder.compile()


async def time_runs(run_once, runs: int) -> list[float]:
    for _ in range(20):  # warm-up: imports, compile cache, first-call costs
        await run_once()
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        await run_once()
        samples.append(time.perf_counter() - started)
    return samples


async def main(runs: int) -> None:
    retriever = StaticRetriever()
    ctx = RunContext(Team(ScriptedPolicy(RULES)), retriever)
    jade = build_jade_graph()
    hand = hand_written_jade(ScriptedPolicy(RULES), retriever)
    flat = hand_written_flat(ScriptedPolicy(RULES), retriever)

    async def ragteam_once():
        result = await arun(jade, QUESTION, ctx)
        assert result.answer == "Shirley Temple" and len(result.transitions) == 4

    def once(graph):
        async def run_once():
            state = await graph.ainvoke({"question": QUESTION})
            assert state["answer"] == "Shirley Temple"
        return run_once

    # Interleave the sides so machine noise hits all alike.
    samples = {"ragteam": [], "hand": [], "flat": []}
    sides = {"ragteam": ragteam_once, "hand": once(hand), "flat": once(flat)}
    for _ in range(3):
        for name, run_once in sides.items():
            samples[name] += await time_runs(run_once, runs // 3)
    per_node = {name: statistics.median(xs) / NODES_PER_RUN * 1e3 for name, xs in samples.items()}
    print(f"runs per side                 : {len(samples['ragteam'])}")
    print(f"flat pipeline (floor)         : {per_node['flat']:.3f} ms/node")
    print(f"hand-written JADE (baseline)  : {per_node['hand']:.3f} ms/node")
    print(f"ragteam JADE run              : {per_node['ragteam']:.3f} ms/node")
    print(f"ratio ragteam/hand-written    : {per_node['ragteam'] / per_node['hand']:.2f}  (target <= 1.15)")
    print(f"ratio ragteam/flat            : {per_node['ragteam'] / per_node['flat']:.2f}  (information)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=300, help="timed runs per side (default 300)")
    asyncio.run(main(parser.parse_args().runs))
