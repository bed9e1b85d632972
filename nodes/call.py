"""One role call: observation -> policy -> parsed action, recorded as a transition.

Every LLM call in every graph goes through ``call_role``, which is what guarantees that the
trace holds all of them with their exact token ids. ``role_node`` turns any role (a user's own
included) into a LangGraph node that makes one such call.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

from langgraph.runtime import Runtime

from ragteam.nodes.choices import choose_reply, menu
from ragteam.nodes.context import RunContext, arun_context
from ragteam.nodes.parsing import Parsed
from ragteam.nodes.policies.protocol import PROMPT_TOO_LONG, written_reply
from ragteam.nodes.roles.base import Role
from ragteam.nodes.tracing import Transition


@dataclass(frozen=True)
class RoleOutcome:
    """A role call's parsed action (the fallback when the reply broke the format) and its
    recorded transition."""

    parsed: Parsed
    transition: Transition

    @property
    def action(self) -> Any:
        """What the runtime acts on."""
        return self.parsed.action


async def call_role(ctx: RunContext, role: Role, observation, *, task_id: str, turn: int,
                    node_path: str, prefix: str = "", reply: str | None = None) -> RoleOutcome:
    """Ask ``ctx``'s policy for ``role`` to act on ``observation``; parse the reply and record the
    call in ``ctx.tracer`` (``task_id``, ``turn`` and ``node_path`` place it in the trace;
    ``prefix`` starts the reply, as in a forced answer). A ``reply`` is written for the role
    instead of sampled (``protocol.written_reply``), and so is the one the run's written replies
    name for it (``Settings.written``): the call is traced and trained like a sampled one, so
    training can make a role try what it would rarely choose. A role given a menu
    (``Settings.planning.choices``) chooses one of its replies (``nodes.choices``) instead of writing."""
    try:
        request = role.request(observation, temperature=ctx.settings.temperature, prefix=prefix,
                               few_shot=ctx.settings.few_shot)
    except Exception as error:
        _blame(error, role, "prompt renderer")
        raise
    if reply is None:
        reply = ctx.settings.written.reply(role.name, task_id, getattr(observation, "query", ""))
    policy = ctx.team.policy_for(role.name)
    version = getattr(policy, "weight_version", 0)  # read before sampling: what the call samples under
    started = time.perf_counter()
    choices = menu(ctx.settings, role.name) if reply is None else None
    if choices:
        generation = await choose_reply(policy, request, choices)
    elif reply is None:
        [generation] = await policy.generate([request])
    else:
        generation = written_reply(policy, request, reply)
    latency = time.perf_counter() - started
    try:
        parsed = role.parse(generation.text, observation)
    except Exception as error:
        _blame(error, role, "parser")
        raise
    if generation.finish_reason == PROMPT_TOO_LONG:  # an event of this call, not a crash of the run
        parsed = Parsed.violation(f"prompt of {len(generation.prompt_ids)} tokens is over the engine's "
                                  "limit; nothing was generated", parsed.action)
    prompt_tokens, completion_tokens = generation.token_counts
    transition = Transition(
        run_id=ctx.tracer.run_id, turn=turn, step=ctx.tracer.next_step(turn), role=role.name,
        node_path=node_path, task_id=task_id, observation=request.messages[-1]["content"],
        prompt_text=generation.prompt_text, completion_text=generation.text,
        prompt_ids=generation.prompt_ids, completion_ids=generation.completion_ids,
        logprobs=generation.logprobs, action=_jsonable(parsed.action), format_ok=parsed.ok,
        violation=parsed.reason, policy=policy.name, trained=ctx.team.trains(role.name),
        prompt_tokens=prompt_tokens, completion_tokens=completion_tokens, latency_s=latency,
        temperature=request.sampling.temperature, written=reply is not None,
        adapter=generation.adapter, weight_version=version)
    ctx.tracer.record(transition)
    return RoleOutcome(parsed, transition)


def _blame(error: Exception, role: Role, part: str) -> None:
    """Mark ``error``, raised by ``part`` of ``role``'s own code (its prompt renderer or its
    parser), with the role's name and the part: a failed run then names both beside the node
    (``graphs.run.RunFailed``)."""
    if not hasattr(error, "ragteam_role"):  # a role called from another's code: the inner one raised
        error.ragteam_role, error.ragteam_part = role.name, part
        error.add_note(f"In role {role.name!r}, its {part}")


def _jsonable(action):
    if action is None or isinstance(action, (str, int, float, bool)):
        return action
    if isinstance(action, (list, tuple)):
        return [_jsonable(a) for a in action]
    if isinstance(action, dict):
        return {str(k): _jsonable(v) for k, v in action.items()}
    return str(action)  # e.g. a Topology: its canonical string


def role_node(role: Role, observe: Callable[[dict], Any], update: Callable[[Any, dict], dict],
              name: str | None = None) -> Callable[[dict, Runtime[RunContext]], Awaitable[dict]]:
    """A LangGraph node that makes one traced call of ``role``: ``observe(state)`` builds the
    observation, and ``update(action, state)`` turns the parsed action into the node's state
    update. The call is placed in the trace by the state's ``task_id`` and ``round`` (the
    runtime's defaults when absent) and the node's ``name`` (default: the role's)."""
    node_name = name or role.name

    async def node(state: dict, runtime: Runtime[RunContext]) -> dict:
        task_id = state.get("task_id", "0")
        outcome = await call_role(await arun_context(runtime), role, observe(state), task_id=task_id,
                                  turn=state.get("round", 1), node_path=f"{task_id}/{node_name}")
        return update(outcome.action, state)
    return node
