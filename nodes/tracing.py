"""Transition records: every policy call made inside a graph run, as the trainer will consume it.

A ``Tracer`` belongs to one run (one question) and travels in the run's LangGraph context, so
concurrent runs never share mutable state and tracing needs no global hooks.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable

from ragteam.stores.jsonl import append_text, dumps_line, read_lines, write_records


@dataclass
class Transition:
    run_id: str
    # The method's outer-loop iteration the call belongs to: the JADE round t (its final AS
    # synthesis gets the round after the last), the M-ASK search turn, the APEX sub-question,
    # the search-loop action. The trainer orders a run's calls by (turn, step).
    turn: int
    step: int            # k: order of this call within its turn
    role: str
    node_path: str       # where in the graph: "<task id>/<workflow node>"
    task_id: str         # the task (JADE task-tree node, sub-question) the call worked on
    observation: str     # the user-visible observation text given to the role
    prompt_text: str
    completion_text: str
    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]
    action: Any          # the parsed action (JSON-serializable)
    format_ok: bool
    violation: str       # why the output was rejected ("" when format_ok)
    policy: str
    trained: bool        # the call enters training: exact ids, and its role is not frozen
    prompt_tokens: int
    completion_tokens: int
    latency_s: float
    temperature: float = 0.0  # sampling temperature of the call (0 = greedy); log-probs use it
    # the reply was written for the role, not sampled (``call_role(reply=…)``): no behaviour
    # log-probs; the learner takes the policy's own before its update
    written: bool = False
    # the per-role LoRA adapter that played the call ("" = the base weights, or a policy without
    # per-role adapters; traces from before adapters load with "")
    adapter: str = ""
    # the version of the weights the call was sampled under: the learner's optimizer steps when
    # they reached the policy (0: the initial weights, or a policy training never updates)
    weight_version: int = 0

    def to_json(self) -> str:
        return dumps_line(asdict(self))


@dataclass
class Tracer:
    """Everything one run did that costs something: its LLM calls and its retrievals."""

    run_id: str
    transitions: list[Transition] = field(default_factory=list)
    retrievals: int = 0
    sink: str | Path | None = None   # a JSON-lines file that receives each transition as recorded
    _steps: dict[int, int] = field(default_factory=dict)

    def next_step(self, turn: int) -> int:
        step = self._steps.get(turn, 0)
        self._steps[turn] = step + 1
        return step

    def record(self, transition: Transition) -> None:
        self.transitions.append(transition)
        if self.sink:
            # a plain append: no tail check, whose stat/read the Studio server flags as blocking
            append_text(self.sink, transition.to_json() + "\n")  # never through a link swapped in


def run_costs(tracer: Tracer) -> dict[str, float]:
    return {**llm_costs(tracer.transitions), "retrieval_calls": tracer.retrievals}


def llm_costs(transitions: Iterable[Transition]) -> dict[str, float]:
    """The LLM cost counters of a set of calls; the tracer is their single source of truth."""
    costs = {"llm_calls": 0, "prompt_tokens": 0, "completion_tokens": 0, "format_violations": 0}
    for t in transitions:
        costs["llm_calls"] += 1
        costs["prompt_tokens"] += t.prompt_tokens
        costs["completion_tokens"] += t.completion_tokens
        costs["format_violations"] += 0 if t.format_ok else 1
    return costs


def write_jsonl(transitions: Iterable[Transition], path: str | Path) -> None:
    """Write transitions to ``path``, one JSON line each, atomically (whole or not at all)."""
    write_records(path, [asdict(t) for t in transitions])


def read_jsonl(path: str | Path) -> list[Transition]:
    """The transitions ``write_jsonl`` wrote (a run's trace)."""
    records = []
    for line_no, record in read_lines(path).records:
        try:
            transition = Transition(**_current(record))
        except TypeError as error:
            raise ValueError(f"{path}:{line_no}: not a transition record ({error})") from None
        problem = _malformed(transition)
        if problem:
            raise ValueError(f"{path}:{line_no}: not a transition record ({problem})")
        records.append(transition)
    return records


def _current(record: dict) -> dict:
    """``record`` under today's field names: traces written before ``trained`` had its name
    called it ``trainable`` (with the same meaning: the call entered training)."""
    if "trainable" in record and "trained" not in record:
        record = dict(record)
        record["trained"] = record.pop("trainable")
    return record


def _malformed(t: Transition) -> str:
    """What is wrong with a read transition's token fields (the trainers index tensors with
    them), or ""."""
    for name in ("prompt_ids", "completion_ids"):
        ids = getattr(t, name)
        if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0
                                                for i in ids):
            return f"{name} must be a list of token ids"
    if not isinstance(t.logprobs, list) or not all(isinstance(x, (int, float)) for x in t.logprobs):
        return "logprobs must be a list of numbers"
    if not isinstance(t.role, str) or not isinstance(t.format_ok, bool):
        return "role must be a string and format_ok a boolean"
    return ""


def render_tree(transitions: list[Transition]) -> str:
    """A terminal view of one run: its turns, then each role call in the order the trainer sees
    them (``#n``: the call's place in the run, by turn and step) with its action. The task a call
    worked on is shown only when the run had several (a decomposition): in a one-task run every
    call would carry the same root id."""
    calls = sorted(transitions, key=lambda t: (t.turn, t.step))
    several_tasks = len({t.task_id for t in calls}) > 1
    number_width = len(str(len(calls)))
    task_width = max((len(str(t.task_id)) for t in calls), default=0)
    lines, turn = [], None
    for n, call in enumerate(calls, 1):
        if call.turn != turn:
            turn = call.turn
            lines.append(f"turn {turn}")
        last = n == len(calls) or calls[n].turn != turn
        branch = "└─" if last else "├─"
        task = f"task {call.task_id:<{task_width}} " if several_tasks else ""
        if call.format_ok:
            shown = _short(call.action)
        else:  # show what the model actually said, not the runtime's fallback
            shown = f"✗ {call.violation} — said: {_short(call.completion_text, 60)}"
        lines.append(f"  {branch} #{n:<{number_width}} {task}{call.role:<8} {shown}")
    return "\n".join(lines)


def _short(action: Any, width: int = 90) -> str:
    text = action if isinstance(action, str) else json.dumps(action, ensure_ascii=False)
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"
