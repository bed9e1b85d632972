import asyncio
import threading

from ragteam.graphs.compiler import compile_topology
from ragteam.nodes.topology import parse_topology
from ragteam.stores.documents import Document

QUESTION = "Who portrayed Corliss Archer in the film Kiss and Tell?"
RULES = {"QR": "<query>Corliss Archer actress</query>", "DS": "<id>1, 0</id>",
         "AG": "<answer>Shirley Temple</answer>"}


def run_workflow(text, ctx, question=QUESTION):
    graph = compile_topology(parse_topology(text))
    inputs = {"task_id": "0", "round": 1, "question": question}
    return asyncio.run(graph.ainvoke(inputs, context=ctx))


def test_roles_run_in_topology_order(make_ctx):
    ctx = make_ctx(RULES)
    result = run_workflow("QR,RA,DS,AG", ctx)
    assert result["executed"] == ["QR", "RA", "DS", "AG"]
    assert [t.role for t in ctx.tracer.transitions] == ["QR", "DS", "AG"]
    assert result["query"] == "Corliss Archer actress"
    assert [d.id for d in result["selected"]] == [result["documents"][1].id, result["documents"][0].id]
    assert result["answer"] == "Shirley Temple"


def test_rewritten_query_drives_retrieval(make_ctx):
    seen = []

    class Recorder:
        def search(self, query, k=5):
            seen.append(query)
            return [Document(id="d", title="T", text="x")]

    run_workflow("QR,RA,AG", make_ctx(RULES, retriever=Recorder()))
    assert seen == ["Corliss Archer actress"]


class BarrierRetriever:
    """Both branches must be inside search() at the same time, or the barrier times out."""

    def __init__(self, parties):
        self.barrier = threading.Barrier(parties, timeout=10)
        self.queries = []

    def search(self, query, k=5):
        self.barrier.wait()
        self.queries.append(query)
        return [Document(id=f"{query}-{i}", title=query, text="t") for i in range(2)]


def test_parallel_group_runs_branches_concurrently_and_joins_documents(make_ctx):
    retriever = BarrierRetriever(parties=2)
    ctx = make_ctx(RULES, retriever=retriever)
    result = run_workflow("[RA|QR,RA],DS,AG", ctx)
    assert sorted(retriever.queries) == sorted([QUESTION, "Corliss Archer actress"])
    assert len(result["documents"]) == 4  # both branches' documents, merged
    assert result["executed"][-2:] == ["DS", "AG"]  # the join runs once, after both branches
    assert [name for name in result["executed"] if name.endswith("RA")] == [
        "group0_branch0/RA", "group0_branch1/RA"]
    assert {t.node_path for t in ctx.tracer.transitions} == {"0/group0_branch1/QR", "0/DS", "0/AG"}


def test_join_deduplicates_documents_by_id(make_ctx):
    class Same:
        def search(self, query, k=5):
            return [Document(id="same", title="T", text="x")]

    result = run_workflow("[RA|QR,RA],AG", make_ctx(RULES, retriever=Same()))
    assert [d.id for d in result["documents"]] == ["same"]


def test_answer_only_workflow_needs_no_retriever(make_ctx):
    ctx = make_ctx(RULES)
    ctx.retriever = None
    assert run_workflow("AG", ctx)["answer"] == "Shirley Temple"


def test_compiled_graphs_are_cached_by_normalized_topology():
    first = compile_topology(parse_topology("qr -> ra -> ag"))
    hits = compile_topology.cache_info().hits
    second = compile_topology(parse_topology("QR,R,AG"))
    assert first is second
    assert compile_topology.cache_info().hits == hits + 1
