"""`langgraph dev` (LangGraph Studio's local API server) serves every method graph, and a user's
own graph beside them through the config `ragteam studio` writes."""

import asyncio
import json
import os
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from graphs.methods import methods
from tests.conftest import free_port, wait_until_up
from nodes.tracing import read_jsonl

ROOT = Path(__file__).resolve().parents[1]


def _post(url, body, timeout=60):
    request = urllib.request.Request(url, data=json.dumps(body).encode(),
                                     headers={"content-type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read())


TUTORIAL = "examples/verified_rag.py:graph"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """One server for the module, started from a user's own folder with the config
    ``ragteam studio`` writes: the built-in graphs plus the tutorial's."""
    from graphs.apps.cli import main

    cli = shutil.which("langgraph", path=str(Path(sys.executable).parent)) or shutil.which("langgraph")
    if cli is None:
        pytest.fail("langgraph-cli is not installed (it is part of the test extra)")
    folder = tmp_path_factory.mktemp("my_project")
    assert main(["studio", str(ROOT / TUTORIAL), "--out", str(folder / "langgraph.json")]) == 0
    port = free_port()
    env = {**os.environ, "RAGTEAM_POLICY": "scripted", "HF_HUB_OFFLINE": "1"}
    process = subprocess.Popen([cli, "dev", "--config", "langgraph.json", "--host", "127.0.0.1", "--port",
                                str(port), "--no-browser", "--no-reload"], cwd=folder, env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    wait_until_up(f"{base}/ok", process, 120, "langgraph dev")
    yield base
    process.terminate()
    process.wait(timeout=30)


def test_studio_server_lists_every_method_graph_and_yours(server):
    assistants = _post(f"{server}/assistants/search", {"limit": 50})
    assert {a["graph_id"] for a in assistants} == {*methods(), "verified_rag"}


def test_studio_runs_your_graph_and_its_new_role_on_the_scripted_policy(server, tmp_path):
    out = tmp_path / "calls.jsonl"
    state = _post(f"{server}/runs/wait", {"assistant_id": "verified_rag", "input": {"question": "Who is Ed Wood?"},
                                          "context": {"policy": "scripted", "trace_out": str(out)}})
    assert (state["verdict"], state["stop_reason"], state["answer"]) == ("yes", "verified", "Ed Wood (film)")
    assert [c.role for c in read_jsonl(out)] == ["DS", "AG", "VF"]


def test_studio_server_runs_graphs_with_and_without_a_context(server):
    state = _post(f"{server}/runs/wait", {"assistant_id": "jade", "input": {
        "question": "Who portrayed Corliss Archer in the film Kiss and Tell?"}})
    assert state["answer"] == "Kiss and Tell (1945 film)" and state["tasks"][0]["status"] == "solved"
    state = _post(f"{server}/runs/wait", {"assistant_id": "m_ask", "input": {"question": "Who is Ed Wood?"},
                                          "context": {"policy": "scripted", "max_rounds": 1}})
    assert state["answer"] and state["turn"] == 1


def test_studio_server_run_with_a_json_context_keeps_one_trace(server, tmp_path):
    out = tmp_path / "calls.jsonl"
    _post(f"{server}/runs/wait", {"assistant_id": "m_ask", "input": {"question": "Who is Ed Wood?"},
                                  "context": {"policy": "scripted", "max_rounds": 2, "trace_out": str(out)}})
    assert_one_run(read_jsonl(out), n_calls=6)


def assert_one_run(calls, n_calls):
    """One run id for every call, and within each turn the steps 0, 1, … in order."""
    assert len(calls) == n_calls and len({c.run_id for c in calls}) == 1
    for turn in {c.turn for c in calls}:
        assert [c.step for c in calls if c.turn == turn] == list(range(sum(c.turn == turn for c in calls)))


@pytest.mark.parametrize("name", ["m_ask", "jade"])
def test_a_studio_graph_with_a_json_context_shares_one_run_context(name, tmp_path):
    import graphs.apps.studio as studio

    out = tmp_path / "calls.jsonl"
    context = {"policy": "scripted", "max_rounds": 2, "trace_out": str(out)}
    state = asyncio.run(getattr(studio, name).ainvoke({"question": "Who is Ed Wood?"}, context=context))
    assert state["answer"]
    # m_ask on the plumbing policy: plan, search, summary, update, search (<end>), answer
    assert_one_run(read_jsonl(out), n_calls={"m_ask": 6, "jade": 2}[name])


def test_langgraph_json_lists_exactly_the_registered_methods():
    from graphs.apps.studio import langgraph_config

    assert json.loads((ROOT / "langgraph.json").read_text()) == langgraph_config()
