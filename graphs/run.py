"""Running a graph on questions: one run per question, many concurrently.

Any graph that keeps the graph contract runs here (``graphs.contract``): a built-in method's, or
a user's own, compiled or not, or a ``Method`` or its name; ``arun`` adapts it once and checks it
before the first node runs, and checks what the run wrote when it ends.
Each run gets its own ``RunContext`` copy (a fresh tracer), so transitions of concurrent runs
never mix; their model calls still meet in the shared policy's request coalescer.

A run that fails, in a node or at the contract check, raises ``RunFailed``: which node (and role)
raised, the original error and traceback, and the transitions recorded until then. A dead engine
(``EngineError``) is no one run's failure and passes through as it is.
"""

from __future__ import annotations

import asyncio
import re
import time
import traceback
from typing import Any, Sequence

from ragteam.graphs.contract import GraphContractError, check_final_state, declared_outputs, ragteam_graph
from ragteam.graphs.methods.registry import Method, get_method
from ragteam.graphs.results import RoundRecord, RunResult
from ragteam.nodes.context import RunContext
from ragteam.nodes.policies.protocol import EngineError
from ragteam.nodes.tracing import Transition, run_costs
from ragteam.stores.text import clean_text


# LangGraph notes the task an exception escaped from, innermost (the node that raised) first
_TASK_NOTE = re.compile(r"(?:During|Before) task with name '(.*)' and (?:id|path) ")


class RunFailed(RuntimeError):
    """A run that failed: a node raised (``node``, and ``role`` when a role's own renderer or
    parser did), or the run ended breaking the graph contract (``error`` is then a
    ``GraphContractError``). ``error`` is the original exception and ``traceback`` its text;
    ``transitions`` are the calls recorded before the failure (the trace so far)."""

    def __init__(self, graph: str, error: BaseException, node: str | None = None,
                 role: str | None = None, transitions: Sequence[Transition] = (), run_id: str = ""):
        self.graph, self.error, self.node, self.role = graph, error, node, role
        self.transitions, self.run_id = list(transitions), run_id
        self.traceback = "".join(traceback.format_exception(error))
        super().__init__(self.message)

    def __reduce__(self):  # picklable (a process pool or Ray sends it back): rebuilt from its parts
        return type(self), (self.graph, self.error, self.node, self.role, self.transitions, self.run_id)

    @property
    def reason(self) -> str:
        """The original error as ``Type: message``."""
        return f"{type(self.error).__name__}: {self.error}"

    @property
    def message(self) -> str:
        """One line saying where the run failed and why."""
        if isinstance(self.error, GraphContractError):
            return str(self.error)
        if isinstance(self.error, UnknownEdgeTarget):
            return f"node {self.node!r}: {self.error}"
        where = f"node {self.node!r}" if self.node else f"graph {self.graph!r}"
        part = getattr(self.error, "ragteam_part", None)  # which of the role's own code raised
        role = f" (role {self.role!r}" + (f", its {part}" if part else "") + ")" if self.role else ""
        return where + role + f" raised {self.reason}"


class UnknownEdgeTarget(KeyError):
    """A conditional edge's function returned a key its path map does not hold."""

    def __str__(self) -> str:
        return str(self.args[0])


def _unknown_edge_target(graph, node: str | None, error: BaseException) -> BaseException:
    """``error`` named for what it is when it is LangGraph's ``KeyError`` for a conditional edge
    of ``node`` (in ``graph`` or a graph inside it) that returned a key its path map lacks: which
    key came back, and the targets there are. Any other error is returned as it is."""
    if not (isinstance(error, KeyError) and node and len(error.args) == 1):
        return error
    key = error.args[0]
    graphs = [graph, *(sub for _, sub in graph.get_subgraphs(recurse=True))]
    for compiled in graphs:
        for branch in getattr(getattr(compiled, "builder", None), "branches", {}).get(node, {}).values():
            if branch.ends and key not in branch.ends:
                targets = ", ".join(map(repr, branch.ends))
                return UnknownEdgeTarget(f"its conditional edge returned {key!r}, which is not one of its "
                                         f"targets ({targets}); return one of those (or add {key!r} to "
                                         "the edge's path map)")
    return error


def _failed_node(error: BaseException) -> str | None:
    for note in getattr(error, "__notes__", ()):
        if isinstance(note, str) and (match := _TASK_NOTE.match(note)):
            return match.group(1)
    return None


def _runnable(graph) -> Any:
    """``graph`` as a contract-keeping graph: a ``Method`` (or a method name or reference, as
    every CLI command takes) builds its own; any other graph is adapted (``ragteam_graph``)."""
    if isinstance(graph, str):
        graph = get_method(graph)
    return graph.graph() if isinstance(graph, Method) else ragteam_graph(graph)


async def arun(graph, question: str, ctx: RunContext, run_id: str | None = None) -> RunResult:
    """Run ``graph`` (a compiled LangGraph graph or a ``StateGraph`` keeping the graph contract,
    a ``Method``, or a method name or reference such as ``"vanilla_rag"``) on ``question`` with a
    fresh tracer; ``run_id`` names the run in its transitions. A blank question is a
    ``ValueError`` (there is nothing to answer); lone surrogates become U+FFFD. A run that fails
    raises ``RunFailed``; a ``EngineError`` passes through."""
    if not isinstance(question, str) or not question.strip():
        raise ValueError(f"a question must be non-empty text, got {question!r}")
    question = clean_text(question)
    graph = _runnable(graph)
    run_ctx = ctx.for_new_run(run_id)
    started = time.perf_counter()
    try:
        # Every graph bounds its own loops (rounds, turns, hops); the super-step limit is a safety net.
        state = await graph.ainvoke({"question": question}, context=run_ctx, config={"recursion_limit": 500})
        # a schema says what a graph may write, not what this run wrote
        check_final_state(state, graph.name)
    except (EngineError, RunFailed):  # a dead engine stops every run; an inner run's failure is named
        raise
    except Exception as error:
        node = _failed_node(error)
        raise RunFailed(graph.name, _unknown_edge_target(graph, node, error), node,
                        getattr(error, "ragteam_role", None), run_ctx.tracer.transitions,
                        run_ctx.tracer.run_id) from error
    costs = run_costs(run_ctx.tracer)  # the tracer is the one source of cost counters
    costs["turns"] = state.get("turns", 0)  # each method's loop count (see Transition.turn)
    costs["wall_time_s"] = time.perf_counter() - started
    return RunResult(question=question, answer=state["answer"],
                     stop_reason=state.get("stop_reason", ""), rounds=state.get("rounds", []),
                     tasks=state.get("tasks", []), costs=costs,
                     transitions=run_ctx.tracer.transitions, run_id=run_ctx.tracer.run_id,
                     outputs={key: state.get(key) for key in declared_outputs(graph)})


async def arun_many(graph, questions: Sequence[str], ctx: RunContext) -> list[RunResult]:
    """Run ``graph`` on every question concurrently (their model calls are batched together)."""
    graph = _runnable(graph)  # a Method is built once, not once per question
    return list(await asyncio.gather(*(arun(graph, q, ctx) for q in questions)))


def run(graph, question: str, ctx: RunContext) -> RunResult:
    """Run ``graph`` (a graph, a ``Method`` or a method name or reference) on one question from
    synchronous code (see ``arun``)."""
    return asyncio.run(arun(graph, question, ctx))
