"""Single-context search loops as LangGraph graphs: Search-R1 and QAgent.

    act ─<search>─► search ─► act …      act ─<answer>─► END (end-to-end)
     └─invalid─► act (with a retry note)       └──────► generate ─► END (submodule mode)

``act`` continues the rollout until the model closes a search or an answer; ``search`` retrieves
for each query and pastes the passages back inside ``<information>``. ``Settings.max_rounds``
bounds the actions. In QAgent's submodule mode the agent only gathers passages: a separate
generator (the ``AG`` role, usually bound to a frozen policy) answers from all of them.
"""

from __future__ import annotations

from typing import TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime

from graphs.workflow_state import merge_documents
from graphs.run_context import ContextSpec, run_context
from nodes.context import RunContext
from nodes.invoke import call_role
from nodes.retrieval import retrieve
from nodes.roles import AG, Observation, Role
from nodes.search_loop_roles import QAGENT, RETRY, SEARCH_R1, LoopObservation, information_block
from stores.documents import Document

GENERATOR_DOCS = 10  # passages the submodule-mode generator reads (most relevant first)


class LoopState(TypedDict, total=False):
    question: str
    rollout: str
    passages: list[Document]     # every distinct passage retrieved (QAgent's information set K)
    queries: list[str]           # pending queries of the last search action
    round: int                   # actions taken
    last: str                    # "answer" | "search" | "retry"
    answer: str
    stop_reason: str


def make_act(role: Role):
    async def act(state: LoopState, runtime: Runtime[RunContext]) -> dict:
        round_ = state.get("round", 0) + 1
        outcome = await call_role(run_context(runtime), role, LoopObservation(state["question"]),
                                  task_id="0", round_=round_, node_path=f"{role.name}/act",
                                  prefix=state.get("rollout", ""))
        rollout = state.get("rollout", "") + outcome.transition.completion_text
        action = outcome.action
        if "answer" in action:
            return {"rollout": rollout, "round": round_, "last": "answer", "answer": action["answer"],
                    "stop_reason": "answered"}
        if "search" in action:
            return {"rollout": rollout, "round": round_, "last": "search", "queries": action["search"]}
        return {"rollout": rollout + RETRY, "round": round_, "last": "retry"}
    return act


async def search(state: LoopState, runtime: Runtime[RunContext]) -> dict:
    found: list[Document] = []
    for query in state["queries"]:
        found = merge_documents(found, await retrieve(run_context(runtime), query))
    return {"rollout": state["rollout"] + information_block(found),
            "passages": merge_documents(state.get("passages", []), found), "queries": []}


def make_route(answer_exit: str):
    def route(state: LoopState, runtime: Runtime[RunContext]) -> str:
        if state["last"] == "answer":
            return answer_exit
        if state["round"] >= run_context(runtime).settings.max_rounds:
            return "out_of_budget"
        return "search" if state["last"] == "search" else "act"
    return route


def out_of_budget(state: LoopState) -> dict:
    return {"stop_reason": "max_turns", "answer": state.get("answer", "")}


async def generate(state: LoopState, runtime: Runtime[RunContext]) -> dict:
    """Submodule mode: the generator answers from the gathered passages."""
    observation = Observation(query=state["question"],
                              documents=tuple(state.get("passages", [])[:GENERATOR_DOCS]))
    outcome = await call_role(run_context(runtime), AG, observation, task_id="0",
                              round_=state.get("round", 0) + 1, node_path="generator/AG")
    return {"answer": outcome.action, "stop_reason": state.get("stop_reason") or "max_turns"}


def build_search_loop_graph(role: Role, submodule: bool = False, name: str | None = None):
    builder = StateGraph(LoopState, context_schema=ContextSpec)
    builder.add_node("act", make_act(role))
    builder.add_node("search", search)
    builder.add_edge(START, "act")
    builder.add_edge("search", "act")
    if submodule:
        builder.add_node("generate", generate)
        builder.add_node("out_of_budget", lambda state: {})
        builder.add_edge("out_of_budget", "generate")
        builder.add_edge("generate", END)
        answer_exit = "generate"
    else:
        builder.add_node("out_of_budget", out_of_budget)
        builder.add_edge("out_of_budget", END)
        answer_exit = END
    builder.add_conditional_edges("act", make_route(answer_exit), ["search", "act", "out_of_budget", answer_exit])
    return builder.compile(name=name or role.name)


def build_search_r1_graph():
    return build_search_loop_graph(SEARCH_R1, name="search_r1")


def build_qagent_graph(submodule: bool = False):
    return build_search_loop_graph(QAGENT, submodule, name="qagent_submodule" if submodule else "qagent")
