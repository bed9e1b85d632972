"""The JADE loop (Algorithm 1) as a LangGraph graph: plan → execute → update the task tree, repeated.

    START ─continue?─► round ─continue?─► round … ─► finish ─► END
                          (END directly when the root was solved in one go)

Each ``round`` node is one iteration of the paper's while-loop. It reads the task tree (kept
in pre-order) to find its targets: the first pending node; or all pending parallel siblings at
once (QDP children, solved concurrently); or a decomposed non-root node whose children are all
solved (AS composes its answer). For each solving target the planner emits a topology, the
compiled workflow for it runs (``compiler.compile_topology``), and the task tree is updated: a
decomposition appends children, anything else answers the target. ``finish`` asks AS for the
final answer from the root's sub-answers when the root was decomposed or the budget ran out.

Training: every role learns on one shared model, with JADE's reward (``JadeReward``).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace
from typing import Literal

from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from typing_extensions import TypedDict

from ragteam.graphs.compiler import compile_topology
from ragteam.graphs.eval.metrics import score
from ragteam.graphs.methods.method import Method, WorkflowChoice
from ragteam.graphs.methods.registry import register
from ragteam.graphs.methods.rewards import RewardOutcome, format_penalties, last_call
from ragteam.graphs.methods.task_tree import (JadeState, TaskNode, child_nodes, children_of, fan_out_questions,
                                      known_before, resolve_references, root_node)
from ragteam.graphs.run import RoundRecord, RunResult
from ragteam.nodes.call import call_role
from ragteam.nodes.context import ContextSpec, RunContext, Settings, arun_context, run_context
from ragteam.nodes.roles.base import Observation
from ragteam.nodes.roles.jade import AS, PLANNER, workflow_reply
from ragteam.nodes.topology import Topology, checked_workflow, parse_topology
from ragteam.stores.datasets import QAExample


class TaskState(TypedDict, total=False):
    """One target of a round and what it may see."""

    target: TaskNode
    round: int
    mode: Literal["solve", "compose"]
    known: list[tuple[str, str]]      # solve: earlier sibling answers; compose: children's answers
    variants: list[str]               # solve: the target once per name of a listed earlier answer


# -- one target ---------------------------------------------------------------------------------------
async def solve_task(state: TaskState, ctx: RunContext) -> dict:
    """Phase 1 (planner picks a topology) and phase 2 (its compiled workflow runs) for one
    target; or, in compose mode, AS answers a decomposed node from its children's answers."""
    if state.get("mode") == "compose":
        return await compose(state, ctx)
    target = state["target"]
    observation = Observation(query=target["resolved"],
                              allow_decomposition=target["depth"] < ctx.settings.max_depth)
    # a fixed workflow or a training group's is a reply written for the planner (Settings.written)
    outcome = await call_role(ctx, PLANNER, observation, task_id=target["id"], turn=state["round"],
                              node_path=f"{target['id']}/planner")
    topology = outcome.action or fallback_topology(ctx)
    update = await execute(topology, state, ctx) if topology else unanswered(state)
    record = update["rounds"][0]
    record.planner_ok, record.planner_violation = outcome.parsed.ok, outcome.parsed.reason
    return update


def fallback_topology(ctx: RunContext) -> Topology | None:
    """What runs when a plan is unusable; None when ``planning.fallback`` is empty (training can
    turn the fallback off so a broken plan cannot borrow the fallback's answer)."""
    return parse_topology(ctx.settings.planning.fallback) if ctx.settings.planning.fallback else None


def unanswered(state: TaskState) -> dict:
    target = state["target"]
    record = RoundRecord(state["round"], target["id"], target["resolved"], workflow="(none)")
    update = {"tasks": [{**target, "answer": "", "status": "solved", "workflow": "(none)"}],
              "rounds": [record]}
    if target["parent"] is None:
        update.update(answer="", stop_reason="solved")
    return update


async def _run_workflow(topology: Topology, state: TaskState, ctx: RunContext) -> dict:
    target = state["target"]
    inputs = {"task_id": target["id"], "round": state["round"], "question": target["resolved"],
              "known": state.get("known", []), "max_items": ctx.settings.max_subquestions,
              "variants": state.get("variants", [])}
    return await compile_topology(topology).ainvoke(inputs, context=ctx)


async def execute(topology: Topology, state: TaskState, ctx: RunContext) -> dict:
    target = state["target"]
    result = await _run_workflow(topology, state, ctx)
    record = RoundRecord(state["round"], target["id"], target["resolved"], workflow=str(topology),
                         executed=list(result.get("executed", [])))
    if topology.decomposition and result.get("subquestions"):
        kind = "serial" if topology.decomposition == "QDS" else "parallel"
        children = child_nodes(target, result["subquestions"], kind)
        updated = {**target, "status": "decomposed", "workflow": str(topology)}
        record.outcome = f"{len(children)} {kind} sub-questions"
        return {"tasks": [updated, *children], "rounds": [record]}
    fallback = fallback_topology(ctx) if topology.decomposition else None
    if fallback:  # the decomposer gave nothing usable: solve directly this round
        result = await _run_workflow(fallback, state, ctx)
        record.executed += result.get("executed", [])
        record.fallback = str(fallback)
    answer = result.get("answer", "")
    record.outcome = answer
    solved = {**target, "answer": answer, "status": "solved", "workflow": str(topology)}
    update = {"tasks": [solved], "rounds": [record]}
    if target["parent"] is None:  # the root was solved directly: its answer is the run's answer
        update.update(answer=answer, stop_reason="solved")
    return update


async def compose(state: TaskState, ctx: RunContext) -> dict:
    target = state["target"]
    observation = Observation(query=target["resolved"], known=tuple(state.get("known", [])))
    outcome = await call_role(ctx, AS, observation, task_id=target["id"],
                              turn=state["round"], node_path=f"{target['id']}/AS")
    record = RoundRecord(state["round"], target["id"], target["resolved"], workflow="AS",
                         executed=["AS"], outcome=outcome.action)
    solved = {**target, "answer": outcome.action, "status": "solved"}
    return {"tasks": [solved], "rounds": [record]}


# -- outer loop -----------------------------------------------------------------------------------
def next_targets(tasks: list[TaskNode]) -> tuple[str, list[TaskNode]]:
    """("solve" | "compose", targets) for the next round, or ("done", [])."""
    for node in tasks:
        if node["status"] == "pending":
            if node["kind"] != "parallel":
                return "solve", [node]
            siblings = children_of(tasks, node["parent"])
            return "solve", [s for s in siblings if s["status"] == "pending"]
        if node["status"] == "decomposed" and node["parent"] is not None:
            if all(child["status"] == "solved" for child in children_of(tasks, node["id"])):
                return "compose", [node]
    return "done", []


def round_tasks(tasks: list[TaskNode], round_: int, fan_out: int = 0) -> list[TaskState]:
    """The targets of the next round, with #n references resolved and what each may see; with
    ``fan_out``, a target naming an earlier answer of several names also carries one question
    per name (at most ``fan_out``), which its retrieval searches one by one."""
    mode, targets = next_targets(tasks)
    chosen = []
    for target in targets:
        if mode == "compose":
            known = [(c["resolved"], c["answer"] or "") for c in children_of(tasks, target["id"])]
            chosen.append(TaskState(target=target, round=round_, mode=mode, known=known))
            continue
        siblings = children_of(tasks, target["parent"]) if target["parent"] else []
        target = {**target, "resolved": resolve_references(target["question"], siblings)}
        chosen.append(TaskState(target=target, round=round_, mode=mode, known=known_before(tasks, target),
                                variants=fan_out_questions(target["question"], siblings, fan_out)))
    return chosen


async def jade_round(state: JadeState, runtime: Runtime[RunContext]) -> dict:
    tree = state.get("tasks") or [root_node(state["question"])]  # round 1 starts at the root
    round_ = state.get("round", 0) + 1
    ctx = await arun_context(runtime)
    tasks = round_tasks(tree, round_, ctx.settings.serial.fan_out)
    # Parallel siblings fan out: their planners and workflows run concurrently, and their model
    # calls meet in the policy's batch coalescer.
    if len(tasks) == 1:  # the common case; skips creating a task on the event loop
        updates = [await solve_task(tasks[0], ctx)]
    else:
        updates = await asyncio.gather(*(solve_task(task, ctx) for task in tasks))
    merged: dict = {"round": round_, "turns": round_, "tasks": [], "rounds": []}
    for update in updates:
        merged["tasks"] += update["tasks"]
        merged["rounds"] += update["rounds"]
        for key in ("answer", "stop_reason"):
            if key in update:
                merged[key] = update[key]
    return merged


def should_continue(state: JadeState, runtime: Runtime[RunContext]) -> str:
    tree = state.get("tasks") or [root_node(state["question"])]
    if tree[0]["status"] == "solved":  # solved directly; the round already set the answer
        return END
    if next_targets(tree)[0] == "done" or state.get("round", 0) >= run_context(runtime).settings.max_rounds:
        return "finish"
    return "round"


async def finish(state: JadeState, runtime: Runtime[RunContext]) -> dict:
    """AS synthesizes the final answer from the root's solved sub-questions (all of them, or
    what the round budget allowed)."""
    tree = state.get("tasks") or [root_node(state["question"])]
    root = tree[0]
    stop_reason = "solved" if next_targets(tree)[0] == "done" else "round_budget"
    findings = tuple((c["resolved"], c["answer"]) for c in children_of(tree, root["id"])
                     if c["status"] == "solved")
    outcome = await call_role(await arun_context(runtime), AS, Observation(query=root["question"], known=findings),
                              task_id=root["id"], turn=state.get("round", 0) + 1, node_path="0/AS")
    return {"answer": outcome.action, "stop_reason": stop_reason}


def build_jade_graph(name: str = "jade"):
    builder = StateGraph(JadeState, context_schema=ContextSpec)
    builder.add_node("round", jade_round)
    builder.add_node("finish", finish)
    builder.add_conditional_edges(START, should_continue, ["round", "finish", END])
    builder.add_conditional_edges("round", should_continue, ["round", "finish", END])
    builder.add_edge("finish", END)
    return builder.compile(name=name)


# -- training --------------------------------------------------------------------------------------
@dataclass
class JadeReward:
    """JADE Eq. 6–8: F1 − (α·min(T/Tmax, 1) + β·min(N_ret/Rmax, 1)) on the run's last call
    (shared through GAE), and −``format_penalty`` on each call whose output broke its format
    (local). T = rounds, N_ret = retrieval calls; Tmax = Rmax = 3 as in the paper."""

    alpha: float = 0.05          # per normalized round
    beta: float = 0.05           # per normalized retrieval call
    max_rounds: int = 3
    max_retrievals: int = 3
    format_penalty: float = 1.0
    name: str = "jade"
    train_roles: frozenset[str] | None = None

    def __call__(self, result: RunResult, example: QAExample) -> RewardOutcome:
        scores = score(result.answer, example.golds, example.metric)
        rounds, retrievals = result.costs.get("turns", 0), result.costs.get("retrieval_calls", 0)
        cost = (self.alpha * min(rounds / self.max_rounds, 1.0)
                + self.beta * min(retrievals / self.max_retrievals, 1.0))
        rewards = [0.0] * len(result.transitions)
        terminal = last_call(result.transitions)
        if terminal is not None:
            rewards[terminal] = scores["f1"] - cost
        return RewardOutcome(rewards, {**scores, "cost_penalty": cost},
                             local=format_penalties(result.transitions, self.format_penalty))


def forced(settings: Settings, workflow: str) -> Settings:
    """Run settings under which the planner's reply for the whole question is written as
    ``workflow`` (traced and trained like a sampled one; sub-questions are planned as usual)."""
    return replace(settings, written=replace(settings.written, plan=workflow))


# JADE's planner answers with a workflow; MAO-ARAG runs the same loop, so it shares this
PLANNER_WORKFLOWS = WorkflowChoice(check=checked_workflow, reply=workflow_reply, force=forced)

JADE = register(Method(
    "jade", "JADE: planner → compiled workflow per (sub-)question, serial/parallel decomposition, "
    "AS synthesis; every role on one shared model, all trained",
    build=build_jade_graph, default_reward="jade", rewards={"jade": JadeReward},
    workflow_choice=PLANNER_WORKFLOWS))
