"""The graph contract: what every ragteam graph receives and returns.

A ragteam graph is a compiled LangGraph graph that

- **receives** ``question`` (str) and nothing else. The workflow nodes (``QR``, ``RA``, ``DS``,
  ``AG``…) place their calls in the trace by ``task_id`` and ``round``, defaulting to ``"0"`` and
  ``1`` (``RUNTIME_IDS``) when a graph does not set them (a graph may use those keys for its own
  counters: JADE's ``round`` is its loop count);
- **returns** ``answer`` (str), ``stop_reason`` (str: why the run ended) and ``turns`` (int: the
  method's loop count), plus, for planner methods, ``rounds`` and ``tasks``; and any further keys
  the graph *declares* as outputs, which ``RunResult.outputs`` then carries (e.g. a verifier's
  verdict).

Built-in methods write all of it themselves. ``ragteam_graph`` adapts any other graph (compiled or
a ``StateGraph``): it checks the contract once, where the graph is loaded, and wraps a graph that
does not write ``stop_reason``/``turns`` in ``prepare → graph → finish`` (ids set, defaults out), so
``run``, eval, Studio and both trainers take it like a built-in one. A graph that breaks the
contract is refused with a ``GraphContractError`` naming the missing key.

A schema only says what a graph *may* write (``WorkflowState`` declares ``answer`` for every graph
that extends it), so ``check_final_state`` checks what a run actually wrote when it ends:
``answer`` present, and every ragteam key of its type (``OUTPUT_TYPES``).
"""

from __future__ import annotations

import re
import weakref
from typing import Any, Callable, Iterable

from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.pregel import Pregel
from typing_extensions import TypedDict  # not typing's: Studio's input form on Python < 3.12

from ragteam.graphs.results import RoundRecord

RUNTIME_IDS: dict[str, Any] = {"task_id": "0", "round": 1}   # the trace ids a one-pass graph runs under
DEFAULT_STOP_REASON = "answered"   # a graph that says nothing more ran once and answered
DEFAULT_TURNS = 1

_declared: "weakref.WeakKeyDictionary[Pregel, tuple[str, ...]]" = weakref.WeakKeyDictionary()
# graph -> {outputs: its wrapper}: ``arun`` adapts on every call, so a wrapper is built once
_wrappers: "weakref.WeakKeyDictionary[Pregel, dict[tuple[str, ...], Pregel]]" = weakref.WeakKeyDictionary()


class GraphContractError(ValueError):
    """A graph that cannot be run as a ragteam graph; the message names what is missing."""


class ContractState(TypedDict, total=False):
    """The state of the wrapper ``ragteam_graph`` puts around a graph: the contract's keys."""

    question: str
    task_id: str
    round: int
    answer: str
    stop_reason: str
    turns: int


def state_keys(graph: Pregel) -> tuple[set[str], set[str]]:
    """(input keys, output keys) of a compiled graph: its state schemas' fields for a
    ``StateGraph``; a plain ``Pregel`` graph's input and output channels otherwise."""
    builder = getattr(graph, "builder", None)
    if isinstance(builder, StateGraph):
        return set(builder.schemas[builder.input_schema]), set(builder.schemas[builder.output_schema])
    as_set = lambda channels: {channels} if isinstance(channels, str) else set(channels)  # noqa: E731
    return as_set(graph.input_channels), as_set(graph.output_channels)


def _compiled(graph: Any, name: str) -> Pregel:
    if isinstance(graph, StateGraph):
        return graph.compile(name=name)
    if isinstance(graph, Pregel):
        return graph
    raise GraphContractError(f"graph {name!r} is a {type(graph).__name__}, not a LangGraph graph "
                             "(a compiled graph or a StateGraph)")


def check_contract(graph: Pregel, name: str, outputs: Iterable[str] = ()) -> None:
    """Raise ``GraphContractError`` unless ``graph`` takes ``question`` and writes ``answer``
    and every declared output."""
    _check(name, *state_keys(graph), tuple(outputs))


def _check(name: str, inputs: set[str], written: set[str], outputs: tuple[str, ...]) -> None:
    if "question" not in inputs:
        raise GraphContractError(f"graph {name!r} does not take 'question' as input "
                                 f"(its input keys: {', '.join(sorted(inputs)) or 'none'})")
    for key in ("answer", *outputs):
        if key not in written:
            what = "never writes 'answer'" if key == "answer" else f"declares output {key!r} but never writes it"
            raise GraphContractError(f"graph {name!r} {what} (its output keys: "
                                     f"{', '.join(sorted(written)) or 'none'})")


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _round_records(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(record, RoundRecord) for record in value)


# ragteam's keys in a run's final state: what each must be, and its test. ``RunResult``, eval's
# records and summary, and the trainers' rewards read them without asking again.
OUTPUT_TYPES: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "answer": ("str", lambda value: isinstance(value, str)),
    "stop_reason": ("str", lambda value: isinstance(value, str)),
    "turns": ("int >= 0", _count),
    "rounds": ("list of RoundRecord", _round_records),
    "tasks": ("list of dict", lambda value: isinstance(value, list) and all(isinstance(t, dict) for t in value)),
}


def _kind(value: Any) -> str:
    if isinstance(value, list) and value:
        return f"list of {type(value[0]).__name__}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"int {value}"  # a negative count: the value is what is wrong
    return type(value).__name__


def check_final_state(state: dict, name: str) -> None:
    """Raise ``GraphContractError`` unless a finished run's ``state`` holds ``answer`` (an empty
    string is an answer; no key is none) and every ragteam key it holds has its type."""
    if "answer" not in state:
        raise GraphContractError(f"graph {name!r} finished without writing 'answer'")
    for key, (expected, valid) in OUTPUT_TYPES.items():
        if key in state and not valid(state[key]):
            raise GraphContractError(f"graph {name!r} wrote {key!r} as {_kind(state[key])}, "
                                     f"expected {expected}")


def declared_outputs(graph: Pregel) -> tuple[str, ...]:
    """The extra output keys ``ragteam_graph`` recorded for ``graph`` (``()`` for others)."""
    return _declared.get(graph, ())


def ragteam_graph(graph: Any, name: str | None = None, outputs: Iterable[str] = ()) -> Pregel:
    """``graph`` (compiled or a ``StateGraph``) as a graph that keeps the contract.

    ``outputs`` names extra state keys the run should return (``RunResult.outputs``). A graph
    that already writes ``stop_reason`` and ``turns`` is returned as it is; any other is wrapped
    (once per graph and outputs) so ids go in and defaults (``stop_reason="answered"``,
    ``turns=1``) come out.
    """
    name = name or getattr(graph, "name", None) or "graph"
    outputs = tuple(outputs)
    compiled = _compiled(graph, name)
    inputs, written = state_keys(compiled)
    _check(name, inputs, written, outputs)
    if {"stop_reason", "turns"} <= written:
        adapted = compiled
    else:
        cached = _wrappers.setdefault(compiled, {})
        if outputs not in cached:
            cached[outputs] = _wrap(compiled, name, outputs, written)
        adapted = cached[outputs]
    if outputs:  # a later call without outputs (``arun``'s) keeps what was declared
        _declared[adapted] = outputs
    return adapted


class QuestionInput(TypedDict):
    """What a person starting a run in Studio gives: the question (the ids are the runtime's)."""

    question: str


def studio_graph(graph: Any, name: str, outputs: Iterable[str] = ()) -> Pregel:
    """``graph`` as Studio should offer it: the question as its one input and the run context
    (policy, index, budgets…) as a form, like the built-in methods, whatever its own schemas;
    ``outputs`` as ``ragteam_graph``'s."""
    compiled = _compiled(graph, name)
    outputs = tuple(outputs) or declared_outputs(compiled)
    inputs, written = state_keys(compiled)
    _check(name, inputs, written, outputs)
    return _wrap(compiled, name, outputs, written, input_schema=QuestionInput)


def _wrap(graph: Pregel, name: str, outputs: tuple[str, ...], written: set[str],
          input_schema: type | None = None) -> CompiledStateGraph:
    from ragteam.nodes.context import ContextSpec

    state = TypedDict(f"{name}_contract", {**ContractState.__annotations__,  # type: ignore[misc]
                                           **{key: Any for key in outputs}}, total=False)

    def prepare(state: dict) -> dict:
        return {key: state.get(key, value) for key, value in RUNTIME_IDS.items()}

    def finish(state: dict) -> dict:
        return {key: state.get(key, default) for key, default in
                (("stop_reason", DEFAULT_STOP_REASON), ("turns", DEFAULT_TURNS)) if key not in written
                or state.get(key) is None}

    # the user's graph is one node (a subgraph Studio can open), named after the graph
    inner = re.sub(r"\W", "_", name)
    inner = inner if inner not in ("prepare", "finish") else f"{inner}_graph"
    builder = StateGraph(state, context_schema=ContextSpec, input_schema=input_schema)
    builder.add_node("prepare", prepare)
    builder.add_node(inner, graph)
    builder.add_node("finish", finish)
    builder.add_edge(START, "prepare")
    builder.add_edge("prepare", inner)
    builder.add_edge(inner, "finish")
    builder.add_edge("finish", END)
    return builder.compile(name=name)
