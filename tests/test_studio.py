"""`langgraph dev` (LangGraph Studio's local API server) serves every method graph, and a user's
own graph beside them through the config `ragteam studio` writes — started exactly as docs/studio.md
says, so its runs meet the server's blocking-I/O checks on the real offline model."""

import asyncio
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from ragteam.graphs.methods import methods
from ragteam.nodes.context import ContextSpec, make_context
from tests.conftest import free_port, wait_until_up
from ragteam.nodes.tracing import read_jsonl

ROOT = Path(__file__).resolve().parents[1]
TUTORIAL = "examples/verified_rag.py:graph"   # $G in docs/studio.md
GUIDE = ROOT / "docs" / "studio.md"


def _request(url, body=None, timeout=300):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"content-type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read())


def _tool(name: str) -> str:
    path = shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not installed (langgraph-cli is part of the test extra)")
    return path


def guide_studio_commands() -> list[list[str]]:
    """The Studio line for the tutorial in docs/studio.md (``ragteam studio $G && langgraph dev …``)
    as the two commands the server fixture runs, so the test runs what the guide says."""
    line = next(line for line in GUIDE.read_text(encoding="utf-8").splitlines()
                if "ragteam studio $G &&" in line)
    commands = [shlex.split(part) for part in line.split("#")[0].split("&&")]
    return [[_tool(Path(c[0]).name), *(TUTORIAL if a == "$G" else a for a in c[1:])] for c in commands]


def test_the_studio_guide_serves_your_graph_with_the_config_ragteam_studio_writes():
    write, serve = guide_studio_commands()
    assert write[1:] == ["studio", TUTORIAL]
    assert serve[1:] == ["dev", "--config", "langgraph.ragteam.json", "--host", "127.0.0.1"]


class Studio:
    """A running server: its URL, the user's folder it serves from, and its log."""

    def __init__(self, url: str, folder: Path, log: Path):
        self.url, self.folder, self.log = url, folder, log

    def run(self, graph: str, question: str, context: dict | None = None) -> dict:
        body = {"assistant_id": graph, "input": {"question": question}}
        if context is not None:
            body["context"] = context
        state = _request(f"{self.url}/runs/wait", body)
        assert "__error__" not in state, (state, self.log_tail())
        return state

    def log_text(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")

    def log_tail(self) -> str:
        return self.log_text()[-4000:]

    def assert_no_blocking_call(self) -> None:
        assert "BlockingError" not in self.log_text(), self.log_tail()


@pytest.fixture(scope="module")
def studio(tmp_path_factory):
    """One server for the module, started the way docs/studio.md documents it, from a user's own
    folder holding the tutorial: ``ragteam studio $G && langgraph dev --config
    langgraph.ragteam.json --host 127.0.0.1`` (plus a free ``--port`` and ``--no-browser``).
    No ``--no-reload``, no ``--allow-blocking``, no policy in the environment: the offline
    model is the default, under the server's blocking-call checks."""
    folder = tmp_path_factory.mktemp("my_project")
    (folder / "examples").mkdir()
    shutil.copy(ROOT / "examples" / "verified_rag.py", folder / "examples" / "verified_rag.py")
    log = tmp_path_factory.mktemp("studio_log") / "server.log"   # outside the folder it watches
    env = {k: v for k, v in os.environ.items()
           if k not in ("RAGTEAM_POLICY", "RAGTEAM_GRAPHS", "LANGGRAPH_ALLOW_BLOCKING")}
    write, serve = guide_studio_commands()
    subprocess.run(write, cwd=folder, env=env, check=True, capture_output=True, timeout=120)
    port = free_port()
    with open(log, "w") as out:
        # its own process group: the reloading server runs its app in a child process
        process = subprocess.Popen([*serve, "--port", str(port), "--no-browser"], cwd=folder, env=env,
                                   stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_up(f"{url}/ok", process, 180, "langgraph dev")
        yield Studio(url, folder, log)
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)


def test_studio_server_lists_every_method_graph_and_yours(studio):
    assistants = _request(f"{studio.url}/assistants/search", {"limit": 50})
    assert {a["graph_id"] for a in assistants} == {*methods(), "verified_rag"}


@pytest.mark.slow
def test_studio_runs_a_built_in_graph_on_the_offline_model_by_default(studio):
    state = studio.run("jade", "Who is Ed Wood?")   # no context: the defaults
    assert state["answer"].strip() and state["stop_reason"]
    studio.assert_no_blocking_call()


@pytest.mark.slow
def test_studio_runs_your_graph_on_the_offline_model_with_a_trace(studio):
    state = studio.run("verified_rag", "Who is Ed Wood?", {"policy": "offline", "trace_out": "offline.jsonl"})
    assert state["answer"].strip() and state["verdict"] in ("yes", "no")
    calls = read_jsonl(studio.folder / "traces" / "offline.jsonl")   # the server's trace folder
    assert [c.role for c in calls][:3] == ["DS", "AG", "VF"]
    assert {c.policy for c in calls} == {"smollm2-135m-instruct"}
    studio.assert_no_blocking_call()


def test_studio_shows_an_input_form_for_every_graph(studio):
    for assistant in _request(f"{studio.url}/assistants/search", {"limit": 50}):
        schemas = _request(f"{studio.url}/assistants/{assistant['assistant_id']}/schemas")
        form = (schemas["input_schema"] or {}).get("properties", {})
        assert "question" in form, (assistant["graph_id"], schemas["input_schema"])
    assert "Failed to get input schema" not in studio.log_text(), studio.log_tail()


def test_studio_runs_your_graph_and_its_new_role_on_the_scripted_policy(studio):
    state = studio.run("verified_rag", "Who is Ed Wood?", {"policy": "scripted", "trace_out": "scripted.jsonl"})
    assert (state["verdict"], state["stop_reason"], state["answer"]) == ("yes", "verified", "Ed Wood (film)")
    calls = read_jsonl(studio.folder / "traces" / "scripted.jsonl")
    assert [c.role for c in calls] == ["DS", "AG", "VF"] and len({c.run_id for c in calls}) == 1
    studio.assert_no_blocking_call()


def test_studio_server_run_with_a_json_context_keeps_one_trace(studio):
    state = studio.run("m_ask", "Who is Ed Wood?", {"policy": "scripted", "max_rounds": 2, "trace_out": "m_ask.jsonl"})
    assert state["answer"]
    assert_one_run(read_jsonl(studio.folder / "traces" / "m_ask.jsonl"), n_calls=6)
    studio.assert_no_blocking_call()


def assert_one_run(calls, n_calls):
    """One run id for every call, and within each turn the steps 0, 1, … in order."""
    assert len(calls) == n_calls and len({c.run_id for c in calls}) == 1
    for turn in {c.turn for c in calls}:
        assert [c.step for c in calls if c.turn == turn] == list(range(sum(c.turn == turn for c in calls)))


@pytest.mark.parametrize("name", ["m_ask", "jade"])
def test_a_studio_graph_with_a_json_context_shares_one_run_context(name, tmp_path, monkeypatch):
    import ragteam.graphs.apps.studio as studio

    monkeypatch.setenv("RAGTEAM_TRACE_DIR", str(tmp_path))
    context = {"policy": "scripted", "max_rounds": 2, "trace_out": "calls.jsonl"}
    state = asyncio.run(getattr(studio, name).ainvoke({"question": "Who is Ed Wood?"}, context=context))
    assert state["answer"]
    # m_ask on the plumbing policy: plan, search, summary, update, search (<end>), answer
    assert_one_run(read_jsonl(tmp_path / "calls.jsonl"), n_calls={"m_ask": 6, "jade": 2}[name])


def test_a_graph_without_a_context_schema_keeps_one_run_per_json_context(tmp_path, monkeypatch):
    """A user's graph that declares no context schema gets Studio's JSON context as a plain dict
    in every node: each run must still be one run (one id, one tracer), not one per call."""
    from ragteam.graphs.methods import get_method

    monkeypatch.setenv("RAGTEAM_TRACE_DIR", str(tmp_path))
    graph = get_method(str(ROOT / TUTORIAL)).graph()
    for _ in range(2):
        context = {"policy": "scripted", "trace_out": "calls.jsonl"}
        asyncio.run(graph.ainvoke({"question": "Who is Ed Wood?"}, context=context))
    calls = read_jsonl(tmp_path / "calls.jsonl")
    assert [c.role for c in calls] == ["DS", "AG", "VF"] * 2
    assert [len({c.run_id for c in calls[i:i + 3]}) for i in (0, 3)] == [1, 1]
    assert calls[0].run_id != calls[3].run_id


def test_studio_runs_do_no_blocking_io_on_the_event_loop(tmp_path, monkeypatch):
    """In-process, under the checks ``langgraph dev`` runs graphs with (no ``--allow-blocking``):
    every served graph, the tutorial's included, loads its team and retriever and opens its
    trace file off the event loop."""
    queue = pytest.importorskip("langgraph_runtime_inmem.queue")
    import ragteam.nodes.context
    from ragteam.graphs.apps.studio import served_methods

    monkeypatch.setenv("RAGTEAM_TRACE_DIR", str(tmp_path / "traces"))
    served = served_methods([str(ROOT / TUTORIAL)])

    async def run_all():
        checks = queue._enable_blockbuster()   # what the server's run queue turns on
        try:
            for name, method in served.items():
                monkeypatch.setattr(ragteam.nodes.context, "_PARTS", {})   # each run loads its own parts
                state = await method.graph().ainvoke(
                    {"question": "Who is Ed Wood?"},
                    context={"policy": "scripted", "max_rounds": 2, "trace_out": f"{name}.jsonl"})
                assert state["answer"], name
        finally:
            checks.deactivate()

    asyncio.run(run_all())
    assert {p.stem for p in (tmp_path / "traces").glob("*.jsonl")} == set(served)


def test_langgraph_json_lists_exactly_the_registered_methods():
    from ragteam.graphs.apps.studio import langgraph_config

    assert json.loads((ROOT / "langgraph.json").read_text()) == langgraph_config()


def test_a_studio_context_with_a_bad_setting_is_a_clear_error():
    with pytest.raises(ValueError, match="top_k must be an integer"):
        ContextSpec(top_k="five")
    with pytest.raises(ValueError, match="serial.fan_out must be an integer ≥ 0"):
        ContextSpec(serial={"fan_out": -1})
    with pytest.raises(ValueError, match=r"serial.example_steps must be 0 or one of \[2, 3, 4\], got 5"):
        ContextSpec(serial={"example_steps": 5})
    with pytest.raises(ValueError, match="serial: unknown key.*fanout; known: fan_out, example_steps"):
        ContextSpec(serial={"fanout": 2})
    with pytest.raises(ValueError, match="written.plan 'QDX'"):
        ContextSpec(written={"plan": "QDX"})
    with pytest.raises(ValueError, match="planning.fallback 'QDX'"):
        ContextSpec(planning={"fallback": "QDX"})
    with pytest.raises(ValueError, match=r"fan_out is now serial=\{'fan_out': N\}"):
        make_context("scripted", fan_out=2)
    with pytest.raises(ValueError, match=r"plan_choices is now planning=\{'choices'"):
        make_context("scripted", plan_choices=["RA,AG"])



def test_studio_asks_your_graph_for_the_question_alone_and_offers_the_context_form(tmp_path, monkeypatch):
    """A user's graph served by Studio: one required input (the question), the same context form
    as the built-in methods (policy, index, budgets), and the outputs it declared."""
    from ragteam.graphs.apps.studio import studio_graphs

    monkeypatch.setenv("RAGTEAM_TRACE_DIR", str(tmp_path))
    graph = studio_graphs([str(ROOT / TUTORIAL)])["verified_rag"]
    form = graph.get_input_jsonschema()
    assert list(form["properties"]) == ["question"] and form["required"] == ["question"]
    assert {"policy", "index", "top_k", "trace_out"} <= set(graph.get_context_jsonschema()["properties"])
    state = asyncio.run(graph.ainvoke({"question": "Who is Ed Wood?"}, context={"policy": "scripted"}))
    assert (state["verdict"], state["stop_reason"], state["answer"]) == ("yes", "verified", "Ed Wood (film)")
