"""The graph contract at run time, and runs that fail (a newcomer's report): a graph whose state
extends ``WorkflowState`` and never writes ``answer``, ragteam's keys written with the wrong type,
a node or a role's parser that raises, and ``rt.run`` given a ``Method``. Scripted policy only."""

import asyncio
import json

import pytest

import ragteam as rt
from ragteam.graphs.apps.cli import main
from ragteam.graphs.eval.evaluate import evaluate_graph, read_failures
from ragteam.nodes.policies.protocol import EngineError
from ragteam.stores.datasets import QAExample
from tests.test_own_graphs import QUESTION, TUTORIAL, _write, scripted_ctx

NEWCOMER = """
    \"\"\"A newcomer's graphs: each keeps the contract on paper and breaks it, or raises, at run time.\"\"\"
    from langgraph.graph import END, START, StateGraph

    import ragteam as rt
    from ragteam.nodes.policies.protocol import EngineError


    class State(rt.WorkflowState, total=False):  # as help(rt.WorkflowState) recommends
        note: str


    class Counted(State, total=False):  # writes the contract's keys itself: never wrapped
        turns: int
        stop_reason: str


    CT = rt.Role(name="CT", instruction="How many documents?", render=str,
                 parse=lambda text, observation: rt.Parsed(int(text)), plumbing="many")
    SH = rt.Role(name="SH", instruction="Shout.", render=lambda observation: observation["missing"],
                 parse=lambda text, observation: rt.Parsed(text), plumbing="ok")


    def chain(name, *nodes, state=State):
        builder = StateGraph(state)
        previous = START
        for node, action in nodes:
            builder.add_node(node, action)
            builder.add_edge(previous, node)
            previous = node
        builder.add_edge(previous, END)
        return builder.compile(name=name)


    def dead_engine(state):
        raise EngineError("the engine died")


    RA, AG = ("RA", rt.retriever("RA")), ("AG", rt.answer_generator("AG"))
    no_answer = chain("no_answer", RA, ("note", lambda s: {"note": "read them"}))
    empty_answer = chain("empty_answer", RA, ("give_up", lambda s: {"answer": ""}))
    node_raises = chain("node_raises", RA, AG, ("rank", lambda s: {"note": s["docs"]}))
    parser_raises = chain("parser_raises", RA, AG,
                          ("count", rt.role_node(CT, lambda s: s["answer"], lambda n, s: {"note": str(n)})))
    render_raises = chain("render_raises", RA, ("shout", rt.role_node(SH, dict, lambda t, s: {"answer": t})))
    backend_dies = chain("backend_dies", RA, ("dead", dead_engine))
    turns_list = chain("turns_list", ("w", lambda s: {"answer": "x", "turns": [1, 2], "stop_reason": "done"}),
                       state=Counted)
    stop_int = chain("stop_int", ("w", lambda s: {"answer": "x", "turns": 1, "stop_reason": 3}), state=Counted)
    turns_bool = chain("turns_bool", ("w", lambda s: {"answer": "x", "turns": True, "stop_reason": "done"}),
                       state=Counted)
    turns_negative = chain("turns_negative", ("w", lambda s: {"answer": "x", "turns": -1, "stop_reason": "done"}),
                           state=Counted)
    answer_none = chain("answer_none", ("w", lambda s: {"answer": None}))

    edge_builder = StateGraph(State)  # a conditional edge whose function returns a mistyped key
    edge_builder.add_node("grade", lambda s: {"note": "graded"})
    edge_builder.add_node("QR", lambda s: {"answer": "x"})
    edge_builder.add_edge(START, "grade")
    edge_builder.add_conditional_edges("grade", lambda s: "Qr", {"QR": "QR", "done": END})
    edge_builder.add_edge("QR", END)
    edge_typo = edge_builder.compile(name="edge_typo")
"""


@pytest.fixture(scope="module")
def newcomer(tmp_path_factory):
    """``name`` -> the reference ``FILE.py:name`` of one of the newcomer's graphs."""
    path = _write(tmp_path_factory.mktemp("newcomer") / "newcomer_graphs.py", NEWCOMER)
    return lambda name: f"{path}:{name}"


def run_of(reference: str) -> rt.RunResult:
    return rt.run(rt.get_method(reference).graph(), QUESTION, scripted_ctx())


# -- 1. a graph that never writes 'answer' ---------------------------------------------------------
def test_a_run_that_never_writes_answer_fails_though_its_schema_declares_it(newcomer):
    with pytest.raises(rt.RunFailed, match="^graph 'no_answer' finished without writing 'answer'$") as failed:
        run_of(newcomer("no_answer"))
    assert isinstance(failed.value.error, rt.GraphContractError) and failed.value.node is None
    assert run_of(newcomer("empty_answer")).answer == ""  # an empty answer the graph wrote is an answer


# -- 2. ragteam's keys keep their types ------------------------------------------------------------
@pytest.mark.parametrize("name,message", [
    ("turns_list", "wrote 'turns' as list of int, expected int >= 0"),
    ("turns_bool", "wrote 'turns' as bool, expected int >= 0"),
    ("turns_negative", "wrote 'turns' as int -1, expected int >= 0"),
    ("stop_int", "wrote 'stop_reason' as int 3, expected str"),
    ("answer_none", "wrote 'answer' as NoneType, expected str"),
])
def test_a_run_that_writes_a_ragteam_key_of_the_wrong_type_fails_naming_it(newcomer, name, message):
    with pytest.raises(rt.RunFailed) as failed:
        run_of(newcomer(name))
    assert str(failed.value) == f"graph {name!r} {message}"


def test_eval_records_contract_breaks_as_failures_and_still_writes_its_summary(newcomer, tmp_path, capsys):
    graphs = ",".join(newcomer(name) for name in ("no_answer", "turns_list", "stop_int"))
    assert main(["eval", "--graph", f"vanilla_rag,{graphs}", "--policy", "scripted", "--limit", "2",
                 "--out", str(tmp_path)]) == 1
    assert "| vanilla_rag |" in (tmp_path / "summary.md").read_text()
    err = capsys.readouterr().err
    assert "no_answer: 2 question(s) failed" in err and "turns_list: 2 question(s) failed" in err
    for name, error in (("no_answer", "finished without writing 'answer'"),
                        ("turns_list", "wrote 'turns' as list of int, expected int >= 0"),
                        ("stop_int", "wrote 'stop_reason' as int 3, expected str")):
        assert [(f["error"], f["node"]) for f in read_failures(tmp_path, name)] == \
            [(f"GraphContractError: graph {name!r} {error}", None)] * 2
    assert not read_failures(tmp_path, "vanilla_rag")


# -- 3. a failing run says where ---------------------------------------------------------------------
@pytest.mark.parametrize("name,node,role,error", [
    ("node_raises", "rank", None, KeyError),
    ("parser_raises", "count", "CT", ValueError),
    ("render_raises", "shout", "SH", KeyError),
])
def test_a_failed_run_names_its_node_and_role_and_keeps_the_trace_so_far(newcomer, name, node, role, error):
    with pytest.raises(rt.RunFailed) as caught:
        run_of(newcomer(name))
    failed = caught.value
    assert (failed.graph, failed.node, failed.role, type(failed.error)) == (name, node, role, error)
    assert failed.__cause__ is failed.error and failed.traceback.startswith("Traceback (most recent call last)")
    assert f"During task with name {node!r}" in failed.traceback
    assert [t.role for t in failed.transitions] == ([] if name == "render_raises" else ["AG"])


def test_ragteam_run_prints_one_line_writes_the_trace_so_far_and_exits_1(newcomer, tmp_path, capsys):
    cases = {"node_raises": "node 'rank' raised KeyError: 'docs'",
             "parser_raises": "node 'count' (role 'CT', its parser) raised ValueError: invalid literal for "
                              "int() with base 10: 'many'",
             "render_raises": "node 'shout' (role 'SH', its prompt renderer) raised KeyError: 'missing'",
             "edge_typo": "node 'grade': its conditional edge returned 'Qr', which is not one of its targets "
                          "('QR', 'done'); return one of those (or add 'Qr' to the edge's path map)",
             "no_answer": "graph 'no_answer' finished without writing 'answer'"}
    for name, line in cases.items():
        trace = tmp_path / f"{name}.jsonl"
        assert main(["run", "--graph", newcomer(name), "--policy", "scripted", "--trace-out", str(trace),
                     QUESTION]) == 1, name
        assert capsys.readouterr().err == f"ragteam run: {line}\n"
        assert [json.loads(row)["role"] for row in trace.read_text().splitlines()] == \
            (["AG"] if name in ("node_raises", "parser_raises") else [])
    assert main(["run", "--graph", "vanilla_rag", "--policy", "nope", QUESTION]) == 2  # still bad usage


def test_eval_failures_name_the_node_the_role_and_keep_the_traceback(newcomer, tmp_path):
    graphs = ",".join(newcomer(name) for name in ("node_raises", "parser_raises"))
    assert main(["eval", "--graph", graphs, "--policy", "scripted", "--limit", "1", "--out", str(tmp_path)]) == 1
    [rank] = read_failures(tmp_path, "node_raises")
    [count] = read_failures(tmp_path, "parser_raises")
    assert set(rank) == {"id", "error", "node", "role", "traceback"}
    assert (rank["error"], rank["node"], rank["role"]) == ("KeyError: 'docs'", "rank", None)
    assert (count["node"], count["role"]) == ("count", "CT")
    assert count["error"].startswith("ValueError: invalid literal for int()")
    assert "Traceback (most recent call last)" in count["traceback"] and "In role 'CT'" in count["traceback"]


def test_a_dead_backend_is_no_run_failure_it_stops_the_eval(newcomer, tmp_path):
    graph = rt.get_method(newcomer("backend_dies")).graph()
    with pytest.raises(EngineError):
        rt.run(graph, QUESTION, scripted_ctx())
    with pytest.raises(EngineError):
        asyncio.run(evaluate_graph("backend_dies", graph, [QAExample("1", QUESTION, ("x",))], scripted_ctx(),
                                   tmp_path, progress=False))
    assert not read_failures(tmp_path, "backend_dies")


# -- 4. rt.run takes what every CLI command takes ----------------------------------------------------
def test_run_takes_a_method_a_name_or_a_reference():
    method = rt.get_method(TUTORIAL)
    for graph in (method, TUTORIAL):
        result = rt.run(graph, QUESTION, scripted_ctx())
        assert (result.stop_reason, result.outputs) == ("verified", {"verdict": "yes"})  # its declared outputs
    assert rt.run("vanilla_rag", QUESTION, scripted_ctx()).answer
    [many] = asyncio.run(rt.arun_many(rt.get_method("vanilla_rag"), [QUESTION], scripted_ctx()))
    assert many.answer
    with pytest.raises(ValueError, match="unknown graph 'no_such_method'"):
        rt.run("no_such_method", QUESTION, scripted_ctx())
