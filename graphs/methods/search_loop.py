"""Single-context search loops as LangGraph graphs: Search-R1 and QAgent.

    act ─<search>─► search ─► act …      act ─<answer>─► END (end-to-end)
     └─invalid─► act (with a retry note)       └──────► generate ─► END (submodule mode)
     └─budget spent─► force_answer ─► END      (submodule mode: ─► generate)

``act`` continues the rollout until the model closes a search or an answer; ``search`` retrieves
for each query and pastes the passages back inside ``<information>``. ``Settings.max_rounds``
bounds the actions; when they run out, one more call continues the rollout inside an opened
``<answer>`` tag (Search-R1's usual ending), so the run still ends with its best answer. In
QAgent's submodule mode the agent only gathers passages: a separate generator (the ``AG`` role,
usually bound to a frozen policy) answers from all of them.

Training: Search-R1 and QAgent train their one agent; QAgent's reward (``QAgentReward``) scores
the frozen generator's answer in submodule mode, so the agent learns to gather what it needs.
"""

from __future__ import annotations

from dataclasses import dataclass

from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from typing_extensions import TypedDict

from ragteam.graphs.eval.metrics import contains_gold, score
from ragteam.graphs.methods.registry import Method, register
from ragteam.graphs.methods.rewards import RewardOutcome, last_call
from ragteam.graphs.run import RunResult
from ragteam.nodes.call import call_role
from ragteam.nodes.context import ContextSpec, RunContext, arun_context, run_context
from ragteam.nodes.retrieval import retrieve
from ragteam.nodes.roles.base import Observation, Role
from ragteam.nodes.roles.jade import AG
from ragteam.nodes.roles.search_loop import (FORCE_ANSWER, QAGENT, RETRY, SEARCH_R1, LoopObservation,
                                     forced_answer_role, information_block)
from ragteam.nodes.workflow import merge_documents
from ragteam.stores.datasets import QAExample
from ragteam.stores.documents import Document

GENERATOR_DOCS = 10  # passages the submodule-mode generator reads (most relevant first)


class LoopState(TypedDict, total=False):
    question: str
    rollout: str
    passages: list[Document]     # every distinct passage retrieved (QAgent's information set K)
    queries: list[str]           # pending queries of the last search action
    actions: int                 # actions taken
    turns: int                   # = actions, the run's generic loop count
    last: str                    # "answer" | "search" | "retry"
    answer: str
    stop_reason: str


def make_act(role: Role):
    async def act(state: LoopState, runtime: Runtime[RunContext]) -> dict:
        actions = state.get("actions", 0) + 1
        outcome = await call_role(await arun_context(runtime), role, LoopObservation(state["question"]),
                                  task_id="0", turn=actions, node_path=f"{role.name}/act",
                                  prefix=state.get("rollout", ""))
        rollout = state.get("rollout", "") + outcome.transition.completion_text
        action = outcome.action
        counts = {"actions": actions, "turns": actions}
        if "answer" in action:
            return {"rollout": rollout, **counts, "last": "answer", "answer": action["answer"],
                    "stop_reason": "answered"}
        if "search" in action:
            return {"rollout": rollout, **counts, "last": "search", "queries": action["search"]}
        return {"rollout": rollout + RETRY, **counts, "last": "retry"}
    return act


async def search(state: LoopState, runtime: Runtime[RunContext]) -> dict:
    found: list[Document] = []
    for query in state["queries"]:
        found = merge_documents(found, await retrieve(await arun_context(runtime), query))
    return {"rollout": state["rollout"] + information_block(found),
            "passages": merge_documents(state.get("passages", []), found), "queries": []}


def make_route(answer_exit: str):
    def route(state: LoopState, runtime: Runtime[RunContext]) -> str:
        if state["last"] == "answer":
            return answer_exit
        if state["actions"] >= run_context(runtime).settings.max_rounds:
            return "out_of_budget"
        return "search" if state["last"] == "search" else "act"
    return route


def make_force_answer(role: Role):
    forced = forced_answer_role(role)

    async def force_answer(state: LoopState, runtime: Runtime[RunContext]) -> dict:
        """The action budget is spent: the agent answers from what it gathered."""
        turn = state.get("actions", 0) + 1
        outcome = await call_role(await arun_context(runtime), forced, LoopObservation(state["question"]),
                                  task_id="0", turn=turn, node_path=f"{role.name}/force_answer",
                                  prefix=state.get("rollout", "") + FORCE_ANSWER)
        rollout = state.get("rollout", "") + FORCE_ANSWER + outcome.transition.completion_text
        return {"rollout": rollout, "answer": outcome.action, "stop_reason": "max_turns"}
    return force_answer


async def generate(state: LoopState, runtime: Runtime[RunContext]) -> dict:
    """Submodule mode: the generator answers from the gathered passages."""
    observation = Observation(query=state["question"],
                              documents=tuple(state.get("passages", [])[:GENERATOR_DOCS]))
    outcome = await call_role(await arun_context(runtime), AG, observation, task_id="0",
                              turn=state.get("actions", 0) + 1, node_path="generator/AG")
    return {"answer": outcome.action, "stop_reason": state.get("stop_reason") or "max_turns"}


def build_search_loop_graph(role: Role, submodule: bool = False, name: str | None = None):
    builder = StateGraph(LoopState, context_schema=ContextSpec)
    builder.add_node("act", make_act(role))
    builder.add_node("search", search)
    builder.add_edge(START, "act")
    builder.add_edge("search", "act")
    if submodule:
        builder.add_node("generate", generate)
        builder.add_node("out_of_budget", lambda state: {"stop_reason": "max_turns"})
        builder.add_edge("out_of_budget", "generate")
        builder.add_edge("generate", END)
        answer_exit = "generate"
    else:
        builder.add_node("out_of_budget", make_force_answer(role))
        builder.add_edge("out_of_budget", END)
        answer_exit = END
    builder.add_conditional_edges("act", make_route(answer_exit), ["search", "act", "out_of_budget", answer_exit])
    return builder.compile(name=name or role.name)


def build_search_r1_graph():
    return build_search_loop_graph(SEARCH_R1, name="search_r1")


def build_qagent_graph(submodule: bool = False):
    return build_search_loop_graph(QAGENT, submodule, name="qagent_submodule" if submodule else "qagent")


# -- training --------------------------------------------------------------------------------------
def passages_hit(transitions, golds) -> bool:
    """Whether a gold answer appears in any passage block the agent was shown."""
    seen = " ".join(block for t in transitions for block in information_blocks(t.prompt_text))
    return contains_gold(seen, golds)


def information_blocks(text: str) -> list[str]:
    blocks, start = [], text.find("<information>")
    while start != -1:
        end = text.find("</information>", start)
        if end == -1:
            break
        blocks.append(text[start + len("<information>"): end])
        start = text.find("<information>", end)
    return blocks


@dataclass
class QAgentReward:
    """QAgent Eq. 10 on the agent's last call: EM (non-strict: a gold contained in the answer,
    the generator's in submodule mode) + ``hit_weight``·Hit (a gold inside the passages)."""

    hit_weight: float = 0.5
    agent_role: str = QAGENT.name
    name: str = "qagent"
    train_roles: frozenset[str] | None = frozenset({QAGENT.name})

    def __call__(self, result: RunResult, example: QAExample) -> RewardOutcome:
        scores = score(result.answer, example.golds, example.metric)
        hit = passages_hit(result.transitions, example.golds)
        rewards = [0.0] * len(result.transitions)
        last = last_call(result.transitions, self.agent_role)
        if last is not None:
            rewards[last] = scores["acc"] + self.hit_weight * float(hit)
        return RewardOutcome(rewards, {**scores, "hit": float(hit)})


SEARCH_R1_METHOD = register(Method(
    "search_r1", "a monolithic Search-R1-style reason/search loop in one context",
    build=build_search_r1_graph))
QAGENT_METHOD = register(Method(
    "qagent", "QAgent: plan / multi-query search (≤3) / information / reflection loop",
    build=build_qagent_graph, default_reward="qagent", rewards={"qagent": QAgentReward}))
QAGENT_SUBMODULE = register(Method(
    "qagent_submodule", "QAgent as a submodule: the agent gathers passages, a frozen generator (AG) "
    "answers from them", build=lambda: build_qagent_graph(submodule=True), default_reward="qagent",
    frozen_roles=(AG.name,)))
