"""The JADE loop as a LangGraph graph: plan → execute → update trace, until solved or out of budget.

Outer graph::

    begin ──route──► solve_task (one Send per target) ──► end_round ──route──► … ──► finish

``route`` picks the work of the next round from the trace (pre-order): the first pending node, or
all pending parallel siblings at once (QDP children fan out), or a decomposed non-root node whose
children are all solved (its answer is composed by AS). ``solve_task`` is itself a graph:
``plan`` (the planner emits a topology) → ``execute`` (the compiled workflow runs); or ``compose``.
``finish`` returns the root's own answer when it was solved directly, else asks AS to synthesize
the final answer from the root's sub-answers.
"""

from __future__ import annotations

import operator
from dataclasses import replace
from typing import Annotated, Literal, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from langgraph.types import Send

from graphs.compiler import compile_topology
from graphs.topology import Topology, parse_topology
from graphs.trace_state import (JadeState, TaskNode, child_nodes, children_of, known_before,
                                merge_trace, resolve_references, root_node)
from graphs.workflow_state import add_costs
from nodes.context import RunContext
from nodes.invoke import call_role
from nodes.parsing import Parsed
from nodes.roles import AS, PLANNER, Observation, parse_workflow_tag


def parse_planner_action(text: str, observation: Observation) -> Parsed:
    """The planner's reply → a validated ``Topology``; on any violation the action is None and
    the runtime substitutes the configured fallback workflow."""
    tagged = parse_workflow_tag(text, observation)
    if not tagged.ok:
        return tagged
    topology = parse_topology(tagged.action, allow_decomposition=observation.allow_decomposition)
    if isinstance(topology, Topology):
        return Parsed(topology)
    return Parsed.violation(f"{topology.reason} in {tagged.action!r}", fallback=None)


PLANNER_ROLE = replace(PLANNER, parse=parse_planner_action)


class TaskState(TypedDict, total=False):
    target: TaskNode
    round: int
    mode: Literal["solve", "compose"]
    known: list[tuple[str, str]]      # solve: earlier sibling answers; compose: children's answers
    topology: str
    planner_ok: bool
    planner_violation: str
    trace: Annotated[list[TaskNode], merge_trace]
    rounds: Annotated[list[dict], operator.add]
    costs: Annotated[dict[str, float], add_costs]


class TaskOutput(TypedDict, total=False):
    trace: Annotated[list[TaskNode], merge_trace]
    rounds: Annotated[list[dict], operator.add]
    costs: Annotated[dict[str, float], add_costs]


# -- solve_task subgraph --------------------------------------------------------------------------
async def plan(state: TaskState, runtime: Runtime[RunContext]) -> dict:
    ctx, target = runtime.context, state["target"]
    observation = Observation(query=target["resolved"],
                              allow_decomposition=target["depth"] < ctx.settings.max_depth)
    outcome = await call_role(ctx, PLANNER_ROLE, observation, task_id=target["id"],
                              round_=state["round"], node_path=f"{target['id']}/planner")
    topology = outcome.action or parse_topology(ctx.settings.fallback_workflow)
    return {"topology": str(topology), "planner_ok": outcome.parsed.ok,
            "planner_violation": outcome.parsed.reason, "costs": outcome.costs}


async def _run_workflow(topology: Topology, state: TaskState, ctx: RunContext) -> dict:
    target = state["target"]
    inputs = {"task_id": target["id"], "round": state["round"], "question": target["resolved"],
              "known": state.get("known", []), "max_items": ctx.settings.max_subquestions}
    return await compile_topology(topology).ainvoke(inputs, context=ctx)


async def execute(state: TaskState, runtime: Runtime[RunContext]) -> dict:
    ctx, target = runtime.context, state["target"]
    topology = parse_topology(state["topology"])
    result = await _run_workflow(topology, state, ctx)
    costs, executed = result.get("costs", {}), list(result.get("executed", []))
    record = {"round": state["round"], "task_id": target["id"], "question": target["resolved"],
              "workflow": state["topology"], "planner_ok": state.get("planner_ok", True),
              "planner_violation": state.get("planner_violation", "")}
    if topology.decomposition and result.get("subquestions"):
        kind = "serial" if topology.decomposition == "QDS" else "parallel"
        children = child_nodes(target, result["subquestions"], kind)
        updated = {**target, "status": "decomposed", "workflow": state["topology"]}
        record.update(executed=executed, outcome=f"{len(children)} {kind} sub-questions")
        return {"trace": [updated, *children], "costs": costs, "rounds": [record]}
    if topology.decomposition:  # the decomposer gave nothing usable: solve directly this round
        fallback = parse_topology(ctx.settings.fallback_workflow)
        result = await _run_workflow(fallback, state, ctx)
        costs = add_costs(costs, result.get("costs", {}))
        executed += result.get("executed", [])
        record["fallback"] = str(fallback)
    answer = result.get("answer", "")
    record.update(executed=executed, outcome=answer)
    solved = {**target, "answer": answer, "status": "solved", "workflow": state["topology"]}
    return {"trace": [solved], "costs": costs, "rounds": [record]}


async def compose(state: TaskState, runtime: Runtime[RunContext]) -> dict:
    target = state["target"]
    observation = Observation(query=target["resolved"], known=tuple(state.get("known", [])))
    outcome = await call_role(runtime.context, AS, observation, task_id=target["id"],
                              round_=state["round"], node_path=f"{target['id']}/AS")
    record = {"round": state["round"], "task_id": target["id"], "question": target["resolved"],
              "workflow": "AS", "planner_ok": True, "executed": ["AS"], "outcome": outcome.action}
    solved = {**target, "answer": outcome.action, "status": "solved"}
    return {"trace": [solved], "costs": outcome.costs, "rounds": [record]}


def _task_entry(state: TaskState) -> str:
    return "compose" if state.get("mode") == "compose" else "plan"


def build_task_graph():
    builder = StateGraph(TaskState, context_schema=RunContext, output_schema=TaskOutput)
    builder.add_node("plan", plan)
    builder.add_node("execute", execute)
    builder.add_node("compose", compose)
    builder.add_conditional_edges(START, _task_entry, ["plan", "compose"])
    builder.add_edge("plan", "execute")
    builder.add_edge("execute", END)
    builder.add_edge("compose", END)
    return builder.compile(name="solve_task")


# -- outer loop -----------------------------------------------------------------------------------
def begin(state: JadeState) -> dict:
    return {"trace": [root_node(state["question"])], "round": 0}


def next_targets(trace: list[TaskNode]) -> tuple[str, list[TaskNode]]:
    """("solve" | "compose", targets) for the next round, or ("done", [])."""
    for node in trace:
        if node["status"] == "pending":
            if node["kind"] != "parallel":
                return "solve", [node]
            siblings = children_of(trace, node["parent"])
            return "solve", [s for s in siblings if s["status"] == "pending"]
        if node["status"] == "decomposed" and node["parent"] is not None:
            if all(child["status"] == "solved" for child in children_of(trace, node["id"])):
                return "compose", [node]
    return "done", []


def route(state: JadeState, runtime: Runtime[RunContext]):
    trace = state["trace"]
    mode, targets = next_targets(trace)
    if mode == "done" or state["round"] >= runtime.context.settings.max_rounds:
        return "finish"
    sends = []
    for target in targets:
        if mode == "compose":
            known = [(c["resolved"], c["answer"] or "") for c in children_of(trace, target["id"])]
        else:
            siblings = children_of(trace, target["parent"]) if target["parent"] else []
            target = {**target, "resolved": resolve_references(target["question"], siblings)}
            known = known_before(trace, target)
        sends.append(Send("solve_task", {"target": target, "round": state["round"] + 1,
                                         "mode": mode, "known": known}))
    return sends


def end_round(state: JadeState) -> dict:
    return {"round": state["round"] + 1}


async def finish(state: JadeState, runtime: Runtime[RunContext]) -> dict:
    trace = state["trace"]
    root = trace[0]
    stop_reason = "solved" if next_targets(trace)[0] == "done" else "round_budget"
    if root["status"] == "solved":
        return {"answer": root["answer"] or "", "stop_reason": stop_reason}
    findings = tuple((c["resolved"], c["answer"]) for c in children_of(trace, root["id"])
                     if c["status"] == "solved")
    outcome = await call_role(runtime.context, AS, Observation(query=root["question"], known=findings),
                              task_id=root["id"], round_=state["round"] + 1, node_path="0/AS")
    return {"answer": outcome.action, "stop_reason": stop_reason, "costs": outcome.costs}


def build_jade_graph():
    builder = StateGraph(JadeState, context_schema=RunContext)
    builder.add_node("begin", begin)
    builder.add_node("solve_task", build_task_graph())
    builder.add_node("end_round", end_round)
    builder.add_node("finish", finish)
    builder.add_edge(START, "begin")
    builder.add_conditional_edges("begin", route, ["solve_task", "finish"])
    builder.add_edge("solve_task", "end_round")
    builder.add_conditional_edges("end_round", route, ["solve_task", "finish"])
    builder.add_edge("finish", END)
    return builder.compile(name="jade")
