"""A user's own graph has every door a built-in method has: the graph contract, references
(``file.py:NAME``, ``package.module:NAME``), entry points, open roles, the ``ragteam`` facade,
the CLI, Studio's config and the trainers' config. All on the scripted policy (no model)."""

import asyncio
import inspect
import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import TypedDict

import pytest
from langgraph.graph import END, START, StateGraph

import ragteam as rt
from ragteam.graphs.apps.cli import main
from ragteam.nodes.policies.protocol import GenerationRequest, SamplingParams
from ragteam.nodes.roles.base import plumbing_rule

ROOT = Path(__file__).resolve().parents[1]
TUTORIAL = str(ROOT / "examples" / "verified_rag.py") + ":graph"
QUESTION = "Who portrayed Corliss Archer in the film Kiss and Tell?"


def scripted_ctx(**rules):
    """Every role's plumbing rule, with ``rules`` taking precedence for the roles they name."""
    policy = rt.ScriptedPolicy(rules, rule_source=plumbing_rule)
    return rt.RunContext(rt.Team(policy), rt.demo_retriever())


# -- the graph contract ----------------------------------------------------------------------------
def test_the_readme_custom_example_runs_through_run():
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        import custom_graph
    finally:
        sys.path.remove(str(ROOT / "examples"))
    for graph in (custom_graph.from_topology, custom_graph.by_hand):
        result = rt.run(graph, QUESTION, scripted_ctx())
        assert result.answer == "Kiss and Tell (1945 film)"
        assert (result.stop_reason, result.costs["turns"]) == ("answered", 1)  # the contract's defaults
        assert result.costs["retrieval_calls"] == 2 and result.costs["llm_calls"] >= 2


def test_the_tutorial_retries_once_when_the_verifier_says_no_and_returns_its_verdict():
    graph = rt.get_method(TUTORIAL).graph()
    result = rt.run(graph, QUESTION, scripted_ctx(VF=["<verdict>no</verdict>", "<verdict>yes</verdict>"]))
    assert [t.role for t in result.transitions] == ["DS", "AG", "VF", "QR", "DS", "AG", "VF"]
    assert (result.stop_reason, result.costs["turns"], result.outputs) == ("verified", 2, {"verdict": "yes"})
    assert result.costs["retrieval_calls"] == 2
    stubborn = rt.run(graph, QUESTION, scripted_ctx(VF="<verdict>no</verdict>"))  # the budget ends it
    assert (stubborn.stop_reason, stubborn.costs["turns"], stubborn.outputs) == ("unverified", 2, {"verdict": "no"})
    broken = rt.run(graph, QUESTION, scripted_ctx(VF="maybe"))  # a violation takes the fallback
    assert broken.outputs == {"verdict": "yes"} and broken.costs["format_violations"] == 1


def _graph(inputs: dict, writes: dict) -> StateGraph:
    """A one-node graph taking ``inputs`` and writing ``writes``."""
    builder = StateGraph(TypedDict("S", {**inputs, **{k: str for k in writes}}, total=False),
                         input_schema=TypedDict("In", inputs, total=False))
    builder.add_node("write", lambda s: dict(writes))
    builder.add_edge(START, "write")
    builder.add_edge("write", END)
    return builder


@pytest.mark.parametrize("graph,outputs,message", [
    (_graph({"query": str}, {"answer": "x"}), (), "does not take 'question' as input (its input keys: query)"),
    (_graph({"question": str}, {"reply": "x"}), (), "never writes 'answer'"),
    (_graph({"question": str}, {"answer": "x"}), ("verdict",), "declares output 'verdict' but never writes it"),
    (42, (), "is a int, not a LangGraph graph"),
])
def test_a_graph_that_breaks_the_contract_is_refused_where_it_is_loaded(graph, outputs, message):
    with pytest.raises(rt.GraphContractError, match=message.replace("(", r"\(").replace(")", r"\)")):
        rt.ragteam_graph(graph, "g", outputs)
    with pytest.raises(rt.GraphContractError, match="never writes|does not take|not a LangGraph"):
        rt.register(rt.Method("broken_for_test", "x", build=lambda: graph, outputs=outputs))
    assert "broken_for_test" not in rt.methods()


def test_a_state_graph_is_compiled_and_adapted_once():
    builder = _graph({"question": str}, {"answer": "42"})
    graph = rt.ragteam_graph(builder, "answer_42")
    assert rt.ragteam_graph(graph) is graph  # already a ragteam graph
    result = rt.run(builder.compile(), "Q?", scripted_ctx())
    assert (result.answer, result.stop_reason, result.costs["turns"]) == ("42", "answered", 1)


# -- open roles ------------------------------------------------------------------------------------
def test_a_role_defined_after_the_scripted_policy_is_played_by_it():
    policy = rt.load_policy("scripted")
    role = rt.Role(name="ZZ_late_role", instruction="i", render=str, parse=lambda t, o: rt.Parsed(t),
                   plumbing="<ok>")
    [reply] = asyncio.run(policy.generate([role.request("o")]))
    assert reply.text == "<ok>"
    silent = GenerationRequest(({"role": "user", "content": "x"},), SamplingParams(4, 0.0, ()), role="ZZ_no_rule")
    with pytest.raises(KeyError, match="plumbing rule"):
        asyncio.run(policy.generate([silent]))


# -- references, the CLI and bad references --------------------------------------------------------
def test_every_cli_door_takes_the_tutorial_graph(tmp_path, capsys):
    assert main(["graphs", TUTORIAL]) == 0
    listing = capsys.readouterr().out
    assert "vanilla_rag" in listing and "verified_rag" in listing and "[file " in listing
    assert main(["run", "--graph", TUTORIAL, "--policy", "scripted", "--json", QUESTION]) == 0
    assert json.loads(capsys.readouterr().out)["outputs"] == {"verdict": "yes"}
    assert main(["draw", "--graph", TUTORIAL, "--out", str(tmp_path / "pictures")]) == 0
    svg = (tmp_path / "pictures" / "verified_rag.svg").read_text()
    assert all(f">{node}<" in svg for node in ("RA", "DS", "AG", "VF", "QR", "done"))
    assert main(["eval", "--graph", f"vanilla_rag,{TUTORIAL}", "--policy", "scripted", "--limit", "3",
                 "--out", str(tmp_path / "eval")]) == 0
    summary = (tmp_path / "eval" / "summary.md").read_text()
    assert "| vanilla_rag |" in summary and "| verified_rag |" in summary
    records = [json.loads(line) for line in (tmp_path / "eval" / "verified_rag" / "predictions.jsonl").open()]
    assert len(records) == 3 and all(r["outputs"] == {"verdict": "yes"} and r["stop_reason"] == "verified"
                                     for r in records)


def _write(path: Path, text: str) -> str:
    path.write_text(textwrap.dedent(text))
    return str(path)


def test_every_bad_reference_is_one_line_and_exit_2(tmp_path, capsys):
    raises = _write(tmp_path / "raises.py", "raise RuntimeError('boom')\n")
    plain = _write(tmp_path / "plain.py", """
        from langgraph.graph import END, START, StateGraph
        from typing import TypedDict
        class S(TypedDict, total=False):
            question: str
            reply: str
        number = 3
        def needs_args(x):
            return x
        b = StateGraph(S)
        b.add_node("n", lambda s: {"reply": "r"})
        b.add_edge(START, "n")
        b.add_edge("n", END)
        no_answer = b.compile()
    """)
    cases = {
        "nope": "unknown graph 'nope'; known graphs: ",
        "missing.py:graph": "no file missing.py",
        f"{raises}:graph": "importing " + raises + " raised RuntimeError: boom",
        f"{plain}:nothing": "has no attribute 'nothing' (graphs there: b, no_answer)",
        f"{plain}:number": "is a int, not a graph",
        f"{plain}:needs_args": "a graph factory must take no arguments",
        f"{plain}:no_answer": "breaks the graph contract: graph 'no_answer' never writes 'answer'",
        "no_such_package.module:graph": "no module named 'no_such_package'",
        "ragteam.graphs.methods.jade:nothing": "ragteam.graphs.methods.jade has no attribute 'nothing'",
    }
    for reference, message in cases.items():
        for command in (["run", "--graph", reference, "Q?"], ["eval", "--graph", reference, "--out", str(tmp_path / "e")],
                        ["draw", "--graph", reference, "--out", str(tmp_path / "d")], ["graphs", reference]):
            if command[0] in ("graphs", "draw") and ":" not in reference:  # draw: a workflow, then
                continue
            assert main(command) == 2, (command, reference)
            err = capsys.readouterr().err
            assert message in err and err.count("\n") == 1, (command, err)
    assert not (tmp_path / "e").exists()  # refused before any work


def test_a_package_module_reference_and_a_method_object_work(tmp_path, monkeypatch, capsys):
    package = tmp_path / "mypkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    _write(package / "graphs.py", """
        \"\"\"Two graphs of a user's package.\"\"\"
        import ragteam as rt
        from ragteam.graphs.methods.baselines import build_fixed_workflow_graph
        rewrite = rt.Method("rewrite_answer", "QR,RA,AG once", build=lambda: build_fixed_workflow_graph("QR,RA,AG", "x"),
                            frozen_roles=("QR",))
    """)
    monkeypatch.syspath_prepend(str(tmp_path))
    method = rt.get_method("mypkg.graphs:rewrite")
    assert (method.name, method.frozen_roles, method.source) == ("rewrite_answer", ("QR",), "module mypkg.graphs")
    assert main(["run", "--graph", "mypkg.graphs:rewrite", "--policy", "scripted", "--json", "Q?"]) == 0
    assert json.loads(capsys.readouterr().out)["stop_reason"] == "solved"


def test_installed_packages_add_methods_through_entry_points(tmp_path):
    """A fake installed distribution (a .dist-info folder on the path) declaring two methods in the
    ``ragteam.methods`` group: one good, one whose module is broken."""
    site = tmp_path / "site"
    (site / "demo_plugin-0.1.dist-info").mkdir(parents=True)
    (site / "demo_plugin-0.1.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: demo-plugin\nVersion: 0.1\n")
    (site / "demo_plugin-0.1.dist-info" / "entry_points.txt").write_text(
        "[ragteam.methods]\nplugin_rag = demo_plugin:make_graph\nplugin_broken = demo_plugin_broken:graph\n")
    _write(site / "demo_plugin.py", """
        from ragteam.graphs.methods.baselines import build_fixed_workflow_graph
        def make_graph():
            \"\"\"Retrieve, then answer: from an installed package.\"\"\"
            return build_fixed_workflow_graph("RA,AG", "plugin_rag")
    """)
    _write(site / "demo_plugin_broken.py", "import not_installed_anywhere\n")
    env = {**__import__("os").environ, "PYTHONPATH": f"{site}:{ROOT}"}

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "ragteam.graphs.apps.cli", *args], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=120)

    listing = cli("graphs")
    assert listing.returncode == 0, listing.stderr
    assert "plugin_rag" in listing.stdout and "from an installed package.  [entry point of demo-plugin]" in listing.stdout
    assert "plugin_broken" in listing.stdout and "No module named 'not_installed_anywhere'" in listing.stdout
    ran = cli("run", "--graph", "plugin_rag", "--policy", "scripted", "--json", "Who is Ed Wood?")
    assert ran.returncode == 0 and json.loads(ran.stdout)["answer"], ran.stderr
    broken = cli("run", "--graph", "plugin_broken", "--policy", "scripted", "Q?")
    assert broken.returncode == 2 and "graph 'plugin_broken' cannot be loaded" in broken.stderr


# -- Studio, the facade and the trainers' config ---------------------------------------------------
def test_ragteam_studio_writes_a_config_serving_your_graph_and_never_overwrites_a_foreign_file(tmp_path, capsys):
    out = tmp_path / "langgraph.json"
    assert main(["studio", "examples/verified_rag.py:graph", "--out", str(out)]) == 0
    config = json.loads(out.read_text())
    assert config["graphs"]["verified_rag"] == "ragteam.graphs.apps.studio:verified_rag"
    assert config["graphs"]["jade"] == "ragteam.graphs.apps.studio:jade"
    assert config["env"]["RAGTEAM_GRAPHS"] == TUTORIAL  # absolute: the server may start elsewhere
    assert main(["studio", "examples/verified_rag.py:graph", "--out", str(out)]) == 0  # ours: rewritten
    foreign = tmp_path / "mine.json"
    foreign.write_text('{"graphs": {"agent": "./agent.py:graph"}}')
    capsys.readouterr()
    assert main(["studio", "examples/verified_rag.py:graph", "--out", str(foreign)]) == 2
    assert "not a config `ragteam studio` wrote" in capsys.readouterr().err
    assert json.loads(foreign.read_text()) == {"graphs": {"agent": "./agent.py:graph"}}
    served = subprocess.run(  # the module the server imports serves the graph the config names
        [sys.executable, "-c", "import ragteam.graphs.apps.studio as s; print(s.verified_rag.name)"], cwd=ROOT,
        env={**__import__("os").environ, **config["env"]}, capture_output=True, text=True, timeout=120)
    assert served.stdout.strip() == "verified_rag", served.stderr


def test_a_reference_saved_before_the_move_under_ragteam_loads_ragteams_own_module(tmp_path, capsys):
    """Runs and Studio configs written before the packages moved under ``ragteam.`` name
    ``graphs.apps.studio:NAME``: it loads ``ragteam.graphs.apps.studio`` (with a note), never a
    second copy of ragteam's modules under the old names."""
    from ragteam.graphs.methods.references import canonical_reference

    new = "ragteam.graphs.apps.studio:jade"
    old = new.removeprefix("ragteam.")  # spelled so: the rename would rewrite the literal
    assert canonical_reference(old) == new
    assert rt.get_method(old).name == "jade"
    assert f"is now spelled {new!r}" in capsys.readouterr().err
    assert not [m for m in sys.modules if m.split(".")[0] in ("graphs", "nodes", "stores", "trainers")]
    out = tmp_path / "langgraph.json"  # a config `ragteam studio` wrote then is still its own to replace
    assert main(["studio", "examples/verified_rag.py:graph", "--out", str(out)]) == 0
    out.write_text(out.read_text().replace(f'"{new.split(":")[0]}:', f'"{old.split(":")[0]}:'))
    assert f'"{old}"' in out.read_text()
    assert main(["studio", "examples/verified_rag.py:graph", "--out", str(out)]) == 0
    assert json.loads(out.read_text())["graphs"]["jade"] == new


def test_a_projects_own_graphs_package_keeps_its_references(tmp_path, monkeypatch):
    """Installed under ``ragteam.``, ragteam leaves the names ``graphs`` and ``nodes`` to the
    user: a reference into a project's own ``graphs`` package is not taken for an old one of
    ragteam's."""
    from ragteam.graphs.methods.references import canonical_reference

    package = tmp_path / "graphs"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "mine.py").write_text((ROOT / "examples" / "verified_rag.py").read_text())
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        assert canonical_reference("graphs.mine:graph") == "graphs.mine:graph"
        assert rt.get_method("graphs.mine:graph").name == "verified_rag"
    finally:  # the project's modules leave with the test
        for name in ("graphs.mine", "graphs"):
            sys.modules.pop(name, None)


def test_every_public_name_resolves_with_a_docstring_and_import_is_light():
    undocumented = [name for name in rt.__all__ if not _documented(getattr(rt, name))]
    assert not undocumented
    unhinted = [name for name in rt.__all__ if inspect.isfunction(getattr(rt, name))
                and inspect.signature(getattr(rt, name)).return_annotation is inspect.Signature.empty]
    assert not unhinted
    light = subprocess.run([sys.executable, "-c", "import sys, ragteam; print('torch' in sys.modules)"],
                           cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert light.stdout.strip() == "False"
    with pytest.raises(AttributeError):
        rt.not_a_name


def _documented(value) -> bool:
    doc = getattr(value, "__doc__", None) or ""
    # a dataclass without a docstring gets its signature as __doc__: that is no documentation
    return bool(doc.strip()) and not doc.startswith(f"{getattr(value, '__name__', '')}(")


def test_the_trainer_config_takes_a_reference_and_makes_its_path_absolute():
    config = rt.TrainConfig(graph="examples/verified_rag.py:graph")
    assert config.graph == TUTORIAL
    with pytest.raises(ValueError, match="no file nowhere.py"):
        rt.TrainConfig(graph="nowhere.py:graph")


def test_a_method_freezing_a_mistyped_role_is_refused_before_training(tmp_path):
    """``Method(frozen_roles=("GD",))`` for a role named ``DG``: PPO would train the role meant to
    be frozen, silently. The training config names the graph and the unknown role."""
    from ragteam.trainers.config import TrainConfig

    _write(tmp_path / "typo_graph.py", """
        import ragteam as rt
        from ragteam.graphs.methods.baselines import build_fixed_workflow_graph
        graph = rt.Method("typo_graph", "RA,AG", build=lambda: build_fixed_workflow_graph("RA,AG", "typo_graph"),
                          frozen_roles=("GD",))
    """)
    with pytest.raises(ValueError, match="its Method freezes unknown role\\(s\\) GD; roles: "):
        TrainConfig(graph=f"{tmp_path / 'typo_graph.py'}:graph")
