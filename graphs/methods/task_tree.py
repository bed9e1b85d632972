"""JADE's global state s_t: the original question plus its task tree (the paper's "execution
trace"; here *trace* always means the log of LLM calls, so the tree is called the task tree).

A task node is ⟨sub-query, answer⟩ with its place in the decomposition tree. The tree is kept as
a pre-order list (a node's children follow it), so "the first unsolved node" is a plain scan.
"""

from __future__ import annotations

import operator
from typing import Annotated, Callable, Literal

from typing_extensions import TypedDict

from ragteam.graphs.run import RoundRecord
from ragteam.nodes.parsing import fan_out_references
from ragteam.nodes.parsing import resolve_references as substitute


Status = Literal["pending", "solved", "decomposed"]
Kind = Literal["root", "serial", "parallel"]


class TaskNode(TypedDict):
    id: str                 # "0" for the root, "0.2" for its second child, ...
    question: str           # as written by the decomposer (may hold #1-style references)
    resolved: str           # the question with references replaced by earlier answers
    answer: str | None
    status: Status
    kind: Kind
    parent: str | None
    depth: int
    workflow: str | None    # the topology that solved or decomposed it


def root_node(question: str) -> TaskNode:
    return TaskNode(id="0", question=question, resolved=question, answer=None, status="pending",
                    kind="root", parent=None, depth=0, workflow=None)


def child_nodes(parent: TaskNode, questions: list[str], kind: Kind) -> list[TaskNode]:
    return [TaskNode(id=f"{parent['id']}.{i}", question=q, resolved=q, answer=None, status="pending",
                     kind=kind, parent=parent["id"], depth=parent["depth"] + 1, workflow=None)
            for i, q in enumerate(questions, 1)]


def merge_tasks(existing: list[TaskNode] | None, updates: list[TaskNode] | None) -> list[TaskNode]:
    """Replace nodes by id; insert new ones after the last descendant of their parent (append
    when the parent is not in this list)."""
    tasks = list(existing or [])
    for node in updates or []:
        index = next((i for i, old in enumerate(tasks) if old["id"] == node["id"]), None)
        if index is not None:
            tasks[index] = node
            continue
        parent_at = next((i for i, old in enumerate(tasks) if old["id"] == node["parent"]), None)
        if parent_at is None:  # a partial list of updates (e.g. inside a task subgraph): append
            tasks.append(node)
            continue
        position, prefix = parent_at + 1, node["parent"] + "."
        while position < len(tasks) and tasks[position]["id"].startswith(prefix):
            position += 1
        tasks.insert(position, node)
    return tasks


def children_of(tasks: list[TaskNode], node_id: str) -> list[TaskNode]:
    return [node for node in tasks if node["parent"] == node_id]


def known_before(tasks: list[TaskNode], node: TaskNode) -> list[tuple[str, str]]:
    """Select(s_t): the solved siblings that precede ``node`` — what a serial child builds on."""
    if node["parent"] is None:
        return []
    known = []
    for sibling in children_of(tasks, node["parent"]):
        if sibling["id"] == node["id"]:
            break
        if sibling["status"] == "solved":
            known.append((sibling["resolved"], sibling["answer"] or ""))
    return known


def _sibling_answers(siblings: list[TaskNode]) -> Callable[[int], str | None]:
    """``#n`` → the answer of the n-th sibling, when that sibling is solved."""
    def answer_for(n: int) -> str | None:
        if 1 <= n <= len(siblings) and siblings[n - 1]["status"] == "solved":
            return siblings[n - 1]["answer"]
        return None
    return answer_for


def resolve_references(question: str, siblings: list[TaskNode]) -> str:
    """Replace ``#n`` with the answer of the n-th sibling, when that sibling is solved."""
    return substitute(question, _sibling_answers(siblings))


def fan_out_questions(question: str, siblings: list[TaskNode], limit: int) -> list[str]:
    """``question`` once per name of the first earlier answer it names that lists several (at most
    ``limit``), for one retrieval each; [] when none does or ``limit`` is 0."""
    return fan_out_references(question, _sibling_answers(siblings), limit) if limit else []


class JadeState(TypedDict, total=False):
    question: str
    tasks: Annotated[list[TaskNode], merge_tasks]
    round: int                                        # JADE rounds completed
    rounds: Annotated[list[RoundRecord], operator.add]  # one record per task handled in a round
    turns: int                                        # = round, the run's generic loop count
    answer: str
    stop_reason: str
