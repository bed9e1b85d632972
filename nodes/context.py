"""Everything a graph run needs besides its state, passed as LangGraph's run context.

Python callers pass a ``RunContext``. Runs started from LangGraph Studio or the LangGraph API
pass JSON, e.g. ``{"policy": "scripted", "index": "indexes/wiki", "max_rounds": 4}``; LangGraph
turns it into a ``ContextSpec`` once per run (the graphs declare it as their context schema), and
``run_context`` builds that run's one ``RunContext`` from it on first use and keeps it on the
spec, so every node of the run shares one tracer. Async nodes await ``arun_context``, which does
that first build (a model, an index, the trace file) in a worker thread: the Studio server
refuses blocking I/O on its event loop.
"""

from __future__ import annotations

import asyncio
import os
import threading
import uuid
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path

from langgraph.runtime import Runtime

from ragteam.nodes.planning import Planning
from ragteam.nodes.serial_chains import SerialChains
from ragteam.nodes.team import Team
from ragteam.nodes.tracing import Tracer
from ragteam.nodes.written import WrittenReplies
from ragteam.stores.retriever import Retriever


@dataclass(frozen=True)
class Settings:
    """Budgets and knobs of a run (JADE defaults where the paper gives them)."""

    top_k: int = 5                 # documents per retrieval
    max_rounds: int = 6            # outer-loop budget: JADE rounds, M-ASK turns, search-loop actions
    max_depth: int = 1             # how deep sub-questions may themselves be decomposed (root = 0)
    max_subquestions: int = 4      # per decomposition (the JADE prompts' limit)
    temperature: float = 0.0       # 0 = greedy; > 0 samples (training rollouts)
    few_shot: bool = True          # send each role's demonstration turns (off: instructions only)
    # replies written for a role instead of sampled: a fixed workflow, training's workflow
    # groups, given decompositions (nodes.written); a JSON object is read as one
    written: WrittenReplies = field(default_factory=WrittenReplies)
    # JADE's serial chains: retrieval fan-out over listed names, the decomposer's example length
    # (nodes.serial_chains); a JSON object is read as one
    serial: SerialChains = field(default_factory=SerialChains)
    # a planner's fallback workflow and its menu of workflows (nodes.planning); a JSON object is
    # read as one
    planning: Planning = field(default_factory=Planning)

    def __post_init__(self) -> None:
        """Checked where settings are made (command line, Studio context, Python), so a bad value
        is one clear ``ValueError`` rather than a failure deep inside a run."""
        for name, low in (("top_k", 1), ("max_rounds", 1), ("max_depth", 0), ("max_subquestions", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{name} must be an integer ≥ {low}, got {value!r}"[:200])
        t = self.temperature
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not 0 <= t < float("inf"):
            raise ValueError(f"temperature must be a finite number ≥ 0, got {t!r}"[:200])
        if not isinstance(self.few_shot, bool):
            raise ValueError(f"few_shot must be true or false, got {self.few_shot!r}"[:200])
        # Studio and config files hand the nested options as JSON objects
        for name, option in _NESTED.items():
            object.__setattr__(self, name, option.of(getattr(self, name)))

    def updated(self, **changes) -> "Settings":
        """These settings with ``changes``. A nested option given as a mapping changes only the
        keys it names: ``updated(serial={"fan_out": 5})`` keeps ``serial.example_steps``."""
        for name, value in changes.items():
            if name in _NESTED and isinstance(value, Mapping):
                changes[name] = _NESTED[name].of({**asdict(getattr(self, name)), **value})
        return replace(self, **changes)


_NESTED = {"written": WrittenReplies, "serial": SerialChains, "planning": Planning}
# where the settings of earlier versions went (named in the error for the old spelling)
MOVED_SETTINGS = {"fixed_workflow": "written=WrittenReplies.fixed(WORKFLOW, planning.fallback)",
                  "forced_workflow": "written={'plan': WORKFLOW}",
                  "subquestion_workflow": "written={'subplans': WORKFLOW}",
                  "given_decompositions": "written={'decompositions': FILE}",
                  "fan_out": "serial={'fan_out': N}", "decomposer_example_steps": "serial={'example_steps': N}",
                  "engine": "make_context's sampler= (hf | vllm)",
                  "fallback_workflow": "planning={'fallback': WORKFLOW}",
                  "plan_choices": "planning={'choices': [WORKFLOW, ...]}"}


@dataclass
class RunContext:
    """What a run's nodes share besides the state: who plays each role (``team``), where
    documents come from (``retriever``), budgets and knobs (``settings``), and the run's tracer."""

    team: Team
    retriever: Retriever | None
    settings: Settings = field(default_factory=Settings)
    tracer: Tracer = field(default_factory=lambda: Tracer(run_id=uuid.uuid4().hex[:12]))

    def for_new_run(self, run_id: str | None = None) -> "RunContext":
        """Same team, retriever and settings; a fresh tracer (one per question)."""
        return replace(self, tracer=Tracer(run_id=run_id or uuid.uuid4().hex[:12]))


@dataclass(frozen=True)
class ContextSpec(Settings):
    """The JSON context of a Studio/API run: every ``Settings`` field, plus where the policy and
    the index come from and, optionally, a JSON-lines file that receives the run's transitions.

    The Studio server is for trusted local use: ``policy`` and ``index`` name local paths that
    the server process opens. ``ragteam``'s Studio instructions keep it on 127.0.0.1. A run's
    ``trace_out`` is a file name inside the server's trace folder (``traces_root``), never a path
    elsewhere, unless the server was started with ``RAGTEAM_TRACE_ANYWHERE=1``."""

    policy: str | None = None      # offline | scripted | hf:PATH (default: $RAGTEAM_POLICY or offline)
    index: str | None = None       # a built index directory (default: the bundled demo store)
    trace_out: str | None = None   # append each transition to this file, as it is recorded

    def run_context(self) -> RunContext:
        # Cached on the instance, not a field: the spec stays plain JSON-schema data for Studio.
        if getattr(self, "_run", None) is None:
            team, retriever = self.shared_parts()
            # LangGraph runs sync nodes and routers in worker threads: two first nodes of parallel
            # branches may get here at once, and the run must still get one tracer
            with _RUN_LOCK:
                if getattr(self, "_run", None) is None:
                    settings = Settings(**{f.name: getattr(self, f.name) for f in fields(Settings)})
                    sink = trace_file(self.trace_out) if self.trace_out else None
                    object.__setattr__(self, "_run", RunContext(
                        team, retriever, settings, Tracer(run_id=uuid.uuid4().hex[:12], sink=sink)))
        return self._run

    def shared_parts(self) -> tuple[Team, Retriever]:
        """The team and retriever this spec names, loaded on first use and shared by every run
        that names the same (the Studio server loads the default ones when it starts)."""
        return _shared_parts(self.policy or os.environ.get("RAGTEAM_POLICY", "offline"), self.index)


_RUN_LOCK = threading.Lock()
TRACES_ENV, ANYWHERE_ENV = "RAGTEAM_TRACE_DIR", "RAGTEAM_TRACE_ANYWHERE"


def traces_root() -> Path:
    """The folder a JSON context's ``trace_out`` names files in: ``$RAGTEAM_TRACE_DIR``, else
    ``traces/`` under the server's working folder."""
    return Path(os.environ.get(TRACES_ENV) or "traces")


def trace_file(name: str) -> Path:
    """Where a JSON context's ``trace_out`` appends. A context comes from whoever can reach the
    server, so it names a file inside ``traces_root()`` (a folder ragteam owns), never a path
    that leaves it; ``RAGTEAM_TRACE_ANYWHERE=1`` at server start allows any path. Never through
    a symlink."""
    from ragteam.stores.folder_lock import LOCK_FILE
    from ragteam.stores.owned import MARKER, STUDIO_TRACES, claim, own_file, own_subdir, within

    if os.environ.get(ANYWHERE_ENV) == "1":
        return own_file(name)
    relative = Path(name)
    if relative.is_absolute() or ".." in relative.parts:
        raise ValueError(f"trace_out {name!r}: give a file name inside the server's trace folder "
                         f"({traces_root()}), not a path (start the server with {ANYWHERE_ENV}=1 "
                         "to allow any path)")
    if relative.name in (MARKER, LOCK_FILE):  # the folder's own marker or lock: appending breaks every later run
        raise ValueError(f"trace_out {name!r}: that name is the trace folder's own; choose another file name")
    root = claim(traces_root(), STUDIO_TRACES, TRACES_ENV)
    path = within(root, relative)
    own_subdir(path.parent)
    return own_file(path)


def make_context(policy: str = "offline", index: str | None = None, sampler: str = "hf",
                 **settings) -> RunContext:
    """A run context from the specs users write on the command line: ``policy`` (offline |
    scripted | hf:PATH | vllm:PATH | vllm-server:URL, see ``nodes.policies.spec``), ``index`` (a
    built index directory; None = the bundled BM25 demo store), ``sampler`` (hf | vllm) and any
    ``Settings`` field (``top_k=3``, ``max_rounds=4``…)."""
    from ragteam.nodes.policies.spec import load_policy
    from ragteam.stores.index import open_retriever

    unknown = set(settings) - {f.name for f in fields(Settings)}
    if unknown:
        moved = [f"{name} is now {MOVED_SETTINGS[name]}" for name in sorted(unknown) if name in MOVED_SETTINGS]
        raise ValueError(f"unknown setting(s) {', '.join(sorted(unknown))}; known: "
                         f"{', '.join(f.name for f in fields(Settings))}" + "".join(f"; {m}" for m in moved))
    return RunContext(Team(load_policy(policy, sampler)), open_retriever(index), Settings(**settings))


def run_context(runtime: Runtime) -> RunContext:
    """The run context a node runs in, whichever way the run was started (Python, Studio JSON,
    or a bare invoke with none). The run's first call may load a model or an index: an async
    node awaits ``arun_context`` instead, so that loading stays off the event loop."""
    context = runtime.context
    return context if isinstance(context, RunContext) else _spec(context).run_context()


async def arun_context(runtime: Runtime) -> RunContext:
    """``run_context`` for async nodes: the run's first call builds its context in a worker
    thread (the Studio server raises ``BlockingError`` on file I/O in its event loop), and nodes
    that start together, e.g. parallel branches, await that one build: one tracer a run."""
    context = runtime.context
    if isinstance(context, RunContext):
        return context
    spec = _spec(context)
    if getattr(spec, "_run", None) is None:
        building = getattr(spec, "_building", None)
        if building is None:
            building = asyncio.ensure_future(asyncio.to_thread(spec.run_context))
            object.__setattr__(spec, "_building", building)
        # shielded: one node cancelled (its branch ended) must not cancel the others' build
        await asyncio.shield(building)
    return spec.run_context()


def _spec(context) -> ContextSpec:
    """The spec of a run's context. No context at all (a bare ``graph.invoke``) gives defaults,
    whose calls are not collected. A plain dict (Studio's JSON context for a graph that declares
    no context schema) is the same object for every node of one run: its spec is kept with it,
    so the run has one tracer and one trace, not one per node."""
    if isinstance(context, ContextSpec):
        return context
    if not isinstance(context, dict):
        return ContextSpec(**(context or {}))
    with _RUN_LOCK:
        held = _DICT_SPECS.pop(id(context), None)
        if held is None or held[0] is not context:
            held = (context, ContextSpec(**context))
        _DICT_SPECS[id(context)] = held  # most recent last; the dict is held so its id stays its own
        while len(_DICT_SPECS) > _MAX_DICT_SPECS:
            _DICT_SPECS.pop(next(iter(_DICT_SPECS)))
    return held[1]


_DICT_SPECS: dict[int, tuple[dict, ContextSpec]] = {}
_MAX_DICT_SPECS = 1024  # runs in flight at once on one server, with room to spare


_PARTS: dict[tuple[str, str | None], tuple[Team, Retriever]] = {}
_PARTS_LOCK = threading.Lock()
_MAX_PARTS = 8


def _shared_parts(policy: str, index: str | None):
    """Team and retriever are expensive (a model, an index) and stateless across runs: one per
    (policy, index) for the server's lifetime (the 8 latest). Loaded once even when runs (or the
    Studio server's warm-up) ask at the same time; a loaded pair is returned without the lock."""
    key = (policy, index)
    parts = _PARTS.get(key)
    if parts is None:
        with _PARTS_LOCK:
            parts = _PARTS.get(key)
            if parts is None:
                from ragteam.nodes.policies.spec import load_policy
                from ragteam.stores.index import open_retriever

                parts = Team(load_policy(policy)), open_retriever(index)
                if len(_PARTS) >= _MAX_PARTS:
                    _PARTS.pop(next(iter(_PARTS)))
                _PARTS[key] = parts
    return parts
