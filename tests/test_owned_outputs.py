"""Nothing of a user's is overwritten, and a bad reference is one line: the owned-output rule
(every writer refuses what it did not create), names that are labels never paths, results reused
only by the graph that wrote them, and user code that raises or exits while it is loaded."""

import json
import os
from pathlib import Path

import pytest

from ragteam.graphs.apps.cli import main
from ragteam.graphs.apps.studio import langgraph_config
from ragteam.nodes.context import ContextSpec
from ragteam.stores.owned import EVAL, ForeignPathError, check_label, check_owned, new_file
from tests.conftest import one_error_line

ROOT = Path(__file__).resolve().parents[1]
TINY = ["--limit", "1"]


def user_file(folder: Path, text: str, name: str = "mine.py") -> str:
    path = folder / name
    path.write_text(text)
    return str(path)



def tree(folder: Path) -> dict:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# -- 1. a graph's name is a label, never a path --------------------------------------------------
@pytest.mark.parametrize("name", ["..", "../escaped", "/abs/x", ".hidden", "a/b", ""])
def test_a_name_that_is_a_path_is_refused(name):
    with pytest.raises(ValueError, match="not a plain name"):
        check_label(name)


@pytest.mark.parametrize("name", ["..", "../escaped", "/tmp/absolute"])
def test_a_method_named_like_a_path_never_writes_outside_out(name, tmp_path, capsys):
    graph = user_file(tmp_path, "from ragteam.graphs.methods import Method, build_graph\n"
                                f"method = Method({name!r}, 's', build=lambda: build_graph('vanilla_rag'))\n")
    (tmp_path / "failures.jsonl").write_text("mine\n")
    before = tree(tmp_path)
    assert main(["eval", "--graph", f"{graph}:method", "--policy", "scripted", "--out",
                 str(tmp_path / "out"), *TINY]) == 2
    assert "not a plain name" in one_error_line(capsys)
    assert tree(tmp_path) == before and not (tmp_path / "out").exists()


@pytest.mark.parametrize("name", ["..", "../escaped", "/tmp/absolute"])
def test_a_graph_compiled_with_a_path_as_name_is_named_after_its_attribute(name, tmp_path):
    graph = user_file(tmp_path, f"import sys\nsys.path.insert(0, {str(ROOT / 'examples')!r})\n"
                                f"from verified_rag import builder\ngraph = builder.compile(name={name!r})\n")
    (tmp_path / "failures.jsonl").write_text("mine\n")
    assert main(["eval", "--graph", f"{graph}:graph", "--policy", "scripted", "--out",
                 str(tmp_path / "out"), *TINY]) == 0
    assert (tmp_path / "failures.jsonl").read_text() == "mine\n"
    assert sorted(p.name for p in (tmp_path / "out").iterdir() if p.is_dir()) == ["graph"]


# -- 2. a user's folder is never adopted as an old eval folder ----------------------------------
def test_a_folder_made_to_look_like_an_eval_is_refused(tmp_path, capsys):
    out = tmp_path / "R"
    (out / "m").mkdir(parents=True)
    (out / "m" / "predictions.jsonl").write_text('{"id":"x"}\n')
    (out / "summary.md").write_text("mine\n")
    before = tree(out)
    assert main(["eval", "--policy", "scripted", "--graph", "vanilla_rag", "--out", str(out), *TINY]) == 2
    assert "did not create" in one_error_line(capsys)
    assert tree(out) == before and not (out / "f1_vs_cost.png").exists()


def test_an_unmarked_eval_folder_is_refused_with_how_to_mark_an_old_one(tmp_path, capsys):
    """An older ragteam's unmarked eval folder looks exactly like a user's folder made to look like
    one (with a summary.md of theirs a rerun would replace): never adopted; the user marks it."""
    out = tmp_path / "old"
    assert main(["eval", "--policy", "scripted", "--graph", "vanilla_rag", "--out", str(out), *TINY]) == 0
    (out / ".ragteam").unlink()
    (out / "summary.md").write_text("mine\n")
    before, _ = tree(out), capsys.readouterr()
    assert main(["eval", "--policy", "scripted", "--graph", "vanilla_rag", "--out", str(out), *TINY]) == 2
    assert "mark it with echo" in one_error_line(capsys) and tree(out) == before
    (out / ".ragteam").write_text('{"kind": "eval"}')  # as the message says
    assert main(["eval", "--policy", "scripted", "--graph", "vanilla_rag", "--out", str(out), *TINY]) == 0


# -- 3. studio writes only its own config --------------------------------------------------------
@pytest.mark.parametrize("existing", [
    {"graphs": {"x": "a.py:x"}}, {}, {"graphs": {}}, [1, 2],
    {**langgraph_config(), "python_version": "3.12", "dockerfile_lines": ["RUN true"]},
    langgraph_config(),  # the checked-in file: served by path, not written by `ragteam studio`
])
def test_studio_never_overwrites_a_config_it_did_not_write(existing, tmp_path, capsys):
    out = tmp_path / "langgraph.json"
    out.write_text(json.dumps(existing))
    before = out.read_bytes()
    assert main(["studio", str(ROOT / "examples/verified_rag.py:graph"), "--out", str(out)]) == 2
    assert "not a config `ragteam studio` wrote" in one_error_line(capsys)
    assert out.read_bytes() == before


def test_studio_rewrites_its_own_config_and_defaults_beside_the_checked_in_one(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "langgraph.json").write_text("mine")
    assert main(["studio", str(ROOT / "examples/verified_rag.py:graph")]) == 0
    assert main(["studio", str(ROOT / "examples/verified_rag.py:graph")]) == 0  # its own: rewritten
    assert (tmp_path / "langgraph.json").read_text() == "mine"
    assert "verified_rag" in json.loads((tmp_path / "langgraph.ragteam.json").read_text())["graphs"]


# -- 4. every other writer: draw, run --report/--trace-out, compare --out, the recipe -------------
def test_draw_refuses_a_users_folder_and_writes_into_its_own(tmp_path, capsys):
    mine = tmp_path / "pictures"
    mine.mkdir()
    (mine / "jade.svg").write_text("mine")
    assert main(["draw", "--graph", "jade", "--out", str(mine)]) == 2
    assert "did not create" in one_error_line(capsys)
    assert (mine / "jade.svg").read_text() == "mine"
    ours = tmp_path / "drawn"
    assert main(["draw", "--graph", "jade", "--out", str(ours)]) == 0
    assert main(["draw", "--graph", "jade", "--out", str(ours)]) == 0  # its own files: redrawn
    assert {p.name for p in ours.iterdir()} == {".ragteam", "jade.mmd", "jade.svg"}


def test_draw_never_writes_through_a_symlink(tmp_path, capsys):
    ours, target = tmp_path / "drawn", tmp_path / "elsewhere.svg"
    assert main(["draw", "--graph", "jade", "--out", str(ours)]) == 0
    target.write_text("mine")
    (ours / "jade.svg").unlink()
    (ours / "jade.svg").symlink_to(target)
    assert main(["draw", "--graph", "jade", "--out", str(ours)]) == 2
    assert "symlink" in one_error_line(capsys) and target.read_text() == "mine"


@pytest.mark.parametrize("flag", ["--report", "--trace-out"])
@pytest.mark.parametrize("kind", ["file", "symlink"])
def test_run_outputs_never_replace_a_file_or_follow_a_symlink(flag, kind, tmp_path, capsys):
    mine, path = tmp_path / "mine.txt", tmp_path / "out.x"
    mine.write_text("mine")
    if kind == "file":
        path.write_text("mine")
    else:
        path.symlink_to(mine)
    assert main(["run", "--policy", "scripted", "--graph", "vanilla_rag", flag, str(path), "Who?"]) == 2
    assert str(path) in one_error_line(capsys)
    assert mine.read_text() == "mine" and (kind == "symlink" or path.read_text() == "mine")


def test_run_creates_the_folders_of_its_outputs_before_any_model_work(tmp_path, capsys):
    report, trace = tmp_path / "reports" / "x.html", tmp_path / "traces" / "deep" / "t.jsonl"
    assert main(["run", "--policy", "scripted", "--graph", "vanilla_rag", "--report", str(report),
                 "--trace-out", str(trace), "Who is Ed Wood?"]) == 0
    assert report.stat().st_size > 0 and trace.stat().st_size > 0


def test_compare_out_never_replaces_a_file(tmp_path, capsys):
    out = tmp_path / "e"
    assert main(["eval", "--policy", "scripted", "--graph", "vanilla_rag,llm_only", "--out", str(out), *TINY]) == 0
    table = tmp_path / "table.md"
    table.write_text("mine")
    assert main(["compare", str(out / "llm_only"), str(out / "vanilla_rag"), "--out", str(table)]) == 2
    assert table.read_text() == "mine"


def test_new_file_refuses_what_exists_and_makes_missing_folders(tmp_path):
    (tmp_path / "f").write_text("x")
    for bad in ("f", ".", "f/x"):
        with pytest.raises(ForeignPathError):
            new_file(tmp_path / bad, "--out")
    assert new_file(tmp_path / "a" / "b" / "c.txt", "--out").parent.is_dir()


def test_the_recipe_refuses_a_users_folder_before_any_stage(tmp_path):
    import subprocess
    import sys

    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "report.md").write_text("mine")
    data = ROOT / "stores" / "data"
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(json.dumps({"graph": "jade", "eval_data": str(data / "hotpotqa_dev53_questions.jsonl"),
                                  "corpus": str(data / "hotpotqa_dev53_corpus.jsonl"), "policy": "scripted"}))
    done = subprocess.run([sys.executable, str(ROOT / "examples/learning_recipe.py"), "--config",
                           str(recipe), "--out", str(mine)],
                          capture_output=True, text=True, cwd=ROOT, timeout=120,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 2, done.stderr
    assert "did not create" in done.stderr and "Traceback" not in done.stderr
    assert {p.name for p in mine.iterdir()} == {"report.md"} and (mine / "report.md").read_text() == "mine"


# -- 6. results are reused only by the graph that wrote them -------------------------------------
def test_a_user_method_named_like_a_builtin_is_not_credited_with_its_results(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["eval", "--policy", "scripted", "--graph", "vanilla_rag", "--out", str(out), *TINY]) == 0
    capsys.readouterr()
    impostor = user_file(tmp_path, "from ragteam.graphs.methods import Method, build_graph\n"
                                   "method = Method('vanilla_rag', 'mine', build=lambda: build_graph('llm_only'))\n")
    assert main(["eval", "--policy", "scripted", "--graph", f"{impostor}:method", "--out", str(out), *TINY]) == 2
    assert "another graph" in one_error_line(capsys)


def test_headroom_refuses_a_graph_named_like_a_workflow_folder(tmp_path, capsys):
    mine = user_file(tmp_path, "from ragteam.graphs.methods import Method, build_graph\n"
                               "method = Method('wf-RA-AG', 'mine', build=lambda: build_graph('llm_only'))\n")
    assert main(["headroom", "--policy", "scripted", "--workflow", "RA,AG", "--graph", f"{mine}:method",
                 "--out", str(tmp_path / "h"), *TINY]) == 2
    assert "another candidate's folder" in one_error_line(capsys)
    assert not (tmp_path / "h").exists()


# -- 7. a Studio context's trace_out stays inside the server's trace folder ----------------------
@pytest.mark.parametrize("where", ["/etc/passwd", "../../x.jsonl", "a/../../x.jsonl"])
def test_a_context_trace_out_cannot_leave_the_trace_folder(where, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="trace folder"):
        ContextSpec(policy="scripted", trace_out=where).run_context()
    assert not (tmp_path / "traces").exists()


def test_a_context_trace_out_never_follows_a_symlink_out(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    ContextSpec(policy="scripted", trace_out="ok.jsonl").run_context()  # claims traces/
    (tmp_path / "traces" / "link").symlink_to(outside)
    with pytest.raises(ValueError, match="leaves"):
        ContextSpec(policy="scripted", trace_out="link/x.jsonl").run_context()
    (tmp_path / "traces" / "t.jsonl").symlink_to(outside / "t.jsonl")
    with pytest.raises(ValueError, match="leaves|symlink"):
        ContextSpec(policy="scripted", trace_out="t.jsonl").run_context()
    assert list(outside.iterdir()) == []


def test_a_context_trace_out_anywhere_needs_the_servers_opt_in(tmp_path, monkeypatch):
    monkeypatch.setenv("RAGTEAM_TRACE_ANYWHERE", "1")
    spec = ContextSpec(policy="scripted", trace_out=str(tmp_path / "elsewhere.jsonl"))
    assert spec.run_context().tracer.sink == tmp_path / "elsewhere.jsonl"


# -- 8. whatever a user's module raises while it loads is one line, exit 2 -----------------------
@pytest.mark.parametrize("body, said", [
    ("def graph():\n    raise RuntimeError('no GPU here')\n", "RuntimeError: no GPU here"),
    ("def graph():\n    import sys\n    sys.exit(3)\n", "SystemExit(3)"),
    ("import sys\nsys.exit(0)\ngraph = None\n", "SystemExit(0)"),
    ("exit()\ngraph = None\n", "SystemExit(None)"),
    ("raise KeyboardInterrupt\n", "KeyboardInterrupt"),
    ("from ragteam.graphs.methods import Method\n"
     "def build():\n    raise KeyError('docs')\n"
     "graph = Method('broken', 's', build=build)\n", "KeyError: 'docs'"),
])
@pytest.mark.parametrize("command", ["run", "eval", "graphs"])
def test_a_reference_that_raises_or_exits_is_one_line(body, said, command, tmp_path, capsys):
    reference = user_file(tmp_path, body) + ":graph"
    argv = {"run": ["run", "--policy", "scripted", "--graph", reference, "Who?"],
            "eval": ["eval", "--policy", "scripted", "--graph", reference, "--out", str(tmp_path / "o"), *TINY],
            "graphs": ["graphs", reference]}[command]
    assert main(argv) == 2
    line = one_error_line(capsys)
    assert reference in line and said in line
    assert not (tmp_path / "o").exists()


def test_a_method_whose_build_raises_is_one_line_for_the_trainer_too(tmp_path):
    import subprocess
    import sys

    reference = user_file(tmp_path, "from ragteam.graphs.methods import Method\n"
                                    "def build():\n    raise KeyError('docs')\n"
                                    "graph = Method('broken', 's', build=build)\n") + ":graph"
    done = subprocess.run([sys.executable, "trainers/ppo_graph.py", "--graph", reference,
                           "--out", str(tmp_path / "run"), "--steps", "1"],
                          capture_output=True, text=True, cwd=ROOT, timeout=120,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert "KeyError: 'docs'" in done.stderr and reference in done.stderr


# -- 9. headroom checks every input before it writes anything ----------------------------------
@pytest.mark.parametrize("extra, said", [
    (["--workflow", "XX"], "--workflow 'XX'"),
    (["--workflow", "RA,AG", "--workflow", "RA,AG"], "given twice"),
    (["--workflow", "RA,AG", "--workflow", "R,AG"], "given twice"),
    (["--top-k", "2", "--top-k", "2"], "given twice"),
    (["--graph", "nope"], "unknown graph"),
    (["--graph", "missing.py:graph"], "no file"),
    (["--data", "missing.jsonl"], "missing.jsonl"),
    (["--index", "missing"], "--index"),
    (["--policy", "hf:/nonexistent"], "/nonexistent"),
    (["--sampler", "vllm"], "--sampler vllm serves a model"),
])
def test_headroom_refuses_bad_input_before_writing(extra, said, tmp_path, capsys):
    out = tmp_path / "h"
    argv = ["headroom", "--policy", "scripted", "--out", str(out), "--limit", "1", *extra]
    assert main(argv) == 2
    assert said in one_error_line(capsys)
    assert not out.exists()


# -- eval, training, export and index folders that are not ragteam's ------------------------------
def test_eval_refuses_a_users_folder_and_leaves_it_alone(tmp_path, capsys):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "summary.md").write_text("my notes")
    assert main(["eval", "--graph", "llm_only", "--policy", "scripted", "--limit", "1", "--out", str(mine)]) == 2
    assert "not a ragteam eval folder" in capsys.readouterr().err
    assert (mine / "summary.md").read_text() == "my notes" and sorted(os.listdir(mine)) == ["summary.md"]


@pytest.mark.parametrize("name", ["summary.md", "llm_only/predictions.jsonl"])
def test_eval_never_writes_through_a_symlink_under_its_folder(name, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["eval", "--graph", "llm_only", "--policy", "scripted", "--limit", "1", "--out", str(out),
                 "--quiet"]) == 0
    target = tmp_path / "precious.txt"
    target.write_text("keep me")
    (out / name).unlink()
    (out / name).symlink_to(target)
    if name.endswith(".jsonl"):  # an unfinished eval, so the folder is written again
        (out / "llm_only" / "traces").rename(out / "old_traces")
    assert main(["eval", "--graph", "llm_only", "--policy", "scripted", "--limit", "2", "--out", str(out),
                 "--quiet"]) == 2
    assert "symlink" in capsys.readouterr().err and target.read_text() == "keep me"


def test_a_fresh_training_run_refuses_an_old_run_folder(tmp_path, capsys):
    from ragteam.trainers import ppo_graph

    out = tmp_path / "run"
    out.mkdir()
    (out / "metrics.jsonl").write_text('{"step": 1, "reward": 0.5}\n')
    assert ppo_graph.main(["--out", str(out), "--quiet"]) == 2
    assert "already holds a training run" in capsys.readouterr().err
    assert (out / "metrics.jsonl").read_text() == '{"step": 1, "reward": 0.5}\n'


def test_export_refuses_a_users_hf_folder(tmp_path, capsys):
    from ragteam.trainers import ppo_graph
    from ragteam.trainers.learner.checkpoint import export_hf

    from ragteam.stores.owned import TRAINING, claim

    hf = claim(tmp_path / "run", TRAINING) / "hf"  # a ragteam run folder, a user's hf/ in it
    hf.mkdir()
    (hf / "notes.txt").write_text("mine")
    assert ppo_graph.main(["--out", str(tmp_path / "run"), "--quiet"]) == 2  # before any work
    assert "not a ragteam exported model folder" in capsys.readouterr().err
    with pytest.raises(ForeignPathError):
        export_hf(None, None, hf)
    assert (hf / "notes.txt").read_text() == "mine"


def test_owned_folder_rules(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("x")
    for path in (afile, afile / "sub", ""):
        with pytest.raises(ForeignPathError):
            check_owned(path, EVAL)
    assert check_owned(tmp_path / "new", EVAL) == tmp_path / "new"

